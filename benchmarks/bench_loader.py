#!/usr/bin/env python
"""Throughput of the training data pipeline alone (no model): can it feed the GPU?

Measures, on a generated synthetic dataset whose JPEGs have the size of real re-ID crops
(128x64, like Market-1501's; ``--source-size``), resized to the training input (256x128,
``--input-size``) with the default training augmentation (flip, pad + random crop, random
erasing):

* per-stage cost in one process with one torch/OpenCV thread, as inside a loader worker:
  reading + decoding a JPEG, the training transform, the DataLoader's collation of a batch,
  and the ``Dataset.__getitem__`` total;
* the real ``build_train_loader`` (identity sampler, P x K batches) with each ``--workers``
  count: images/s once running, and the latency from the start of an epoch to its first
  batch (workers are started again each epoch; see ``build_train_loader``).

A data pipeline limits training when its images/s is below the model's images/s
(``benchmarks/bench_train.py``); the per-image cost tells how many cores a target needs.

    python benchmarks/bench_loader.py                       # workers 1 and 2, Market-size JPEGs
    python benchmarks/bench_loader.py --workers 0 1 2 --epochs 3 --batch-size 64
    python benchmarks/bench_loader.py --source-size 256 128 # JPEGs already at the input size
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import cv2  # noqa: E402
import torch  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="loader worker counts to measure")
    p.add_argument("--batch-size", type=int, default=64, help="images per batch (P x K with K = 4)")
    p.add_argument("--epochs", type=int, default=2, help="epochs per worker count (the first start is included)")
    p.add_argument("--source-size", type=int, nargs=2, default=[128, 64], metavar=("H", "W"),
                   help="size of the JPEGs on disk (Market-1501 crops: 128 64)")
    p.add_argument("--input-size", type=int, nargs=2, default=[256, 128], metavar=("H", "W"),
                   help="training input size INPUT.SIZE_TRAIN")
    p.add_argument("--ids", type=int, default=150, help="synthetic training identities (x6 cameras x5 images)")
    p.add_argument("--stage-images", type=int, default=500, help="images timed per stage")
    p.add_argument("--data-root", default=os.path.join(tempfile.gettempdir(), "reid_bench_data"),
                   help="where the synthetic dataset is generated (cached)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p.parse_args(argv)


def make_cfg(args: argparse.Namespace, workers: int):
    """Default training config on the synthetic dataset with the benchmark's sizes."""
    from reid.config import get_cfg

    cfg = get_cfg()
    cfg.DATASETS.ROOT = args.data_root
    cfg.DATASETS.NAMES = ["synthetic"]
    s = cfg.DATASETS.SYNTHETIC
    s.NUM_TRAIN_IDS, s.NUM_TEST_IDS, s.IMAGE_SIZE = args.ids, 10, list(args.source_size)
    cfg.INPUT.SIZE_TRAIN = list(args.input_size)
    cfg.SOLVER.IMS_PER_BATCH = args.batch_size
    cfg.DATALOADER.NUM_WORKERS = workers
    cfg.DATALOADER.NUM_INSTANCE = 4
    return cfg


def _per_image_ms(fn, items, repeat_until: int) -> float:
    n, t0 = 0, time.perf_counter()
    while n < repeat_until:
        for it in items:
            fn(it)
            n += 1
            if n >= repeat_until:
                break
    return 1000 * (time.perf_counter() - t0) / n


def stage_costs(args: argparse.Namespace, items) -> Dict[str, float]:
    """Milliseconds per image of each stage, one thread (a loader worker's situation)."""
    from reid.data.dataset_wrappers import ImageDataset, collate_batch
    from reid.data.image_io import read_image
    from reid.data.transforms import build_transforms

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    try:
        cfg = make_cfg(args, 0)
        tf = build_transforms(cfg, is_train=True)
        subset = items[: args.stage_images]
        paths = [p for p, _, _ in subset]
        read_ms = _per_image_ms(read_image, paths, args.stage_images)
        decoded = [read_image(p) for p in paths]
        torch.manual_seed(0)
        tf_ms = _per_image_ms(tf, decoded, args.stage_images)
        ds = ImageDataset(subset, tf)
        item_ms = _per_image_ms(ds.__getitem__, range(len(ds)), args.stage_images)
        samples = [ds[i] for i in range(min(args.batch_size, len(ds)))]
        reps = 20
        t0 = time.perf_counter()
        for _ in range(reps):
            collate_batch(samples)
        collate_ms = 1000 * (time.perf_counter() - t0) / (reps * len(samples))
    finally:
        torch.set_num_threads(threads)
    return {"read_decode_ms": read_ms, "transform_ms": tf_ms, "collate_ms": collate_ms, "getitem_ms": item_ms}


def loader_rate(args: argparse.Namespace, workers: int) -> Dict[str, float]:
    """Images/s of build_train_loader with `workers` workers, and the epoch-start latency."""
    from reid.data import build_train_data, build_train_loader

    cfg = make_cfg(args, workers)
    data = build_train_data(cfg)
    loader = build_train_loader(cfg, data.items)
    starts, rates = [], []
    for epoch in range(args.epochs):
        loader.sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        it = iter(loader)
        first = next(it)
        t1 = time.perf_counter()
        n = 0
        for batch in it:
            n += int(batch["images"].shape[0])
        t2 = time.perf_counter()
        del first
        starts.append(t1 - t0)
        rates.append(n / (t2 - t1))
    return {
        "workers": workers,
        "batches_per_epoch": len(loader),
        "images_per_s": sum(rates) / len(rates),
        "first_batch_s": sum(starts) / len(starts),
        "epoch_s": sum(starts) / len(starts) + len(loader) * args.batch_size / (sum(rates) / len(rates)),
    }


def report(args: argparse.Namespace, stages: Dict[str, float], rows: List[Dict[str, float]]) -> str:
    src = "x".join(map(str, args.source_size))
    dst = "x".join(map(str, args.input_size))
    lines = [
        f"host: {platform.node()} | {platform.processor() or platform.machine()} | {os.cpu_count()} CPUs | "
        f"torch {torch.__version__} | OpenCV {cv2.__version__}",
        f"JPEG {src} -> input {dst}, batch {args.batch_size}",
        "",
        "| stage (one thread) | ms per image | images/s per core |",
        "|---|---|---|",
    ]
    names = {"read_decode_ms": "read + decode JPEG", "transform_ms": "train transform",
             "collate_ms": "collate", "getitem_ms": "Dataset.__getitem__ (read + transform)"}
    for key, label in names.items():
        lines.append(f"| {label} | {stages[key]:.3f} | {1000 / stages[key]:,.0f} |")
    lines += ["", "| workers | batches/epoch | images/s (running) | first batch of an epoch (s) | epoch (s) |",
              "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['workers']} | {r['batches_per_epoch']} | {r['images_per_s']:,.0f} | "
                     f"{r['first_batch_s']:.3f} | {r['epoch_s']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    from reid.data import build_train_data

    items = build_train_data(make_cfg(args, 0)).items  # draws (or reuses) the dataset
    stages = stage_costs(args, items)
    rows = [loader_rate(args, w) for w in args.workers]
    print(report(args, stages, rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"stages": stages, "loaders": rows, "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
