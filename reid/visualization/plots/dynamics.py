"""Training dynamics: mean s_p and s_n over iterations from metrics.jsonl (Circle paper, Fig. 4)."""
from __future__ import annotations

import json
import logging
import os
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from reid.utils.path_kinds import check_file
from reid.utils.text_files import text_lines

from ._figure import PlotFiles, fmt, new_figure, save_plot

Run = Dict[str, np.ndarray]  # {"iter", "s_p", "s_n"}

logger = logging.getLogger(__name__)


def metrics_file(path: str) -> str:
    """`path` itself, or ``path/metrics.jsonl`` for a run folder; the error says what is missing."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    check_file(path, "Metrics file", "give a training run's folder (OUTPUT_DIR, which holds metrics.jsonl) or the "
               "metrics.jsonl file itself.")
    return path


def read_train_dynamics(path: str) -> Run:
    """The training records of a metrics.jsonl as arrays ``iter``, ``s_p``, ``s_n``.

    Only ``"type": "train"`` records with ``s_p`` and ``s_n`` are used. A resumed run may log an
    iteration twice; the later record wins. The result is sorted by iteration.
    """
    path = metrics_file(path)
    rows: Dict[int, tuple] = {}
    skipped: List[int] = []
    for lineno, line in text_lines(path, "Metrics file"):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            # A line cut short by a crash or a full disk (the writer starts the next on a new line).
            skipped.append(lineno)
            continue
        if not isinstance(rec, dict) or rec.get("type", "train") != "train":
            continue
        if rec.get("s_p") is None or rec.get("s_n") is None:
            continue
        if "iter" not in rec:
            raise ValueError(f"{path}, line {lineno}: training record without 'iter'; cannot place it on the x axis.")
        try:
            rows[int(rec["iter"])] = (float(rec["s_p"]), float(rec["s_n"]))
        except (TypeError, ValueError, OverflowError):
            skipped.append(lineno)
    if skipped:
        logger.warning("%s: skipped %d line(s) that are not JSON training records (first: line %d).",
                       path, len(skipped), skipped[0])
    if not rows:
        raise ValueError(
            f"{path} has no training record with s_p and s_n. They are logged by heads that compute "
            "cosines (train with a margin head such as circle or amsoftmax)."
        )
    its = np.array(sorted(rows), dtype=np.int64)
    vals = np.array([rows[i] for i in its], dtype=np.float64)
    return {"iter": its, "s_p": vals[:, 0], "s_n": vals[:, 1]}


def run_label(path: str) -> str:
    """Default label of a run: its folder name (for metrics.jsonl or a folder), else the file stem."""
    p = os.path.abspath(path)
    if os.path.isdir(p):
        return os.path.basename(p.rstrip(os.sep))
    stem = os.path.splitext(os.path.basename(p))[0]
    return os.path.basename(os.path.dirname(p)) if stem == "metrics" else stem


def plot_dynamics(
    runs: Sequence[Union[str, Run]],
    output_path: str,
    labels: Optional[Sequence[str]] = None,
    title: str = "Mean similarities during training",
) -> PlotFiles:
    """One line pair per run: s_p (solid) and s_n (dashed), same colour for the same run.

    `runs` are paths (metrics.jsonl files or run folders) or already read dicts with arrays
    ``iter``, ``s_p``, ``s_n``. `labels` default to the run folder names.
    """
    if not runs:
        raise ValueError("No run given; pass one or more metrics.jsonl files or run folders.")
    if labels is not None and len(labels) != len(runs):
        raise ValueError(f"{len(labels)} labels for {len(runs)} runs; give one label per run.")
    data: Dict[str, Run] = {}
    for i, run in enumerate(runs):
        label = labels[i] if labels is not None else (run_label(run) if isinstance(run, str) else f"run {i + 1}")
        rec = read_train_dynamics(run) if isinstance(run, str) else {k: np.asarray(run[k]) for k in ("iter", "s_p", "s_n")}
        if label in data:  # two folders with one name: keep both, distinguishable
            label = f"{label} ({i + 1})"
        data[label] = rec
    fig, (ax,) = new_figure(size=(7.5, 5.0))
    colors = [f"C{i % 10}" for i in range(len(data))]
    for color, (label, rec) in zip(colors, data.items()):
        ax.plot(rec["iter"], rec["s_p"], color=color, linestyle="-", label=f"{label}: s_p")
        ax.plot(rec["iter"], rec["s_n"], color=color, linestyle="--", label=f"{label}: s_n")
    ax.set(title=title, xlabel="iteration", ylabel="mean cosine similarity")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    rows: List[list] = [[label, int(it), fmt(sp), fmt(sn)]
                        for label, rec in data.items() for it, sp, sn in zip(rec["iter"], rec["s_p"], rec["s_n"])]
    return save_plot(fig, output_path, {"runs": data}, ["run", "iter", "s_p", "s_n"], rows)
