#!/usr/bin/env python
"""Seconds of one clustering step of learning without labels, end to end, split by stage, per
feature-pass runtime (UDA.EXTRACT_RUNTIME).

The crops: the synthetic renderer's people at 256x128 (seeded; the first `--crops` of the training
split in name order), JPEG files listed with their camera ids in a list file (``path camid``), so
that the run is the one a user with their own crops gets: DATASETS.NAMES [unlabelled] with
DATASETS.UNLABELLED.LIST. The run: OSNet x0.25 in torchreid's layout
(configs/MSMT17/osnet_x0_25_torchreid.yml) with seeded random weights (speed does not depend on
them), UDA.ENABLED, UDA.EPS auto, UDA.CAMERA_NEIGHBOURS and UDA.CAMERA_AWARE true,
MODEL.LOSSES.ID.LABEL_SMOOTH 0, built by the steps tools/train.py runs (reid.training.TrainingRun:
settings check, training data, config completed, model, UDA loader and hooks). Then one
ClusterEachEpoch step (reid/uda/hooks.py) with the model in train mode, as before an epoch, timed
as a whole; the stages come from its metrics record (extract, neighbours = the Jaccard graph,
tracklet cuts, radius choice, DBSCAN, memory reset) and "other" is the rest (health figures, the
log line). Each runtime gets a fresh build from the same seed (the same weights); the features of
every runtime are compared with the first one's (cosine per crop) and the clusters too.

    python benchmarks/bench_cluster_step.py --crops 7380 --runtime torch onnxruntime --output /tmp/step7k.json
    python benchmarks/bench_cluster_step.py --crops 32621 --runtime torch onnxruntime

Crops are rendered once into `--root` (a cache keyed by the renderer's settings): about 80 crops/s
on 2 cores, so 32,621 crops take 6-7 minutes the first time.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import tempfile
import time
from types import SimpleNamespace
from typing import Dict, List

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STAGES = (("extract", "seconds_extract"), ("neighbours", "seconds_distance"), ("cuts", "seconds_split"),
          ("radius", "seconds_radius"), ("dbscan", "seconds_dbscan"), ("memory", "seconds_memory"))


def write_crops(root: str, crops: int) -> str:
    """The list file of `crops` rendered 256x128 crops with their cameras (rendered when absent)."""
    from reid.data import build_dataset

    ids = int(crops / 14.5) + 10  # the renderer shows a person on about 14.6 of its 30 camera slots
    ds = build_dataset("synthetic", root, num_train_ids=ids, num_test_ids=2, num_cameras=6, images_per_camera=5,
                       num_distractors=0, image_size=(256, 128))
    train = sorted(ds.train)[:crops]
    if len(train) < crops:
        raise SystemExit(f"only {len(train)} crops rendered for {ids} identities; render more")
    path = os.path.join(root, f"crops_{crops}.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(f"{p} {cam}\n" for p, _, cam in train)
    return path


def build_run(config: str, list_file: str, runtime: str, out: str, workers: int, extra: List[str]):
    """The UDA run tools/train.py would build: (cfg, model, ClusterEachEpoch hook)."""
    from reid.config import load_config
    from reid.training.run import TrainingRequest, TrainingRun
    from reid.uda.hooks import ClusterEachEpoch
    from reid.utils.process import seed_everything

    opts = ["MODEL.DEVICE", "cpu", "MODEL.BACKBONE.PRETRAINED", "False", "UDA.ENABLED", "True",
            "DATASETS.NAMES", "['unlabelled']", "DATASETS.TESTS", "[]", "DATASETS.UNLABELLED.LIST", list_file,
            "UDA.EPS", "auto", "UDA.CAMERA_NEIGHBOURS", "True", "UDA.CAMERA_AWARE", "True",
            "MODEL.LOSSES.ID.LABEL_SMOOTH", "0", "OUTPUT_DIR", out, "SEED", "0", "UDA.EXTRACT_RUNTIME", runtime]
    if workers >= 0:
        opts += ["DATALOADER.NUM_WORKERS", str(workers)]
    cfg = load_config(config, opts + list(extra))
    run = TrainingRun(cfg, TrainingRequest(config_file=config))
    seed_everything(int(cfg.SEED), 0)
    run.check_settings()
    data = run.build_train_data()
    run.complete_config(data)
    model = run.build_model()
    _, hooks = run.build_loader_and_hooks(data, model)
    hook = next(h for h in hooks if isinstance(h, ClusterEachEpoch))
    return run.cfg, model, hook


def one_step(hook, model) -> Dict:
    """One clustering step as before epoch 1 (stand-in trainer: the hook reads only these fields)."""
    features: List[torch.Tensor] = []
    extract = hook.extract
    hook.extract = lambda m: features.append(extract(m)) or features[-1]
    model.train()
    hook.trainer = SimpleNamespace(epoch=0, iter=0, start_batch=0, model=model, log_records=[])
    start = time.perf_counter()
    hook.before_epoch()
    wall = time.perf_counter() - start
    record = dict(hook.trainer.log_records[-1])
    record["wall"] = wall
    return {"record": record, "feats": features[-1], "labels": hook.labels.copy()}


def timed_exports(times: List[float]) -> None:
    """Make the runtimes training hands in time their exports (the export is part of the extract stage)."""
    from reid.inference import cluster_runtime
    from reid.uda.extract_runtime import ExtractRuntime

    base = cluster_runtime.cluster_runtimes()["onnxruntime"]

    def build(model, size):
        t = time.perf_counter()
        try:
            return base.build(model, size)
        finally:
            times.append(time.perf_counter() - t)

    cluster_runtime.cluster_runtimes = lambda: {"onnxruntime": ExtractRuntime(build, base.packages, base.install_hint)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--crops", type=int, default=7380, help="training crops of 256x128")
    p.add_argument("--runtime", nargs="+", default=["torch", "onnxruntime"],
                   help="UDA.EXTRACT_RUNTIME values to time, in order (auto, torch, onnxruntime)")
    p.add_argument("--threads", type=int, default=0, help="torch's (and so ONNX Runtime's) threads; 0: torch's default")
    p.add_argument("--workers", type=int, default=-1, help="DATALOADER.NUM_WORKERS; -1: the config's")
    p.add_argument("--config", default="configs/MSMT17/osnet_x0_25_torchreid.yml")
    p.add_argument("--root", default=os.path.join(tempfile.gettempdir(), "bench_cluster_step"),
                   help="folder of the rendered crops (reused)")
    p.add_argument("--output", default=None, help="JSON file for the figures")
    p.add_argument("opts", nargs="*", help="more KEY VALUE config overrides")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    t = time.perf_counter()
    list_file = write_crops(args.root, args.crops)
    print(f"{args.crops} crops of 256x128 listed in {list_file} ({time.perf_counter() - t:.0f} s)", flush=True)
    exports: List[float] = []
    timed_exports(exports)
    said: List[str] = []  # the extractor's line: which runtime and why
    handler = logging.Handler()
    handler.emit = lambda r: said.append(r.getMessage())
    logging.getLogger("reid.uda.extract_runtime").addHandler(handler)
    logging.getLogger("reid.uda.extract_runtime").setLevel(logging.INFO)
    rows, first = [], None
    for runtime in args.runtime:
        exports.clear()
        said.clear()
        with tempfile.TemporaryDirectory(prefix="bench_cluster_step_") as out:
            cfg, model, hook = build_run(os.path.join(ROOT, args.config) if not os.path.isabs(args.config)
                                         else args.config, list_file, runtime, out, args.workers, args.opts)
            step = one_step(hook, model)
        rec = step["record"]
        row = {"runtime": runtime, "chosen": " | ".join(said), "crops": rec["images"],
               "threads": torch.get_num_threads(), "workers": int(cfg.DATALOADER.NUM_WORKERS),
               "seconds": rec["seconds"], "wall": rec["wall"]}
        for label, key in STAGES:
            row[label] = float(rec.get(key, 0.0))
        row["export"] = sum(exports)
        row["other"] = rec["seconds"] - sum(row[label] for label, _ in STAGES)
        row["crops_per_s"] = rec["images"] / row["extract"]
        row.update({"clusters": rec["clusters"], "images_kept": rec["images_kept"], "eps": rec["eps"]})
        if first is None:
            first = step
        else:
            cos = (step["feats"] * first["feats"]).sum(1)
            row["min_cosine_to_first"] = float(cos.min())
            row["same_labels_as_first"] = bool(np.array_equal(step["labels"], first["labels"]))
        rows.append(row)
        print(" ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()), flush=True)
    machine = {"cpu": _cpu_name(), "cores": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
               "date": time.strftime("%Y-%m-%d %H:%M")}
    try:
        import onnxruntime
        machine["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    print(json.dumps(machine))
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            json.dump({"machine": machine, "rows": rows}, f, indent=2)


def _cpu_name() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=False).stdout
        return next((line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")), "?")
    except OSError:
        return platform.processor() or "?"


if __name__ == "__main__":
    main()
