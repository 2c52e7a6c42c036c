"""UDA.EPS auto: the DBSCAN radius read from the data, every epoch.

A fixed radius suits one model on one domain: Cluster Contrast's 0.6 for Market-1501 is 0.7 for
MSMT17, and a model's Jaccard distances shrink as it adapts, so one value merges people late in
a run that split them early. Without labels the number of clusters still says which radii make
sense: a radius too small leaves most images outliers (few clusters), one too large merges
people (few, large clusters); in between the count reaches a maximum, and a radius where the
count does not change much as the radius moves is one where the clusters do not hinge on it.

The rule: DBSCAN at every radius of a grid (UDA.EPS_RANGE in steps of :data:`EPS_STEP`, all on
the one Jaccard graph computed out to the grid's largest radius, so each try costs one DBSCAN).
A radius is allowed when it keeps at least :data:`MIN_SHARE` of the largest count (a range where
almost everything is one cluster, or almost nothing is, is flat too, and wrong) and its clusters
raise none of the health warnings that one clustering can raise (reid.uda.health: most images
outliers, a giant cluster), so that the radius chosen never triggers a warning whose advice is to
move it. Among the allowed radii, the longest run of consecutive ones whose counts stay within
:data:`STABLE_TOLERANCE` of each other (ties: the run with more clusters on average); its middle
(the lower of two middles: the smaller radius merges less). Where no count is stable the runs are
single radii and the rule picks the one with the most clusters. Where every radius of the range
raises a warning, the count rule alone decides and the choice says so (the warning that follows
names the end of the range to move). The choice and the curve are logged and kept in
metrics.jsonl, so a user sees why.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import scipy.sparse as sp

from reid.utils.stop_request import check_stop

from .health import RunOptions, cluster_health, health_warnings

#: Spacing of the radii tried (Jaccard distances; 0.025 resolves the 0.5 / 0.6 / 0.7 of the papers).
EPS_STEP = 0.025
#: Counts that differ by at most this share (largest / smallest - 1) are "stable": a plateau.
STABLE_TOLERANCE = 0.1
#: A plateau must keep this share of the largest count (else "everything merged" would qualify).
MIN_SHARE = 0.5
#: Fewer training images than this and the cluster counts are too few and too noisy to read.
MIN_IMAGES = 200


def eps_grid(first: float, last: float) -> np.ndarray:
    """The radii tried: `first`, `first` + EPS_STEP, ... up to `last` (inclusive, rounded to 1e-6)."""
    steps = int(np.floor((last - first) / EPS_STEP + 1e-6))
    return np.round(first + EPS_STEP * np.arange(steps + 1), 6)


def check_eps_range(values: Sequence[float], key: str = "UDA.EPS_RANGE") -> Tuple[float, float]:
    """``(first, last)`` of a radius range; a ValueError naming `key` unless 0 < first < last < 1."""
    if len(values) != 2:
        raise ValueError(f"{key} must be two radii [first, last], e.g. [0.3, 0.8], got {list(values)}.")
    first, last = float(values[0]), float(values[1])
    if not 0.0 < first < last < 1.0 or last - first < EPS_STEP:
        raise ValueError(f"{key} must satisfy 0 < first < last < 1 with last - first >= {EPS_STEP}, "
                         f"e.g. [0.3, 0.8], got {list(values)}.")
    return first, last


def check_auto_images(num_images: int) -> None:
    """Refuse UDA.EPS auto on fewer than :data:`MIN_IMAGES` images (one line, says what to do)."""
    if num_images < MIN_IMAGES:
        raise ValueError(f"UDA.EPS auto reads the radius from how the cluster count changes with it, which "
                         f"{num_images} training images are too few to show (it needs at least {MIN_IMAGES}); "
                         "set UDA.EPS to a number (0.5-0.7 is usual).")


@dataclass(frozen=True)
class EpsChoice:
    """The radius chosen, the curve it was read from and why."""

    eps: float
    grid: Tuple[float, ...]
    counts: Tuple[int, ...]
    plateau: Tuple[float, float]  # first and last radius of the run chosen
    outliers: Tuple[float, ...] = ()  # share of outliers at each radius
    warned: Tuple[bool, ...] = ()  # whether a radius's clusters raise a health warning

    @property
    def every_radius_warned(self) -> bool:
        """True when no radius of the range was free of health warnings (the count rule alone chose)."""
        return bool(self.warned) and all(self.warned)

    def reason(self) -> str:
        """One line: the choice and the curve."""
        curve = ", ".join(f"{e:.3g}: {c}" + (f" ({o:.0%} out)" if self.outliers else "")
                          for e, c, o in zip(self.grid, self.counts, self.outliers or [0.0] * len(self.grid)))
        healthy = ("; every radius left a health warning, so the counts alone decided" if self.every_radius_warned
                   else ", among the radii whose clusters raise no health warning" if any(self.warned) else "")
        return (f"UDA.EPS auto chose {self.eps:.3f}, the middle of {self.plateau[0]:.3f}-{self.plateau[1]:.3f}, the "
                f"widest range of radii whose cluster counts stay within {STABLE_TOLERANCE:.0%} of each other (at "
                f"least {MIN_SHARE:.0%} of the most, {max(self.counts)}){healthy}; clusters per radius: {curve}")

    def record(self) -> Dict[str, object]:
        """The figures for metrics.jsonl."""
        out: Dict[str, object] = {"eps": self.eps, "eps_plateau": list(self.plateau),
                                  "eps_curve": {f"{e:.3f}": c for e, c in zip(self.grid, self.counts)}}
        if self.outliers:
            out["eps_outliers"] = {f"{e:.3f}": round(o, 4) for e, o in zip(self.grid, self.outliers)}
        if self.every_radius_warned:
            out["eps_all_warned"] = True
        return out


def radius_warnings(labels: np.ndarray) -> List[str]:
    """The health warnings (reid.uda.health) that the clusters of one radius raise on their own:
    most images outliers, a giant cluster (not the trends, which need several epochs, nor the
    camera rule, which the radius does not decide)."""
    kept = int((labels >= 0).sum())
    record = {"clusters": int(labels.max()) + 1 if labels.size else 0, "images": int(labels.size), "images_kept": kept}
    record.update(cluster_health(labels, None))
    return health_warnings([record], 0, RunOptions(auto_eps=True))


def choose_eps(graph: sp.csr_matrix, min_samples: int, grid: Sequence[float],
               dbscan: Callable[[sp.csr_matrix, float, int], np.ndarray]) -> EpsChoice:
    """The radius of `grid` the module docstring's rule picks, from DBSCAN (`dbscan(graph, eps,
    min_samples)` -> labels, the labels the epoch would train on) on `graph` (a sparse distance
    graph holding every pair within the grid's largest radius)."""
    grid = [float(e) for e in grid]
    counts: List[int] = []
    outliers: List[float] = []
    warned: List[bool] = []
    for eps in grid:
        check_stop("choosing UDA.EPS")  # 21 DBSCANs take seconds at 100,000 images: a stop need not wait
        labels = dbscan(graph, eps, min_samples)
        counts.append(int(labels.max()) + 1 if labels.size else 0)
        outliers.append(float((labels < 0).mean()) if labels.size else 0.0)
        warned.append(bool(radius_warnings(labels)))
    c = np.asarray(counts, np.float64)
    allowed = c >= MIN_SHARE * c.max()
    healthy = allowed & ~np.asarray(warned)
    if healthy.any():
        allowed = healthy
    best_key, start, end = None, 0, 0
    for i in np.flatnonzero(allowed):
        j = i
        while j + 1 < len(c) and allowed[j + 1] and max(c[i : j + 2]) <= (1 + STABLE_TOLERANCE) * min(c[i : j + 2]):
            j += 1
        key = (j - i, c[i : j + 1].mean())  # longest first, then more clusters
        if best_key is None or key > best_key:
            best_key, start, end = key, int(i), int(j)
    mid = start + (end - start) // 2
    return EpsChoice(grid[mid], tuple(grid), tuple(counts), (grid[start], grid[end]), tuple(outliers), tuple(warned))


__all__ = ["EPS_STEP", "EpsChoice", "MIN_IMAGES", "MIN_SHARE", "STABLE_TOLERANCE", "check_auto_images", "check_eps_range",
           "choose_eps", "eps_grid", "radius_warnings"]
