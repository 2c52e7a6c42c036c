"""Cameras that look different: direct transfer, plain and camera-aware adaptation, the ceiling.

One run of this script measures, on DATASETS.SYNTHETIC.STYLE views (3 cameras, each seeing
people from one side only; configs/UDA/synthetic_views*.yml), starting from one source model:

1. direct transfer (tools/test.py);
2. plain learning without labels (configs/UDA/synthetic_views.yml: UDA.EPS 0.5, and with
   UDA.EPS auto);
3. camera-balanced neighbours alone, camera-aware proxies alone (both with UDA.EPS auto), and
   both (configs/UDA/synthetic_views_camera.yml: UDA.EPS auto, and with UDA.EPS 0.5);
4. the supervised ceiling (configs/UDA/synthetic_views_supervised.yml --drop-head);

and writes a table (summary.md, summary.json) with R-1 / mAP / mINP, the share of the mAP gap
between direct transfer and the ceiling that each adaptation recovers, the last clustering's
health (clusters, multi-camera share; ARI against the withheld labels) and the wall time.

    python benchmarks/bench_uda_cameras.py --source output/demo/model_final.pth --output output/bench_uda_cameras
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs", "UDA")


#: name -> (config in configs/UDA, overrides)
RUNS = {
    "plain, eps 0.5": ("synthetic_views.yml", []),
    "plain, eps auto": ("synthetic_views.yml", ["UDA.EPS", "auto"]),
    "neighbours only, eps auto": ("synthetic_views.yml", ["UDA.EPS", "auto", "UDA.CAMERA_NEIGHBOURS", "True"]),
    "proxies only, eps auto": ("synthetic_views.yml", ["UDA.EPS", "auto", "UDA.CAMERA_AWARE", "True"]),
    "camera-aware, eps 0.5": ("synthetic_views_camera.yml", ["UDA.EPS", "0.5"]),
    "camera-aware, eps auto": ("synthetic_views_camera.yml", []),
}


def _run(cmd: List[str], log: str) -> float:
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        done = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {done.returncode}); its output is in {log}")
    return time.perf_counter() - start


def _last(path: str, kind: str) -> Optional[Dict]:
    records = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    found = [r for r in records if r.get("type") == kind]
    return found[-1] if found else None


def _train(name: str, config: str, source: str, out: str, extra: List[str]) -> Tuple[Dict, Optional[Dict], float]:
    run = os.path.join(out, name)
    seconds = _run([sys.executable, "tools/train.py", "--config-file", config, *extra,
                    "MODEL.WEIGHTS", source, "OUTPUT_DIR", run], os.path.join(out, f"{name}.log"))
    metrics = os.path.join(run, "metrics.jsonl")
    return _last(metrics, "eval"), _last(metrics, "cluster"), seconds


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--source", default="output/demo/model_final.pth", help="the source model (make demo's)")
    p.add_argument("--output", default="output/bench_uda_cameras", help="folder for the runs and the summary")
    p.add_argument("--runs", nargs="+", default=list(RUNS), choices=list(RUNS),
                   help="which adaptation runs (default: all)")
    args = p.parse_args(argv)
    source = os.path.abspath(args.source)
    if not os.path.isfile(source):
        p.error(f"--source {args.source!r} is not a file: train the demo model first (make demo)")
    out = os.path.abspath(args.output)
    os.makedirs(out, exist_ok=True)
    views = os.path.join(CONFIGS, "synthetic_views.yml")

    rows: List[Dict] = []
    seconds = _run([sys.executable, "tools/test.py", "--config-file", views, "--weights", source,
                    "OUTPUT_DIR", os.path.join(out, "direct")], os.path.join(out, "direct.log"))
    with open(os.path.join(out, "direct", "test", "metrics.json"), encoding="utf-8") as f:
        rows.append({"run": "direct transfer", **json.load(f)["results"]["synthetic"]["plain"], "seconds": seconds})
    runs = [(name, os.path.join(CONFIGS, RUNS[name][0]), RUNS[name][1]) for name in args.runs]
    for name, config, extra in runs:
        folder = "".join(c if c.isalnum() else "_" for c in name)
        ev, cl, seconds = _train(folder, config, source, out, extra)
        rows.append({"run": name, **{k: ev[k] for k in ("R-1", "mAP", "mINP")}, "seconds": seconds,
                     **{k: cl[k] for k in ("clusters", "multi_camera_share", "ari", "eps") if k in cl}})
    ev, _, seconds = _train("supervised", os.path.join(CONFIGS, "synthetic_views_supervised.yml"), source, out,
                            ["--drop-head"])
    rows.append({"run": "supervised ceiling", **{k: ev[k] for k in ("R-1", "mAP", "mINP")}, "seconds": seconds})

    direct, ceiling = rows[0]["mAP"], rows[-1]["mAP"]
    lines = ["| run | R-1 | mAP | mINP | gap recovered | last clustering: clusters, multi-camera, ARI, eps | time |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        gap = (r["mAP"] - direct) / (ceiling - direct) if ceiling != direct else float("nan")
        r["gap_recovered"] = gap
        clus = (f"{r['clusters']}, {100 * r.get('multi_camera_share', float('nan')):.0f}%, {r.get('ari', float('nan')):.3f}, "
                f"{r.get('eps', float('nan')):.3g}" if "clusters" in r else "")
        lines.append(f"| {r['run']} | {r['R-1']:.2f} | {r['mAP']:.2f} | {r['mINP']:.2f} | "
                     f"{'' if r is rows[0] or r is rows[-1] else f'{100 * gap:.0f}%'} | {clus} | {r['seconds']:.0f} s |")
    table = "\n".join(lines)
    print(table)
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as f:
        f.write(table + "\n")
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
