#!/usr/bin/env python
"""How fast every program in tools/ answers ``--help`` and an argument error, and whether it
imported torch to do so (target: under 0.5 s, no torch).

Each case runs as a user runs it, ``python tools/<tool>.py ARGS`` in a fresh process,
``--repeat`` times; the table gives the median and the slowest wall time. A second, separate
run of each case (through ``runpy``, the same code path) reports which heavy libraries
(torch, numpy, cv2, scipy, matplotlib) ended up imported. For scale, the last rows time
``python -c pass`` and ``python -c "import torch"``.

    python benchmarks/bench_cli_startup.py
    python benchmarks/bench_cli_startup.py --repeat 10 --tools test extract
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Dict, List, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = ("train", "test", "extract", "search", "export", "convert_weights", "visualize", "plot",
         "gen_config_docs", "torch_wheels")
HEAVY = ("torch", "numpy", "cv2", "scipy", "matplotlib")
# An argument error per tool: an unknown flag (argparse answers with exit code 2), and for the
# model tools one that needs the model options (two configs named at once).
ERRORS: Dict[str, Sequence[str]] = {
    "test": ["--run", "output/demo", "--config-file", "x.yml"],
    "extract": ["--run", "output/demo", "--config-file", "x.yml", "--input", "crops", "--output", "g.npz"],
    "search": ["--gallery", "g.npz"],
    "export": ["--run", "output/demo", "--config-file", "x.yml", "--output", "m.pt2"],
    "convert_weights": ["in.pth", "out.pth"],
}

_PROBE = """
import runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit:
    pass
sys.stderr.write("imported: " + " ".join(m for m in {heavy!r} if m in sys.modules) + "\\n")
"""


def cpu_name() -> str:
    """The CPU's model name (Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cases(tools: Sequence[str]) -> List[Tuple[str, str, List[str]]]:
    """(tool, what, argv) of each measurement."""
    out = []
    for tool in tools:
        script = os.path.join(ROOT, "tools", f"{tool}.py")
        out.append((tool, "--help", [script, "--help"]))
        out.append((tool, "argument error", [script] + list(ERRORS.get(tool, ["--no-such-flag"]))))
    return out


def wall_times(argv: Sequence[str], repeat: int) -> Tuple[List[float], int]:
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        code = subprocess.run([sys.executable, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              cwd=ROOT).returncode
        times.append(time.perf_counter() - start)
    return times, code


def imported(argv: Sequence[str]) -> str:
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(heavy=HEAVY), *argv], capture_output=True,
                          text=True, cwd=ROOT)
    line = [x for x in proc.stderr.splitlines() if x.startswith("imported:")]
    return line[-1][len("imported:"):].strip() or "none" if line else "?"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5, help="runs per case (default: 5)")
    p.add_argument("--tools", nargs="+", default=list(TOOLS), choices=TOOLS, help="tools to measure (default: all)")
    args = p.parse_args(argv)
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {cpu_name()} ({os.cpu_count()} CPUs), "
          f"Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}, {args.repeat} runs per case\n")
    print("| tool | case | exit code | median (s) | slowest (s) | heavy modules imported |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for tool, what, case in cases(args.tools):
        times, code = wall_times(case, args.repeat)
        worst = max(worst, max(times))
        print(f"| {tool} | {what} | {code} | {statistics.median(times):.3f} | {max(times):.3f} | {imported(case)} |",
              flush=True)
    for label, code in (("python -c pass", "pass"), ('python -c "import torch"', "import torch")):
        times, _ = wall_times(["-c", code], args.repeat)
        print(f"| {label} | (for scale) | 0 | {statistics.median(times):.3f} | {max(times):.3f} | |")
    print(f"\nslowest case: {worst:.3f} s (target: under 0.5 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
