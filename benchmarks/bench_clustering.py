#!/usr/bin/env python
"""Time and peak memory of one clustering step of learning without labels, exact or approximate.

What ``UDA.ENABLED`` runs before every epoch after feature extraction: the sparse k-reciprocal
Jaccard graph within eps (reid.evaluation.jaccard, the re-ranking machinery) on the k nearest
neighbours of every image (reid.evaluation.neighbours: the exact block pass, or the
approximate inverted-file pass that ``UDA.NEIGHBOURS`` picks above ``UDA.APPROX_MIN_SIZE``)
and DBSCAN on it (reid.uda.clustering).

Features (``--generator``):

* ``tracklets`` (default): the crops of a camera network
  (tests/inference/synthetic_features.py, ``tracklet_features``): 20 crops per identity in
  tracklets of 5 near-duplicates, 6 cameras, variation in a 48-dimensional subspace plus
  isotropic noise, calibrated so that an inverted file finds a crop's neighbours about as
  easily as in the demo model's features;
* ``identities``: the earlier benchmark's features: one centre per identity (~20 images), a
  per-camera offset and per-image noise of norm `--noise`, isotropic, 2048-d by default there.

Each backend in ``--neighbours`` runs in this process after the features are made; the
peak-RSS mark is reset just before each (/proc/self/clear_refs), so "peak - inputs" is what
that clustering step itself needed. The pseudo-labels' ARI against the synthetic identities is
printed, and with two backends the ARI of each against the first (outliers count as
singletons). ``--perturb`` adds a run of the first backend on features moved by noise of that
norm (the exact pipeline's own sensitivity, the yardstick for an approximation's ARI).

    python benchmarks/bench_clustering.py --num-images 100000 --dim 512 --neighbours exact,ivf --perturb 0.01
    python benchmarks/bench_clustering.py --num-images 1000000 --dim 512 --neighbours ivf
    python benchmarks/bench_clustering.py --generator identities --dim 2048   # the earlier figure
"""
from __future__ import annotations

import argparse
import logging
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
    """(features [N, D] float32 torch, identities [N]): the ``identities`` generator."""
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


def _singletons(labels: np.ndarray) -> np.ndarray:
    """Outliers (-1) as one cluster each, so that an ARI between two clusterings counts them."""
    out = labels.copy()
    bad = out < 0
    out[bad] = out.max(initial=-1) + 1 + np.arange(int(bad.sum()))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num-images", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--generator", choices=("tracklets", "identities"), default="tracklets")
    p.add_argument("--neighbours", default="exact", help="comma-separated neighbour backends to run (exact, ivf)")
    p.add_argument("--k1", type=int, default=30)
    p.add_argument("--k2", type=int, default=6)
    p.add_argument("--eps", type=float, default=0.6)
    p.add_argument("--min-samples", type=int, default=4)
    p.add_argument("--noise", type=float, default=1.0, help="identities: norm of the per-image noise")
    p.add_argument("--nprobe", type=int, default=None, help="ivf: cells probed per cell (default: the library's)")
    p.add_argument("--list-size", type=int, default=None, help="ivf: items per cell (default: the library's)")
    p.add_argument("--perturb", type=float, default=0.0,
                   help="also cluster with the first backend on features plus noise of this norm")
    p.add_argument("--auto-eps", action="store_true",
                   help="UDA.EPS auto: the graph out to --eps (the range's end), then the radius chosen from 0.3 on")
    args = p.parse_args(argv)

    import torch

    from bench_evaluation import _reset_peak, _rss_bytes
    from reid.evaluation.jaccard import jaccard_graph
    from reid.evaluation.neighbours import NeighbourSearch
    from reid.uda import dbscan, pseudo_label_scores
    from reid.uda.auto_eps import choose_eps, eps_grid
    from tests.inference.synthetic_features import tracklet_features

    logging.basicConfig(level=logging.INFO, format="  %(message)s")
    logging.getLogger("reid.evaluation.neighbours").setLevel(logging.DEBUG)  # the exact pass's time too
    logging.getLogger("faiss").setLevel(logging.WARNING)  # (which of its builds it loads)
    if args.generator == "tracklets":
        x, pids, _ = tracklet_features(args.num_images, args.dim)
        feats = torch.from_numpy(x)
        del x
    else:
        feats, pids = synthetic_features(args.num_images, args.dim, args.noise)
    backends = [b.strip() for b in args.neighbours.split(",") if b.strip()]
    runs = [(b, b, feats) for b in backends]
    if args.perturb > 0:
        gen = torch.Generator().manual_seed(1)
        moved = torch.nn.functional.normalize(
            feats + torch.randn(feats.shape, generator=gen) * (args.perturb / args.dim**0.5), dim=1)
        runs.append((f"{backends[0]} on features moved by noise of norm {args.perturb}", backends[0], moved))
    gb = 1024**3
    print(f"{platform.processor() or platform.machine()}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"N={args.num_images:,} D={args.dim} generator={args.generator} k1={args.k1} k2={args.k2} eps={args.eps} "
          f"min_samples={args.min_samples}")
    first = None
    for name, backend, f in runs:
        extra = {k: v for k, v in (("nprobe", args.nprobe), ("list_size", args.list_size)) if v is not None}
        search = NeighbourSearch(backend, **(extra if backend == "ivf" else {}))
        reset = _reset_peak()
        before = _rss_bytes()
        t0, c0 = time.perf_counter(), time.process_time()
        graph = jaccard_graph(f, args.k1, args.k2, args.eps, neighbours=search)
        t1 = time.perf_counter()
        eps = args.eps
        if args.auto_eps:
            choice = choose_eps(graph, args.min_samples, eps_grid(0.3, args.eps), dbscan)
            eps = choice.eps
            print(f"[{name}] EPS auto: {time.perf_counter() - t1:.1f} s for {len(choice.grid)} DBSCANs; "
                  f"{choice.reason()}")
        labels = dbscan(graph, eps, args.min_samples)
        t2, c2 = time.perf_counter(), time.process_time()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        scores = pseudo_label_scores(labels, pids)
        print(f"[{name}] jaccard graph {t1 - t0:.1f} s ({graph.nnz:,} pairs within eps), DBSCAN {t2 - t1:.1f} s; "
              f"total {t2 - t0:.1f} s wall, {c2 - c0:.1f} s CPU")
        print(f"[{name}] memory: inputs {before / gb:.2f} GB, peak {peak / gb:.2f} GB, peak - inputs "
              f"{(peak - before) / gb:.2f} GB{'' if reset else ' (peak mark not reset: includes input generation)'}")
        line = (f"[{name}] clusters {int(labels.max()) + 1:,} ({(labels >= 0).sum():,} images kept) for "
                f"{scores['true_ids']:,} identities; ARI {scores['ari']:.4f} against the identities")
        if first is None:
            first = labels
        else:
            line += f", {pseudo_label_scores(labels, _singletons(first))['ari']:.4f} against [{backends[0]}]"
        print(line, flush=True)
        del graph
    return 0


if __name__ == "__main__":
    sys.exit(main())
