#!/usr/bin/env python
"""The demo trained with the EMA hook of docs/training.md (the example block, run as written):
does averaging help on the demo's short schedule? Prints the test row of the last evaluation.

Each run is the demo (`make demo`'s training command) plus ``EMAHook(decay, warmup)``; the
evaluation then scores the average. Compare with the demo without the hook
(docs/benchmarks.md, "The demo (end to end)"); results repeat exactly for a given machine and
thread count (``OMP_NUM_THREADS``).

    python benchmarks/ema_demo.py --decay 0.999                 # the example: decay warm-up on
    python benchmarks/ema_demo.py --decay 0.999 --no-warmup     # a fixed 0.999
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def doc_ema_hook():
    """The ``EMAHook`` class of docs/training.md's ``ema`` example."""
    text = open(os.path.join(ROOT, "docs", "training.md"), encoding="utf-8").read()
    code = re.search(r"<!-- example: ema -->\s*```python\n(.*?)```", text, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/training.md:ema", "exec"), namespace)
    return namespace["EMAHook"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decay", type=float, default=0.999, help="EMAHook decay (default: 0.999)")
    p.add_argument("--no-warmup", action="store_true", help="a fixed decay from the first step")
    p.add_argument("--output-dir", default=None, help="run folder (default: output/ema_demo_<decay>[_fixed])")
    args = p.parse_args(argv)
    from reid.cli.train import main as train_main

    out = args.output_dir or os.path.join("output", f"ema_demo_{args.decay:g}" + ("_fixed" if args.no_warmup else ""))
    hook = doc_ema_hook()(decay=args.decay, warmup=not args.no_warmup)
    start = time.perf_counter()
    rc = train_main(["--config-file", os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml"), "--resume",
                     "OUTPUT_DIR", out], hooks=[hook])
    if rc:
        return rc
    records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"), encoding="utf-8")]
    last = [r for r in records if r["type"] == "eval" and r["dataset"] == "synthetic"][-1]
    shown = "  ".join(f"{k} {last[k]:.2f}" for k in ("R-1", "R-5", "R-10", "mAP", "mINP"))
    print(f"EMAHook(decay={args.decay:g}, warmup={not args.no_warmup}), epoch {last['epoch']}: {shown} "
          f"(threads {os.environ.get('OMP_NUM_THREADS', 'default')}, {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
