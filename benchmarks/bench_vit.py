#!/usr/bin/env python
"""ViT-S against ResNet50 on the CPU: training and extraction images/s at 256x128, one run.

Models (seeded weights; speed does not depend on them), Circle head, 751 classes:

* ``resnet50``: the BoT-style baseline (last stride 1, BNNeck), this toolkit's ResNet50;
* ``vit_small``: ViT-S/16 (DeiT-S: width 384, 12 blocks, 6 heads), stride 16 (128 patches), class token;
* ``vit_small_jpm``: the same ViT with TransReID's stride 12 (210 patches) and JPM (5 x 384-d).

Training: ``benchmarks/bench_train.py --json`` (the real trainer step: forward, loss, backward,
optimizer; one batch in memory, each model in its own process). Extraction: the eval-mode
forward through ``Predictor.extract_arrays`` (resize of 256x128 uint8 crops, normalisation in the
model), in calls of ``--batch-size``. Every cell is measured ``--repeats`` times, interleaved
with the other models, and the best is kept (other processes share the machine); the table
gives ratios to ResNet50 from the same run.

    python benchmarks/bench_vit.py --threads 2 --batch-size 16 --train-iters 3 --repeats 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Dict, List

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
MODELS = ("resnet50", "vit_small", "vit_small_jpm")


def train_speed(name: str, args: argparse.Namespace) -> float:
    """Images/s of the training step of `name` (bench_train.py in a subprocess)."""
    cmd = [sys.executable, os.path.join(HERE, "bench_train.py"), "--model", name, "--device", "cpu", "--json",
           "--batch-size", str(args.batch_size), "--iters", str(args.train_iters), "--warmup", "1"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return float(json.loads(out.strip().splitlines()[-1])["images_per_s"])


def _predictor(name: str, batch: int):
    sys.path.insert(0, HERE)
    from bench_train import MODELS as TRAIN_MODELS

    from reid.config import get_cfg
    from reid.inference.predictor import Predictor
    from reid.modeling import build_model

    arch, backbone, size = TRAIN_MODELS[name]
    cfg = get_cfg()
    cfg.merge_from_list(["MODEL.META_ARCHITECTURE", arch, "MODEL.BACKBONE.NAME", backbone,
                         "MODEL.BACKBONE.PRETRAINED", False, "INPUT.SIZE_TRAIN", size, "INPUT.SIZE_TEST", size,
                         "MODEL.DEVICE", "cpu", "TEST.IMS_PER_BATCH", batch])
    if arch == "transreid":
        cfg.MODEL.TRANSREID.STRIDE_SIZE = [12, 12]
    torch.manual_seed(0)
    return Predictor(build_model(cfg).eval(), cfg, batch_size=batch, device="cpu")


def extract_speed(predictor, images: List[np.ndarray]) -> float:
    start = time.perf_counter()
    predictor.extract_arrays(images)
    return len(images) / (time.perf_counter() - start)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=16, help="images per training step and per extraction call")
    p.add_argument("--train-iters", type=int, default=3, help="timed training steps (after 1 warm-up step)")
    p.add_argument("--images", type=int, default=64, help="crops per extraction pass")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    p.add_argument("--out", default="", help="JSON file for the results")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (256, 128, 3), dtype=np.uint8) for _ in range(args.images)]
    predictors = {n: _predictor(n, args.batch_size) for n in args.models}
    for n in args.models:  # warm-up pass
        predictors[n].extract_arrays(images[: args.batch_size])
    best: Dict[str, Dict[str, float]] = {n: {"train": 0.0, "extract": 0.0} for n in args.models}
    for _ in range(args.repeats):
        for n in args.models:
            best[n]["extract"] = max(best[n]["extract"], extract_speed(predictors[n], images))
            best[n]["train"] = max(best[n]["train"], train_speed(n, args))
    ref = best.get("resnet50") or next(iter(best.values()))
    print(f"CPU: {platform.processor() or platform.machine()}, torch {torch.__version__}, {args.threads} threads, "
          f"batch {args.batch_size}, 256x128")
    print("| model | training images/s | ratio to ResNet50 | extraction images/s | ratio to ResNet50 |")
    print("|---|---|---|---|---|")
    for n, row in best.items():
        print(f"| {n} | {row['train']:.2f} | {row['train'] / ref['train']:.2f} | {row['extract']:.1f} | "
              f"{row['extract'] / ref['extract']:.2f} |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump({"args": vars(args), "results": best}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
