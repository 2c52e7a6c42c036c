"""Figure creation and saving shared by every plot: PNG plus the numbers behind it.

Figures are built on matplotlib's object API with the Agg canvas, never pyplot: no display
is needed, and a user's interactive backend (e.g. in a notebook) is left untouched.
"""
from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from reid.utils.file_io import atomic_write, atomic_write_text
from reid.utils.json_values import jsonable

DPI = 120


@dataclass
class PlotFiles:
    """Paths written for one plot and the data saved next to it."""

    png: str
    json: str
    csv: Optional[str] = None
    data: Dict[str, Any] = field(default_factory=dict)


def new_figure(ncols: int = 1, size: Tuple[float, float] = (7.0, 5.0)) -> Tuple[Figure, Sequence[Any]]:
    """A figure with `ncols` axes side by side, each `size` inches; returns (figure, axes list)."""
    fig = Figure(figsize=(size[0] * ncols, size[1]), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def png_path(path: str) -> str:
    """`path` checked to name a .png file (".png" appended when there is no extension)."""
    root, ext = os.path.splitext(str(path))
    if not ext:
        return root + ".png"
    if ext.lower() != ".png":
        raise ValueError(f"Plot output {path!r} must be a .png file name (the CSV/JSON are written next to it).")
    return str(path)


def save_plot(
    fig: Figure,
    path: str,
    data: Dict[str, Any],
    csv_header: Optional[Sequence[str]] = None,
    csv_rows: Optional[Iterable[Sequence[Any]]] = None,
) -> PlotFiles:
    """Write `fig` to `path` (.png), `data` to the .json beside it and, when given, the table
    to the .csv beside it. All three are written atomically."""
    path = png_path(path)
    stem = os.path.splitext(path)[0]
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    atomic_write(path, lambda f: f.write(buf.getvalue()))
    json_path = stem + ".json"
    atomic_write_text(json_path, json.dumps(jsonable(data), indent=1) + "\n")
    csv_path = None
    if csv_header is not None and csv_rows is not None:
        sbuf = io.StringIO()
        w = csv.writer(sbuf, lineterminator="\n")
        w.writerow(list(csv_header))
        w.writerows(csv_rows)
        csv_path = stem + ".csv"
        atomic_write_text(csv_path, sbuf.getvalue())
    return PlotFiles(path, json_path, csv_path, data)


def fmt(x: float) -> str:
    """A float for CSV: repr-exact for round trips, empty for NaN."""
    return "" if x is None or not np.isfinite(x) else repr(float(x))
