#!/usr/bin/env python
"""CPU feature extraction: images/s at batch 32 and latency at batch 1, per inference backend,
against torchreid 0.2.5's ``FeatureExtractor`` on the same model, weights and images.

Models: osnet_x0_25 and osnet_x1_0 in torchreid's layout (``configs/Market1501/<name>_torchreid.yml``;
torchreid's ``FeatureExtractor`` gets the same weights, saved in torchreid's format), and the
BoT ResNet50 (``configs/Market1501/bot_resnet50.yml``: last stride 1, BNNeck); torchreid has no
BoT model, so its column for that row is torchreid's own ``resnet50`` (last stride 2: a quarter
of the conv5 work), marked as such. Weights are seeded (speed does not depend on them).

Each side gets the same RGB uint8 crops of 256x128 (numpy arrays, as a tracker hands them
over) and does its own preprocessing: this toolkit's ``Predictor.extract_arrays`` (resize,
uint8 pixels into the model, normalisation inside), torchreid's ``FeatureExtractor.__call__``
(PIL, ToTensor, Normalize per image). Throughput: all images in calls of 32; latency: one image
per call (median). Every cell is measured ``--repeats`` times, interleaved with the others, and
the best is kept, so that load from other processes on a shared machine costs as little as
possible; the table reports ratios to torchreid measured in the same run. The non-PyTorch
backends' features are compared with PyTorch fp32 (max abs difference).

    python benchmarks/bench_extract.py --torchreid-python /path/to/torchreid-env/bin/python --threads 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Sequence

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = (256, 128)
MODELS = {  # name -> (our config, torchreid's model name)
    "osnet_x0_25": ("configs/Market1501/osnet_x0_25_torchreid.yml", "osnet_x0_25"),
    "osnet_x1_0": ("configs/Market1501/osnet_x1_0_torchreid.yml", "osnet_x1_0"),
    "bot_resnet50": ("configs/Market1501/bot_resnet50.yml", "resnet50"),
}


def crops(num: int, seed: int = 0) -> List[np.ndarray]:
    """Smooth random RGB uint8 crops of SIZE."""
    rng = np.random.default_rng(seed)
    import cv2

    coarse = rng.integers(0, 256, (num, SIZE[0] // 16, SIZE[1] // 16, 3)).astype(np.uint8)
    return [cv2.resize(c, (SIZE[1], SIZE[0]), interpolation=cv2.INTER_LINEAR) for c in coarse]


def throughput(run: Callable[[List[np.ndarray]], object], images: List[np.ndarray], batch: int = 32) -> float:
    start = time.perf_counter()
    for i in range(0, len(images), batch):
        run(images[i:i + batch])
    return len(images) / (time.perf_counter() - start)


def latency_ms(run: Callable[[List[np.ndarray]], object], images: List[np.ndarray], calls: int) -> float:
    times = []
    for i in range(calls):
        start = time.perf_counter()
        run([images[i % len(images)]])
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


# ------------------------------------------------------------------ torchreid side (its own env)
def run_torchreid(args: argparse.Namespace) -> None:
    from torchreid.reid.utils import FeatureExtractor

    torch.set_num_threads(args.threads)
    images = list(np.load(args.images))
    out = {}
    for name, weights in json.loads(args.jobs).items():
        extractor = FeatureExtractor(model_name=MODELS[name][1], model_path=weights, image_size=SIZE, device="cpu",
                                     verbose=False)
        run = lambda batch: extractor(list(batch))  # noqa: E731  numpy arrays, as a tracker passes them
        run(images[:32])
        out[name] = {"ips": max(throughput(run, images) for _ in range(args.repeats)),
                     "ms": min(latency_ms(run, images, args.calls) for _ in range(args.repeats)),
                     "model": MODELS[name][1]}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f)


# ------------------------------------------------------------------ our side
def _torchreid_file(model: torch.nn.Module, path: str) -> str:
    """Our torchreid-layout model's weights under torchreid's names (what its FeatureExtractor loads)."""
    names = {"backbone.": "", "embedding.": "fc.", "head.": "classifier."}
    state = {}
    for key, value in model.state_dict().items():
        prefix = next((p for p in names if key.startswith(p)), None)
        if prefix is not None:  # a BNNeck has no place in torchreid's models
            state[names[prefix] + key[len(prefix):]] = value
    torch.save(state, path)
    return path


def our_predictors(name: str, threads: int, backends: Sequence[str]):
    sys.path.insert(0, ROOT)
    from reid.config import load_config
    from reid.inference import Predictor
    from reid.modeling import build_model

    cfg = load_config(os.path.join(ROOT, MODELS[name][0]), ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.DEVICE", "cpu"])
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    found = {}
    for backend in backends:
        found[backend] = {b: Predictor(model, cfg, batch_size=b, backend=backend) for b in (32, 1)}
    return model, found


def main(argv: Sequence[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torchreid-python", help="python of an environment with torchreid 0.2.5 (omit to skip it)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--images", type=int, default=256, help="crops per throughput pass")
    p.add_argument("--calls", type=int, default=40, help="single-image calls per latency pass")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--out", default="", help="JSON file for the results")
    p.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--jobs", help=argparse.SUPPRESS)
    p.add_argument("--images-file", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.reference:
        args.images = args.images_file
        run_torchreid(args)
        return 0
    torch.set_num_threads(args.threads)
    images = crops(args.images)
    backends = ["torch", "onnxruntime"]
    try:
        import openvino  # noqa: F401
        backends.append("openvino")
    except ImportError:
        print("openvino is not installed: its column is left out (pip install openvino)", flush=True)
    work = tempfile.mkdtemp(prefix="bench_extract_")
    results: Dict[str, Dict[str, object]] = {}
    jobs = {}
    for name in args.models:
        model, predictors = our_predictors(name, args.threads, backends)
        reference = predictors["torch"][32].extract_arrays(images[:64])
        row: Dict[str, object] = {"feature_dim": int(model.feature_dim)}
        for backend, pair in predictors.items():
            pair[32].extract_arrays(images[:32])  # warm-up
            pair[1].extract_arrays(images[:1])
            row[f"{backend}_max_abs_diff"] = float(np.abs(pair[32].extract_arrays(images[:64]) - reference).max())
        best = {b: {"ips": 0.0, "ms": float("inf")} for b in predictors}
        for _ in range(args.repeats):  # interleaved, so that a burst of load hits every backend alike
            for backend, pair in predictors.items():
                best[backend]["ips"] = max(best[backend]["ips"], throughput(pair[32].extract_arrays, images))
                best[backend]["ms"] = min(best[backend]["ms"], latency_ms(pair[1].extract_arrays, images, args.calls))
        row.update({f"{b}_{k}": v for b, cell in best.items() for k, v in cell.items()})
        results[name] = row
        print(name, json.dumps(row), flush=True)
        jobs[name] = _torchreid_file(model, os.path.join(work, f"{name}.pth"))
    if args.torchreid_python:
        np.save(os.path.join(work, "images.npy"), np.stack(images))
        out = os.path.join(work, "torchreid.json")
        subprocess.run([args.torchreid_python, os.path.abspath(__file__), "--reference", "--jobs", json.dumps(jobs),
                        "--images-file", os.path.join(work, "images.npy"), "--out", out, "--threads",
                        str(args.threads), "--repeats", str(args.repeats), "--calls", str(args.calls)], check=True,
                       env=dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1"))
        with open(out, encoding="utf-8") as f:
            for name, cell in json.load(f).items():
                results[name].update({f"torchreid_{k}": v for k, v in cell.items()})
    print(f"\n{platform.processor() or platform.machine()}, {args.threads} threads, torch {torch.__version__}")
    print("| model | backend | images/s (batch 32) | x torchreid | latency batch 1 (ms) | torchreid / ours | "
          "max abs diff to PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for name, row in results.items():
        ref_ips, ref_ms = row.get("torchreid_ips"), row.get("torchreid_ms")
        for backend in backends + (["torchreid"] if ref_ips else []):
            ips, ms = row[f"{backend}_ips"], row[f"{backend}_ms"]
            ratio = f"{ips / ref_ips:.2f}" if ref_ips else "-"
            lat = f"{ref_ms / ms:.2f}" if ref_ms else "-"
            diff = f"{row[f'{backend}_max_abs_diff']:.1e}" if backend != "torchreid" else "-"
            label = backend if backend != "torchreid" else f"torchreid FeatureExtractor ({row['torchreid_model']})"
            print(f"| {name} | {label} | {ips:.1f} | {ratio} | {ms:.2f} | {lat} | {diff} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"threads": args.threads, "results": results}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
