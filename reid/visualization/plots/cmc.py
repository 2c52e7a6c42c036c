"""CMC curves (rank 1..max_rank), e.g. with and without re-ranking, on one plot."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Sequence, Tuple

import numpy as np

from reid.utils.path_kinds import check_file

from ._figure import PlotFiles, fmt, new_figure, save_plot


def plot_cmc(
    curves: Mapping[str, Sequence[float]],
    output_path: str,
    max_rank: int = 50,
    title: str = "CMC curve",
) -> PlotFiles:
    """Plot CMC curves given as fractions in [0, 1] (``evaluate_rank``'s ``cmc``), one per label.

    Curves are cut at `max_rank`; a shorter curve (small gallery) is drawn as far as it goes.
    The .csv/.json beside the PNG hold the values as given (fractions), rank by rank.
    """
    if not curves:
        raise ValueError("No CMC curve to plot; give at least one (label -> cmc values).")
    if max_rank < 1:
        raise ValueError(f"max_rank must be >= 1, got {max_rank}.")
    cut: Dict[str, np.ndarray] = {}
    for label, cmc in curves.items():
        arr = np.asarray(cmc, dtype=np.float64).reshape(-1)[:max_rank]
        if arr.size == 0:
            raise ValueError(f"CMC curve {label!r} is empty.")
        if np.nanmax(arr) > 1.0 + 1e-9 or np.nanmin(arr) < 0.0:
            raise ValueError(f"CMC curve {label!r} has values outside [0, 1]; pass fractions (e.g. 0.942, not 94.2).")
        cut[str(label)] = arr
    n = max(len(a) for a in cut.values())
    ranks = np.arange(1, n + 1)
    fig, (ax,) = new_figure(size=(7.0, 5.0))
    for label, arr in cut.items():
        r5 = f", R-5 {100 * arr[4]:.1f}%" if len(arr) >= 5 else ""
        ax.plot(ranks[: len(arr)], 100.0 * arr, marker="o", markersize=3, label=f"{label}: R-1 {100 * arr[0]:.1f}%{r5}")
    ax.set(title=title, xlabel="rank", ylabel="fraction of queries (%) with a true match within rank",
           xlim=(1, max(n, 2)))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right")
    data = {"max_rank": int(max_rank), "unit": "fraction of queries in [0, 1]", "rank": ranks,
            "curves": {k: v for k, v in cut.items()}}
    rows = [[int(r)] + [fmt(a[r - 1]) if r <= len(a) else "" for a in cut.values()] for r in ranks]
    return save_plot(fig, output_path, data, ["rank"] + list(cut), rows)


def cmc_curves_from_features(
    features_path: str,
    metric: str = "cosine",
    rerank: bool = True,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    max_rank: int = 50,
) -> Dict[str, np.ndarray]:
    """CMC of a saved-features npz: {"original": cmc} plus {"re-ranked": cmc} when `rerank`."""
    # evaluation (and torch) load only when curves are computed, not for plotting given ones
    from reid.evaluation import evaluate_rank, evaluate_rank_from_features, re_ranking

    from ..from_features import load_saved_features

    s = load_saved_features(features_path)
    ids = (s.query.pids, s.gallery.pids, s.query.camids, s.gallery.camids)
    # From the features in chunks: the Q x G matrix (3.8 GB at MSMT17 size) is never built.
    out = {"original": evaluate_rank_from_features(s.query_feats, s.gallery_feats, *ids, metric=metric,
                                                   max_rank=max_rank)["cmc"]}
    if rerank:
        d = re_ranking(s.query_feats, s.gallery_feats, k1=k1, k2=k2, lambda_value=lambda_value, metric=metric)
        out["re-ranked"] = evaluate_rank(d, *ids, max_rank=max_rank)["cmc"]
    return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def read_cmc_json(path: str) -> Dict[str, np.ndarray]:
    """Every ``cmc`` array in a JSON file, labelled by the keys that lead to it.

    Accepts flat (``{"cmc": [...]}``) or nested (``{"plain": {"cmc": [...]}, "rerank": {...}}``)
    layouts, and a ``curves`` mapping as written by :func:`plot_cmc`. Percentages (values
    above 1) are converted to fractions.
    """
    check_file(path, "Metrics file", "give a JSON file with a 'cmc' list (e.g. tools/test.py's metrics.json).")
    with open(path, encoding="utf-8") as f:
        try:
            obj = json.load(f)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{path!r} is not valid JSON ({type(e).__name__}); give a metrics JSON file with a 'cmc' "
                             "list.") from None
    found: List[Tuple[List[str], Any]] = []
    _find_cmc(obj, [], found)
    if not found:
        raise ValueError(f"No 'cmc' list found in {path!r}; the file must contain a key 'cmc' with the curve.")
    base = _file_label(path)
    out: Dict[str, np.ndarray] = {}
    for keys, values in found:
        arr = np.asarray(values, dtype=np.float64)
        if np.nanmax(arr) > 1.0 + 1e-9:  # written as percentages
            arr = arr / 100.0
        out[" / ".join([base] + keys) if keys else base] = arr
    return out


def _find_cmc(obj: Any, keys: List[str], found: List[Tuple[List[str], Any]]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "cmc" and isinstance(v, list):
                found.append((keys, v))
            elif k == "curves" and isinstance(v, dict) and all(isinstance(x, list) for x in v.values()):
                found.extend((keys + [str(n)], x) for n, x in v.items())
            else:
                # a "results" wrapper adds nothing to a label
                _find_cmc(v, keys if k == "results" else keys + [str(k)], found)


def _file_label(path: str) -> str:
    """A run's folder name for metrics.json-like files, else the file stem."""
    stem = os.path.splitext(os.path.basename(path))[0]
    folder = os.path.dirname(os.path.abspath(path))
    if not stem.startswith("metrics"):
        return stem
    # tools/test.py writes OUTPUT_DIR/test/metrics.json: the run is the folder above "test"
    if os.path.basename(folder) == "test":
        folder = os.path.dirname(folder)
    return os.path.basename(folder) or stem
