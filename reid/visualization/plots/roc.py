"""ROC curves (TAR against FAR, log FAR axis) of verification results, with and without re-ranking."""
from __future__ import annotations

import json
from typing import Any, Dict, Mapping

import numpy as np

from reid.utils.path_kinds import check_file

from ._figure import PlotFiles, fmt, new_figure, save_plot

Curve = Dict[str, np.ndarray]  # {"far", "tar", "threshold"}


def plot_roc(curves: Mapping[str, Mapping[str, Any]], output_path: str, title: str = "ROC (verification)") -> PlotFiles:
    """Plot ROC curves given as ``{label: {"far": [...], "tar": [...], ...}}`` (fractions), log FAR axis.

    Points with FAR 0 cannot sit on a log axis and are left out of the drawing (not of the numbers).
    The .csv/.json beside the PNG hold every point of every curve (FAR, TAR, threshold).
    """
    if not curves:
        raise ValueError("No ROC curve to plot; give at least one (label -> far/tar values).")
    cut: Dict[str, Curve] = {}
    for label, c in curves.items():
        far, tar = np.asarray(c["far"], dtype=np.float64), np.asarray(c["tar"], dtype=np.float64)
        thr = np.asarray(c.get("threshold", np.full(len(far), np.nan)), dtype=np.float64)
        if far.shape != tar.shape or far.size == 0:
            raise ValueError(f"ROC curve {label!r} needs as many FAR as TAR values (at least one).")
        if min(far.min(), tar.min()) < 0 or max(far.max(), tar.max()) > 1 + 1e-9:
            raise ValueError(f"ROC curve {label!r} has rates outside [0, 1]; pass fractions (e.g. 0.942).")
        cut[str(label)] = {"far": far, "tar": tar, "threshold": thr}
    fig, (ax,) = new_figure(size=(7.0, 5.0))
    for label, c in cut.items():
        shown = c["far"] > 0
        ax.plot(c["far"][shown], 100.0 * c["tar"][shown], marker="o", markersize=2.5, label=label)
    ax.set(xscale="log", title=title, xlabel="false accept rate (impostor pairs accepted)",
           ylabel="true accept rate (%)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    data = {"unit": "fractions in [0, 1]; threshold: distance (a pair is accepted when below it)",
            "curves": {k: {kk: vv for kk, vv in v.items()} for k, v in cut.items()}}
    rows = [[label, fmt(f), fmt(t), fmt(h)] for label, c in cut.items()
            for f, t, h in zip(c["far"], c["tar"], c["threshold"])]
    return save_plot(fig, output_path, data, ["curve", "far", "tar", "threshold"], rows)


def read_roc_json(path: str) -> Dict[str, Curve]:
    """Every ROC of a tools/test.py metrics.json (``verification`` -> dataset -> row -> ``roc``),
    labelled ``dataset/row`` (``row`` alone with one dataset)."""
    check_file(path, "Metrics file", "give tools/test.py's metrics.json (run it with --verification).")
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.loads(f.read(64 << 20))
    except (ValueError, RecursionError) as e:
        raise ValueError(f"{path!r} is not valid JSON ({type(e).__name__}); give the metrics.json that tools/test.py "
                         "writes with --verification.") from None
    verification = obj.get("verification") if isinstance(obj, dict) else None
    if not isinstance(verification, dict) or not verification:
        raise ValueError(f"{path!r} holds no verification results; run tools/test.py with --verification (and "
                         "--rerank for the re-ranked curve).")
    out: Dict[str, Curve] = {}
    for dataset, rows in verification.items():
        for row, v in (rows.items() if isinstance(rows, dict) else []):
            roc = v.get("roc") if isinstance(v, dict) else None
            if not isinstance(roc, dict) or "far" not in roc or "tar" not in roc:
                raise ValueError(f"{path!r}: verification {dataset}/{row} has no 'roc' with 'far' and 'tar'.")
            label = row if len(verification) == 1 else f"{dataset}/{row}"
            out[label] = {k: np.asarray(roc[k], dtype=np.float64) for k in ("far", "tar", "threshold") if k in roc}
    return out


__all__ = ["plot_roc", "read_roc_json"]
