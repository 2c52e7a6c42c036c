#!/usr/bin/env python
"""Multi-camera IDF1 of tools/link_cameras.py per model and tracklet pooling, on sequences with ground truth.

Each ``--model LABEL=RUN`` is linked twice on the same tracklets (``--tracks``: a tracker's result
folder, or ``gt``): with the hand-set quality weights (``--pooling quality``) and with the model's
own temporal pooling (``--pooling model``); the threshold is calibrated from the ground truth at
FAR 0.01 each time, as link_cameras does by default. Prints a Markdown table (scene IDF1 per run)
and writes ``--output/results.json``.

    python tools/make_sequences.py --output datasets/demo_s3 --cameras 3 --frames 400 --identities 30 --seed 3
    python benchmarks/bench_video_link.py --sequences datasets/demo_s3 --tracks gt \\
        --model image=output/demo --model video=output/demo_video --output /tmp/video_link
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def link(sequences: str, tracks: str, run: str, pooling: str, out: str) -> dict:
    """link_cameras' metrics.json and identities.json for one run and pooling."""
    cmd = [sys.executable, os.path.join(ROOT, "tools", "link_cameras.py"), "--sequences", sequences,
           "--tracks", tracks, "--run", run, "--pooling", pooling, "--output", out]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "metrics.json")) as f:
        metrics = json.load(f)
    with open(os.path.join(out, "identities.json")) as f:
        identities = json.load(f)
    return {"multi_camera": metrics["multi_camera"], "threshold": identities["threshold"],
            "pooling": identities["pooling"], "identities": identities["num_identities"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sequences", required=True)
    p.add_argument("--tracks", default="gt", help="a tracker's result folder, or gt")
    p.add_argument("--model", action="append", required=True, metavar="LABEL=RUN")
    p.add_argument("--output", required=True, help="a new folder for the link_cameras outputs and results.json")
    args = p.parse_args()
    os.makedirs(args.output, exist_ok=False)
    results = {}
    print("| model | pooling | threshold | identities | " + "multi-camera IDF1 |")
    print("|---|---|---|---|---|")
    for spec in args.model:
        label, run = spec.split("=", 1)
        for pooling in ("quality", "model"):
            r = link(args.sequences, args.tracks, run, pooling, os.path.join(args.output, f"{label}-{pooling}"))
            results[f"{label}-{pooling}"] = r
            idf1 = ", ".join(f"{scene} {m['IDF1']:.2f}" for scene, m in sorted(r["multi_camera"].items()))
            print(f"| {label} | {pooling} | {r['threshold']:.4f} | {r['identities']} | {idf1} |", flush=True)
    with open(os.path.join(args.output, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
