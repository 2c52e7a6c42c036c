#!/usr/bin/env python
"""Build time, memory, queries per second and recall@10 of every search backend at gallery scale.

Features are clustered like a re-ID gallery (tests/inference/synthetic_features.py: ~20
images per identity, identities grouped by appearance), L2-normalised, deterministic for a
seed; queries are further images of gallery identities. Each backend is measured in its own
child process:

* build (s): ``build_index(gallery, backend, **params)`` wall time;
* peak RSS (GB): the child's largest resident size during the build and the searches, and
  "+ over data": that minus the resident size just before building (interpreter, libraries
  and the features themselves);
* index file (GB): the size of ``save_index``'s file (about the index's memory);
* QPS: queries per second for one batch of `--queries` queries (``.search(queries, 10)``);
* recall@10: mean fraction of each query's exact top 10 (the "exact" backend, computed once)
  found in the backend's top 10.

After the default parameters, search-time parameters are swept on the same built index
(IVF nprobe, HNSW ef_search). The output ends with a ready-to-paste markdown table.

    python benchmarks/bench_search.py                                   # 1,000,000 x 256
    python benchmarks/bench_search.py --num 100000 --dim 2048
    python benchmarks/bench_search.py --num 200000 --backend ivf --backend hnsw --threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import date
from typing import Any, Dict, List

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench_evaluation import _reset_peak, _rss_bytes  # noqa: E402  (this folder is on sys.path)

# name: (build_index backend, extra parameters given the feature width, search-time sweep)
CASES = {
    "exact": ("exact", lambda d: {}, None),
    "faiss": ("faiss", lambda d: {}, None),
    "ivf": ("ivf", lambda d: {}, ("nprobe", (8, 16, 32, 128, 256))),
    "ivf-pq": ("ivf", lambda d: {"pq_m": d // 8}, ("nprobe", (16, 128, 256))),
    "hnsw": ("hnsw", lambda d: {}, ("ef_search", (16, 32, 64, 128, 256, 512))),
}


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _search_timed(index: Any, queries: np.ndarray, k: int):
    index.search(queries[:20], k)  # warm-up: first-touch page faults and thread start-up are not counted
    start = time.perf_counter()
    result = index.search(queries, k)
    return result, time.perf_counter() - start


def run_case(name: str, args: argparse.Namespace) -> Dict[str, Any]:
    """One backend in this (fresh) process; returns the measurements."""
    import torch

    from reid.inference import build_index, load_index, save_index
    from reid.search.tuning import recall_at
    from tests.inference.synthetic_features import clustered_features

    if args.threads:
        torch.set_num_threads(args.threads)
    backend, extra, sweep = CASES[name]
    if backend != "exact":
        import faiss

        if args.threads:
            faiss.omp_set_num_threads(args.threads)
    gallery, queries = clustered_features(args.num, args.dim, num_queries=args.queries, seed=args.seed)
    truth_file = os.path.join(args.workdir, "truth.npy")
    _reset_peak()
    before = _rss_bytes()
    start = time.perf_counter()
    index = build_index(gallery, backend, **extra(args.dim))
    build = time.perf_counter() - start
    result, seconds = _search_timed(index, queries, args.k)
    if name == "exact":
        np.save(truth_file, result.indices)
    truth = np.load(truth_file)
    rows = [{"params": index.params(), "qps": args.queries / seconds, "recall": recall_at(result.indices, truth)}]
    if sweep and not args.no_sweep:
        key, values = sweep
        default = index.params()[key]
        for value in values:
            index.set_search_params(**{key: value})
            res, secs = _search_timed(index, queries, args.k)
            rows.append({"params": index.params(), "qps": args.queries / secs, "recall": recall_at(res.indices, truth)})
        index.set_search_params(**{key: default})
    peak = _peak()
    path = os.path.join(args.workdir, f"{name}.index")
    start = time.perf_counter()
    save_index(index, path)
    save_s = time.perf_counter() - start
    del index
    start = time.perf_counter()
    back = load_index(path)
    load_s = time.perf_counter() - start
    same = bool(np.array_equal(back.search(queries[:100], args.k).indices, result.indices[:100]))
    size = os.path.getsize(path)
    os.remove(path)
    threads = torch.get_num_threads() if backend == "exact" else __import__("faiss").omp_get_max_threads()
    return {"name": name, "build_s": build, "before_bytes": before, "peak_bytes": peak, "file_bytes": size,
            "save_s": save_s, "load_s": load_s, "reload_same": same, "threads": threads, "rows": rows}


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def _params(p: Dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in p.items()) or "-"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num", type=int, default=1_000_000, help="gallery size (default: 1,000,000)")
    p.add_argument("--dim", type=int, default=256, help="feature width (default: 256)")
    p.add_argument("--queries", type=int, default=2000, help="queries, searched as one batch (default: 2000)")
    p.add_argument("-k", type=int, default=10, help="recall@k and search depth (default: 10)")
    p.add_argument("--backend", action="append", choices=tuple(CASES), help="repeatable; default all")
    p.add_argument("--threads", type=int, default=0, help="torch / faiss threads (default: all cores)")
    p.add_argument("--no-sweep", action="store_true", help="default parameters only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--run-one", help=argparse.SUPPRESS)  # child mode
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run_one:
        print(json.dumps(run_case(args.run_one, args)))
        return 0
    names = list(CASES) if not args.backend else ["exact"] + [n for n in CASES if n in args.backend and n != "exact"]
    load_before = _uptime()
    print(f"# {' '.join([os.path.basename(sys.executable), 'benchmarks/bench_search.py'] + (argv or sys.argv[1:]))}")
    print(f"# {date.today()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"python {platform.python_version()}; before: {load_before}", flush=True)
    results: List[Dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench_search_") as workdir:
        for name in names:
            cmd = [sys.executable, os.path.abspath(__file__), "--run-one", name, "--workdir", workdir,
                   "--num", str(args.num), "--dim", str(args.dim), "--queries", str(args.queries), "-k", str(args.k),
                   "--threads", str(args.threads), "--seed", str(args.seed)] + (["--no-sweep"] if args.no_sweep else [])
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                last = (proc.stderr.strip().splitlines() or ["killed (out of memory?)"])[-1]
                print(f"# {name}: failed: {last}", flush=True)
                if name == "exact":
                    return 1
                continue
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results.append(r)
            print(f"# {name}: {json.dumps(r)}", flush=True)
    load_after = _uptime()
    gb = 1024 ** 3
    print(f"\n{args.num:,} x {args.dim} clustered features, {args.queries:,} queries in one batch, k={args.k}; "
          f"{date.today()}; load before: {load_before.split('load average:')[-1].strip()}, "
          f"after: {load_after.split('load average:')[-1].strip()}\n")
    print("| backend | parameters | build (s) | peak RSS (GB) | + over data (GB) | index file (GB) | QPS | recall@10 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        first = r["rows"][0]
        print(f"| **{r['name']}** | {_params(first['params'])} | {r['build_s']:.1f} | {r['peak_bytes'] / gb:.2f} | "
              f"{(r['peak_bytes'] - r['before_bytes']) / gb:.2f} | {r['file_bytes'] / gb:.2f} | {first['qps']:,.0f} | "
              f"{first['recall']:.4f} |")
        for row in r["rows"][1:]:
            print(f"| {r['name']} | {_params(row['params'])} | | | | | {row['qps']:,.0f} | {row['recall']:.4f} |")
    print("\n| backend | save (s) | load (s) | loaded index gives the same results | threads |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {r['name']} | {r['save_s']:.1f} | {r['load_s']:.1f} | {'yes' if r['reload_same'] else 'NO'} | "
              f"{r['threads']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
