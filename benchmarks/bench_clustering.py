#!/usr/bin/env python
"""Time and peak memory of one clustering step of learning without labels at 100,000 images.

What ``UDA.ENABLED`` runs before every epoch after feature extraction: the sparse k-reciprocal
Jaccard graph within eps (reid.evaluation.jaccard, the re-ranking machinery) and DBSCAN on it
(reid.uda.clustering). Features are synthetic but shaped like a trained model's on a large
unlabelled set: 2048-d, one unit-norm centre per identity (~20 images each), a per-camera
offset and per-image noise of norm `--noise` (1.0: an image's cosine to its identity's centre
is about 0.7, as for a model on images like its training data; bench_evaluation.py's 3.3 is
a test set's harder neighbourhoods, where eps 0.6 finds almost no cluster), L2-normalised. The step runs in this process after the
features are made; the peak-RSS mark is reset just before it (/proc/self/clear_refs), so "peak
- inputs" is what clustering itself needed. The pseudo-labels' ARI against the synthetic
identities is printed as a check that the step did real work.

    python benchmarks/bench_clustering.py                              # 100,000 x 2048, k1 30, k2 6, eps 0.6
    python benchmarks/bench_clustering.py --num-images 20000 --dim 512
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))


def synthetic_features(num_images: int, dim: int, noise: float = 1.0, per_id: int = 20, num_cams: int = 15,
                       seed: int = 0):
    """(features [N, D] float32 torch, identities [N]) with re-ID-like structure."""
    import torch

    num_ids = max(1, num_images // per_id)
    rng = np.random.default_rng(seed)
    pids = rng.integers(0, num_ids, num_images)
    cams = rng.integers(0, num_cams, num_images)
    gen = torch.Generator().manual_seed(seed)
    centers = torch.nn.functional.normalize(torch.randn(num_ids, dim, generator=gen), dim=1)
    cam_bias = 0.3 * torch.nn.functional.normalize(torch.randn(num_cams, dim, generator=gen), dim=1)
    out = torch.empty(num_images, dim)
    for a in range(0, num_images, 8192):
        p, c = torch.from_numpy(pids[a : a + 8192]), torch.from_numpy(cams[a : a + 8192])
        x = torch.randn(len(p), dim, generator=gen).mul_(noise / dim**0.5)
        x += centers[p] + cam_bias[c]
        out[a : a + 8192] = torch.nn.functional.normalize(x, dim=1)
    return out, pids


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-images", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=2048)
    p.add_argument("--k1", type=int, default=30)
    p.add_argument("--k2", type=int, default=6)
    p.add_argument("--eps", type=float, default=0.6)
    p.add_argument("--min-samples", type=int, default=4)
    p.add_argument("--noise", type=float, default=1.0, help="norm of the per-image noise (centres have norm 1)")
    args = p.parse_args(argv)

    import torch

    from bench_evaluation import _reset_peak, _rss_bytes
    from reid.evaluation.jaccard import jaccard_graph
    from reid.uda import dbscan, pseudo_label_scores

    feats, pids = synthetic_features(args.num_images, args.dim, args.noise)
    reset = _reset_peak()
    before = _rss_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    graph = jaccard_graph(feats, args.k1, args.k2, args.eps)
    t1 = time.perf_counter()
    labels = dbscan(graph, args.eps, args.min_samples)
    t2, c2 = time.perf_counter(), time.process_time()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    scores = pseudo_label_scores(labels, pids)
    gb = 1024**3
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"N={args.num_images:,} D={args.dim} noise={args.noise} k1={args.k1} k2={args.k2} eps={args.eps} "
          f"min_samples={args.min_samples}")
    print(f"jaccard graph {t1 - t0:.1f} s ({graph.nnz:,} pairs within eps), DBSCAN {t2 - t1:.1f} s; "
          f"total {t2 - t0:.1f} s wall, {c2 - c0:.1f} s CPU")
    print(f"memory: inputs {before / gb:.2f} GB, peak {peak / gb:.2f} GB, peak - inputs "
          f"{(peak - before) / gb:.2f} GB{'' if reset else ' (peak mark not reset: includes input generation)'}")
    print(f"clusters {int(labels.max()) + 1:,} ({(labels >= 0).sum():,} images kept) for "
          f"{scores['true_ids']:,} identities; ARI {scores['ari']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
