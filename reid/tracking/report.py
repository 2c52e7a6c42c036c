"""The tracking-gain report: metrics.json, a Markdown table and a bar chart of the runs."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Sequence as Seq

from reid.utils.file_io import atomic_write, atomic_write_text

from .tracker_runs import MOTION_ONLY, RunResult, differences

TABLE_METRICS = ("HOTA", "DetA", "AssA", "IDF1", "IDSW", "MOTA")
PLOT_METRICS = ("HOTA", "AssA", "IDF1")


def report_record(runs: Seq[RunResult], settings: Dict[str, Any]) -> Dict[str, Any]:
    """Everything metrics.json holds: the settings, each run's model, threshold, speed and scores
    (per sequence and COMBINED), and each model's difference to motion only."""
    return {
        "settings": settings,
        "runs": {r.label: {"model": r.identity, "appearance_threshold": r.threshold, "speed": r.speed(),
                           "results": r.results, "metrics": r.metrics} for r in runs},
        "difference_to_motion_only": differences(runs),
    }


def table(runs: Seq[RunResult]) -> str:
    """A Markdown table: each run's COMBINED figures and its change against motion only."""
    diff = differences(runs)
    head = ["model", *TABLE_METRICS, "dHOTA", "dIDF1", "threshold", "frames/s", "re-ID share"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        m = (r.metrics or {}).get("COMBINED", {})
        values = [f"{m[k]:.0f}" if k == "IDSW" else f"{m[k]:.2f}" for k in TABLE_METRICS] if m else ["-"] * len(TABLE_METRICS)
        d = diff.get(r.label)
        delta = [f"{d['HOTA']:+.2f}", f"{d['IDF1']:+.2f}"] if d else ["-", "-"]
        t = r.threshold.get("distance")
        speed = r.speed()
        lines.append("| " + " | ".join([r.label, *values, *delta, "-" if t is None else f"{t:.3f}",
                                         f"{speed['frames_per_second']:.1f}",
                                         "-" if r.label == MOTION_ONLY else f"{100 * speed['appearance_share']:.0f}%"])
                     + " |")
    return "\n".join(lines)


def plot(runs: Seq[RunResult], path: str, title: str) -> str:
    """Grouped bars of HOTA, AssA and IDF1 per run (motion only first); returns `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    scored = [r for r in runs if r.metrics]
    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(scored), 3.6))
    width = 0.8 / len(PLOT_METRICS)
    x = np.arange(len(scored))
    for i, name in enumerate(PLOT_METRICS):
        values = [r.metrics["COMBINED"][name] for r in scored]
        bars = ax.bar(x + (i - (len(PLOT_METRICS) - 1) / 2) * width, values, width, label=name)
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
    ax.set_xticks(x, [r.label for r in scored], fontsize=8)
    ax.set_ylabel("%")
    ax.set_ylim(0, 100)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120))
    plt.close(fig)
    return path


#: What write_report writes, last of a run.
REPORT_FILES = ("metrics.json", "summary.md", "tracking_gain.png")


def write_report(runs: Seq[RunResult], output: str, settings: Dict[str, Any]) -> List[str]:
    """metrics.json, summary.md and (when scored) tracking_gain.png in `output`; returns the paths."""
    paths = [os.path.join(output, name) for name in REPORT_FILES[:2]]
    atomic_write_text(paths[0], json.dumps(report_record(runs, settings), indent=1))
    atomic_write_text(paths[1], table(runs) + "\n")
    if any(r.metrics for r in runs):
        paths.append(plot(runs, os.path.join(output, REPORT_FILES[2]),
                          f"{settings['tracker']} on {settings['sequences']} ({settings['detections']} boxes)"))
    return paths


__all__ = ["PLOT_METRICS", "REPORT_FILES", "TABLE_METRICS", "plot", "report_record", "table", "write_report"]
