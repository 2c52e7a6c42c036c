#!/usr/bin/env python
"""Time and peak memory of evaluate_rank, re_ranking and the verification metrics at Market-1501 and MSMT17 size.

Features are synthetic but shaped like real ones: one unit-norm centre per identity, a
small per-camera offset and per-image noise, L2-normalised, dimension 2048; query and
gallery sizes, identity and camera counts match the real test splits (Market-1501: 3,368 x
15,913, 750 ids + distractors, 6 cameras; MSMT17: 11,659 x 82,161, 3,060 ids, 15 cameras).

Every measurement runs in its own child process. "inputs" is its resident set size just
before the measured call (the synthetic features or distance matrix); the peak-RSS mark is
reset there (/proc/self/clear_refs), so "peak" (ru_maxrss) is the largest resident size
during the call and "peak - inputs" what the call itself needed.
Next to each function it measures a straightforward baseline on the same inputs: a full
argsort of the distance matrix with a per-query loop (what common toolkits' Python
evaluators do) and, with --dense-baseline, the dense original re-ranking (tests/evaluation/test_rerank.py's
reference, in float32 as the published code).

    python benchmarks/bench_evaluation.py --case market-rank
    python benchmarks/bench_evaluation.py --case market-rerank --dense-baseline
    python benchmarks/bench_evaluation.py --case msmt-rank --case msmt-rerank
    python benchmarks/bench_evaluation.py --case msmt-rank --msmt-baseline   # ~25 GB
    python benchmarks/bench_evaluation.py --case msmt-verify   # TAR@FAR, EER, ROC over 958M pairs
    python benchmarks/bench_evaluation.py --case all
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import time
from typing import Callable, Dict, List, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# name: (num_query, num_gallery, num_ids, num_distractors, num_cams)
SIZES = {
    "market": (3368, 15913, 750, 2798, 6),
    "msmt": (11659, 82161, 3060, 0, 15),
}
DIM = 2048
CASES = ("market-rank", "msmt-rank", "market-rerank", "msmt-rerank", "market-verify", "msmt-verify")


# --------------------------------------------------------------------------- inputs
def synthetic(size: str, dim: int = DIM, seed: int = 0):
    """(q_feats, g_feats, q_pids, g_pids, q_cams, g_cams) as float32 torch tensors + numpy ids,
    written block-wise into preallocated arrays so generation leaves no large temporaries."""
    import torch

    num_q, num_g, num_ids, num_distract, num_cams = SIZES[size]
    rng = np.random.default_rng(seed)
    q_pids = rng.integers(1, num_ids + 1, num_q)
    g_pids = np.concatenate([rng.integers(1, num_ids + 1, num_g - num_distract), np.zeros(num_distract, np.int64)])
    q_cams = rng.integers(0, num_cams, num_q)
    g_cams = rng.integers(0, num_cams, num_g)
    gen = torch.Generator().manual_seed(seed)
    centers = torch.nn.functional.normalize(torch.randn(num_ids + 1, dim, generator=gen), dim=1)
    cam_bias = 0.3 * torch.nn.functional.normalize(torch.randn(num_cams, dim, generator=gen), dim=1)

    def feats(pids: np.ndarray, cams: np.ndarray) -> torch.Tensor:
        out = torch.empty(len(pids), dim)
        for a in range(0, len(pids), 8192):
            p = torch.from_numpy(pids[a : a + 8192])
            c = torch.from_numpy(cams[a : a + 8192])
            # Noise of norm ~3.3: at Market-1501 size this gives R-1 ~98%, mAP ~67%, i.e.
            # neighbourhoods as mixed as a trained model's, not a trivially separable toy.
            x = torch.randn(len(p), dim, generator=gen).mul_(3.3 / dim**0.5)
            x += centers[p] + cam_bias[c]
            x[p == 0] = torch.randn(int((p == 0).sum()), dim, generator=gen)  # distractors: anywhere
            out[a : a + 8192] = torch.nn.functional.normalize(x, dim=1)
        return out

    return feats(q_pids, q_cams), feats(g_pids, g_cams), q_pids, g_pids, q_cams, g_cams


# --------------------------------------------------------------------------- baselines
def full_argsort_rank(distmat, q_pids, g_pids, q_camids, g_camids, max_rank=50):
    """The straightforward evaluator: argsort the whole matrix, then one query at a time."""
    indices = np.argsort(distmat, axis=1)
    matches = (g_pids[indices] == q_pids[:, None]).astype(np.int32)
    cmc_all, aps = [], []
    for i in range(distmat.shape[0]):
        order = indices[i]
        keep = ~((g_pids[order] == q_pids[i]) & (g_camids[order] == q_camids[i]))
        raw = matches[i][keep]
        if not raw.any():
            continue
        cmc = raw.cumsum()
        cmc[cmc > 1] = 1
        cmc_all.append(cmc[:max_rank])
        hits = np.flatnonzero(raw) + 1
        aps.append(np.mean(np.arange(1, hits.size + 1) / hits))
    return {"cmc": np.mean(cmc_all, axis=0), "mAP": float(np.mean(aps))}


def dense_rerank_baseline() -> Callable:
    """tests/evaluation/test_rerank.py's dense reference of the original algorithm."""
    path = os.path.join(ROOT, "tests", "evaluation", "test_rerank.py")
    spec = importlib.util.spec_from_file_location("_rerank_reference", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.dense_re_ranking


# --------------------------------------------------------------------------- child side
def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> bool:
    """Reset the peak-RSS mark (Linux >= 4.0), so input generation does not count."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _available_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 1 << 62


def _needed_bytes(name: str) -> int:
    """Rough memory a measurement needs, so a shared machine is not pushed into the OOM killer."""
    size, what = name.split(":")
    num_q, num_g = SIZES[size][:2]
    n = num_q + num_g
    # Bytes per query x gallery entry: the matrix (4), plus for the full-argsort baseline the
    # int64 order (8), the gathered pids (8, temporary), the match mask (1) and its int32 copy (4).
    per = {"evaluate_rank": 4.2, "full_argsort": 25.0, "re_ranking": 4.2, "verification": 4.2}.get(what, 0.0)
    dense = 4 * 6 * n * n if what == "dense_rerank" else 0  # ~6 float32 N x N arrays at peak
    return int(per * num_q * num_g) + dense + 4 * DIM * n * 2 + (1 << 30)


def run_measurement(name: str) -> Dict[str, float]:
    """Run one measurement in this (fresh) process; returns seconds and memory in bytes."""
    import torch

    from reid.evaluation import (
        compute_distance,
        evaluate_rank,
        evaluate_rank_from_features,
        re_ranking,
        verification_metrics,
        verification_metrics_from_features,
    )

    size, what = name.split(":")
    need, avail = _needed_bytes(name), _available_bytes()
    if need > avail:
        return {"skipped": f"needs ~{need / 1024**3:.0f} GB, {avail / 1024**3:.0f} GB available"}
    qf, gf, qp, gp, qc, gc = synthetic(size)
    extra: Dict[str, float] = {}
    if what in ("evaluate_rank", "full_argsort", "verification"):
        dist = compute_distance(qf, gf)
        del qf, gf
        fn = {"evaluate_rank": lambda: evaluate_rank(dist, qp, gp, qc, gc),
              "full_argsort": lambda: full_argsort_rank(dist, qp, gp, qc, gc),
              "verification": lambda: verification_metrics(dist, qp, gp, qc, gc)}[what]
    elif what == "verification_from_features":
        fn = lambda: verification_metrics_from_features(qf, gf, qp, gp, qc, gc)  # noqa: E731
    elif what == "from_features":
        fn = lambda: evaluate_rank_from_features(qf, gf, qp, gp, qc, gc)  # noqa: E731
    elif what == "re_ranking":
        fn = lambda: re_ranking(qf, gf)  # noqa: E731
    elif what == "dense_rerank":
        ref = dense_rerank_baseline()
        q_np, g_np = qf.numpy(), gf.numpy()
        del qf, gf
        fn = lambda: ref(q_np, g_np, 20, 6, 0.3, "cosine", dtype=np.float32)[0]  # noqa: E731
    else:
        raise ValueError(f"unknown measurement {name!r}")
    reset = _reset_peak()
    before = _rss_bytes()
    t0 = time.perf_counter()
    c0 = time.process_time()
    out = fn()
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if isinstance(out, dict) and "eer" in out:
        extra = {"TAR@1e-3": out["tar"][1e-3], "EER": out["eer"], "pairs": out["num_genuine"] + out["num_impostor"]}
    elif isinstance(out, dict):
        extra = {"R-1": float(out["cmc"][0]), "mAP": float(out["mAP"])}
    elif isinstance(out, np.ndarray) and what in ("re_ranking", "dense_rerank"):
        res = evaluate_rank(out, qp, gp, qc, gc)
        extra = {"R-1": float(res["cmc"][0]), "mAP": float(res["mAP"])}
    return {"seconds": seconds, "cpu_seconds": cpu, "inputs_bytes": before, "peak_bytes": peak,
            "threads": torch.get_num_threads(), "peak_reset": reset, **extra}


# --------------------------------------------------------------------------- parent side
def plan(cases: List[str], dense: bool, baselines: bool, msmt_baseline: bool) -> List[Tuple[str, str]]:
    rows = []
    for case in cases:
        size, kind = case.split("-")
        if kind == "verify":
            rows.append((case, f"{size}:verification"))
            rows.append((case, f"{size}:verification_from_features"))
        elif kind == "rank":
            rows.append((case, f"{size}:evaluate_rank"))
            rows.append((case, f"{size}:from_features"))
            if baselines and (size == "market" or msmt_baseline):
                rows.append((case, f"{size}:full_argsort"))
        else:
            rows.append((case, f"{size}:re_ranking"))
            if dense and size == "market":
                rows.append((case, f"{size}:dense_rerank"))
    return rows


LABELS = {
    "evaluate_rank": "evaluate_rank (distmat given)",
    "from_features": "evaluate_rank_from_features (features given)",
    "full_argsort": "baseline: full argsort + per-query loop",
    "re_ranking": "re_ranking (sparse, exact)",
    "dense_rerank": "baseline: dense original re-ranking",
    "verification": "verification_metrics (distmat given)",
    "verification_from_features": "verification_metrics_from_features (features given)",
}


def _other(result: Dict[str, float]) -> str:
    """The measurement's own results beyond R-1/mAP (verification: TAR@1e-3, EER, pairs)."""
    keys = ("TAR@1e-3", "EER")
    parts = [f"{k} {100 * result[k]:.2f}%" for k in keys if k in result]
    if "pairs" in result:
        parts.append(f"{result['pairs']:,} pairs")
    return ", ".join(parts)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--case", action="append", choices=CASES + ("all",), help="repeatable; default all")
    p.add_argument("--dense-baseline", action="store_true",
                   help="also run the dense original re-ranking at Market-1501 size (~45 s, ~9 GB)")
    p.add_argument("--no-baselines", action="store_true", help="skip the full-argsort evaluator")
    p.add_argument("--msmt-baseline", action="store_true",
                   help="also run the full-argsort evaluator at MSMT17 size (needs ~25 GB)")
    p.add_argument("--repeat", type=int, default=1, help="runs per measurement; the fastest is reported")
    p.add_argument("--run-one", help=argparse.SUPPRESS)  # child mode
    args = p.parse_args(argv)
    if args.run_one:
        print(json.dumps(run_measurement(args.run_one)))
        return 0
    cases = list(CASES) if not args.case or "all" in args.case else args.case
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}")
    print("| case | function | time (s) | CPU time (s) | inputs RSS (GB) | peak RSS (GB) "
          "| peak - inputs (GB) | R-1 | mAP | other |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case, name in plan(cases, args.dense_baseline, not args.no_baselines, args.msmt_baseline):
        best = None
        for _ in range(max(1, args.repeat)):
            proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--run-one", name],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                best = {"error": (proc.stderr.strip().splitlines() or ["killed"])[-1]}
                break
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            if "skipped" in r:
                best = r
                break
            if best is None or r["seconds"] < best["seconds"]:
                best = r
        label = LABELS[name.split(":")[1]]
        if "error" in best or "skipped" in best:
            why = f"failed: {best['error']}" if "error" in best else f"skipped: {best['skipped']}"
            print(f"| {case} | {label} | {why} | | | | | | | |")
            continue
        gb = 1024**3
        print(f"| {case} | {label} | {best['seconds']:.2f} | {best['cpu_seconds']:.2f} | "
              f"{best['inputs_bytes'] / gb:.2f} | {best['peak_bytes'] / gb:.2f} | "
              f"{(best['peak_bytes'] - best['inputs_bytes']) / gb:.2f} | "
              f"{100 * best.get('R-1', float('nan')):.1f} | {100 * best.get('mAP', float('nan')):.1f} | "
              f"{_other(best)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
