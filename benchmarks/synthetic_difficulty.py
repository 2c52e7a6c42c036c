#!/usr/bin/env python
"""How hard is the synthetic dataset for a model that learns nothing?

Ranks the gallery for every query by the distance between raw pixels (images shrunk to
``--pixels`` and flattened) with two metrics, L2 and cosine, and prints rank-1 / mAP under the
Market-1501 protocol (gallery images of the query's identity from the query's camera are
ignored; distractors count as wrong matches). The dataset is meant to keep this below 50% R-1
while a trained network clears 80%.

    python benchmarks/synthetic_difficulty.py --root datasets
    python benchmarks/synthetic_difficulty.py --root /tmp/d --num-train-ids 100 --num-test-ids 100 --seed 1
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import cv2
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from reid.data import build_dataset  # noqa: E402
from reid.data.image_io import read_image  # noqa: E402


def rank1_map(dist: np.ndarray, q_pids, g_pids, q_cams, g_cams):
    """Brute-force R-1 and mAP (plain average precision at each hit) with same-camera filtering."""
    q_pids, g_pids, q_cams, g_cams = map(np.asarray, (q_pids, g_pids, q_cams, g_cams))
    order = np.argsort(dist, axis=1, kind="stable")
    match = g_pids[order] == q_pids[:, None]
    keep = ~(match & (g_cams[order] == q_cams[:, None]))
    r1, aps = [], []
    for m, k in zip(match, keep):
        m = m[k]
        if not m.any():
            continue
        r1.append(float(m[0]))
        hits = np.flatnonzero(m)
        aps.append(float(np.mean(np.arange(1, len(hits) + 1) / (hits + 1))))
    return float(np.mean(r1)), float(np.mean(aps)), len(r1)


def evaluate(dist, q, g):
    """Use reid.evaluation.evaluate_rank when it exists, else the brute-force code above."""
    args = ([i[1] for i in q], [i[1] for i in g], [i[2] for i in q], [i[2] for i in g])
    try:
        from reid.evaluation import evaluate_rank  # noqa: WPS433 (optional, written separately)
    except ImportError:
        return rank1_map(dist, *args) + ("brute force",)
    res = evaluate_rank(dist, *(np.asarray(a) for a in args), max_rank=10)
    return float(res["cmc"][0]), float(res["mAP"]), int(res["num_valid_queries"]), "reid.evaluation"


def pixels(items, size):
    h, w = size
    out = np.stack([cv2.resize(read_image(p), (w, h), interpolation=cv2.INTER_AREA) for p, _, _ in items])
    return out.reshape(len(items), -1).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="datasets")
    ap.add_argument("--num-train-ids", type=int, default=100)
    ap.add_argument("--num-test-ids", type=int, default=100)
    ap.add_argument("--num-cameras", type=int, default=6)
    ap.add_argument("--images-per-camera", type=int, default=5)
    ap.add_argument("--num-distractors", type=int, default=-1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--image-size", type=int, nargs=2, default=[128, 64])
    ap.add_argument("--pixels", type=int, nargs="+", default=[32, 16, 128, 64],
                    help="pairs H W of sizes the raw pixels are shrunk to (default: 32 16 and 128 64)")
    args = ap.parse_args()
    ds = build_dataset("synthetic", args.root, num_train_ids=args.num_train_ids, num_test_ids=args.num_test_ids,
                       num_cameras=args.num_cameras, images_per_camera=args.images_per_camera,
                       num_distractors=args.num_distractors, seed=args.seed, image_size=args.image_size)
    print(ds.summary())
    q, g = ds.query, ds.gallery
    sizes = list(zip(args.pixels[0::2], args.pixels[1::2]))
    print(f"\n{'features':<22} {'metric':<7} {'R-1':>6} {'mAP':>6}  queries  (evaluator)")
    for size in sizes:
        t = time.time()
        fq, fg = pixels(q, size), pixels(g, size)
        l2 = (fq ** 2).sum(1)[:, None] + (fg ** 2).sum(1)[None, :] - 2 * fq @ fg.T
        nq = fq / np.linalg.norm(fq, axis=1, keepdims=True)
        ng = fg / np.linalg.norm(fg, axis=1, keepdims=True)
        for metric, dist in (("L2", l2), ("cosine", 1 - nq @ ng.T)):
            r1, mAP, n, how = evaluate(dist, q, g)
            print(f"raw pixels {size[0]}x{size[1]:<11} {metric:<7} {100 * r1:6.1f} {100 * mAP:6.1f}  {n:7d}  ({how})")
        del t


if __name__ == "__main__":
    main()
