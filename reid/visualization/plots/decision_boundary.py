"""The (s_n, s_p) plane after training with the head's decision boundary (Circle paper, Fig. 5).

For each training image, s_p is its cosine to its own class weight and s_n the largest cosine
to another class weight. Circle loss aims at the point (0, 1) and its boundary is the circle
s_n^2 + (s_p - 1)^2 = 2 m^2; AM-Softmax's is the line s_p - s_n = m; ArcFace's the curve
arccos(s_p) + m = arccos(s_n).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from reid.utils.npz_files import npz_names, read_npz
from reid.utils.path_kinds import check_file

from ..items import to_numpy_2d
from ._figure import PlotFiles, fmt, new_figure, save_plot

# head name -> boundary family; aliases share a boundary
_FAMILY = {
    "circle": "circle",
    "amsoftmax": "line", "cosface": "line",
    "arcface": "angle", "curricularface": "angle",
    "normface": "line", "linear": "line",
}


def resolve_margin(head: str, margin: Optional[float] = None) -> float:
    """`margin`, or the head's published default when None or negative (0 for heads without one)."""
    key = str(head).lower()
    if key not in _FAMILY:
        raise ValueError(f"No decision boundary for head {head!r}; use one of {', '.join(sorted(_FAMILY))}.")
    if margin is not None and float(margin) >= 0:
        return float(margin)
    from reid.modeling.heads import HEAD_DEFAULTS  # single source of the published defaults

    m = HEAD_DEFAULTS.get(key, {}).get("margin")
    return 0.0 if m is None else float(m)


def boundary_equation(head: str, margin: float) -> str:
    """The boundary as text, for legends and JSON."""
    fam = _FAMILY[str(head).lower()]
    if fam == "circle":
        return f"s_n^2 + (s_p - 1)^2 = 2 m^2 (m = {margin:g})"
    if fam == "angle":
        return f"arccos(s_p) + m = arccos(s_n) (m = {margin:g} rad)"
    return f"s_p - s_n = m (m = {margin:g})"


def decision_boundary(head: str, margin: float, num: int = 721) -> Tuple[np.ndarray, np.ndarray]:
    """Points (s_n, s_p) on the boundary inside [-1, 1]^2; NaN where it leaves the square."""
    fam = _FAMILY[str(head).lower()]
    if fam == "circle":
        t = np.linspace(0.0, 2.0 * np.pi, num)
        r = np.sqrt(2.0) * margin
        sn, sp = r * np.cos(t), 1.0 + r * np.sin(t)
    elif fam == "angle":
        sn = np.linspace(-1.0, 1.0, num)
        theta_n = np.arccos(sn)
        sp = np.where(theta_n >= margin, np.cos(theta_n - margin), np.nan)
    else:
        sn = np.linspace(-1.0, 1.0, num)
        sp = sn + margin
    outside = (np.abs(sn) > 1.0) | (np.abs(sp) > 1.0)
    return np.where(outside, np.nan, sn), np.where(outside, np.nan, sp)


def past_boundary(s_n: np.ndarray, s_p: np.ndarray, head: str, margin: float) -> np.ndarray:
    """True where a point lies on the side the loss pushes towards (the boundary is met)."""
    fam = _FAMILY[str(head).lower()]
    s_n, s_p = np.asarray(s_n, np.float64), np.asarray(s_p, np.float64)
    if fam == "circle":
        return s_n**2 + (s_p - 1.0) ** 2 < 2.0 * margin**2
    if fam == "angle":
        return np.arccos(np.clip(s_p, -1, 1)) + margin < np.arccos(np.clip(s_n, -1, 1))
    return s_p - s_n > margin


def similarity_pairs(features: Any, labels: Any, class_weights: Any, chunk: int = 4096) -> Tuple[np.ndarray, np.ndarray]:
    """(s_n, s_p) per sample: s_p = cos(feature, own class weight), s_n = max cos to other classes."""
    f = to_numpy_2d(features, "features")
    w = to_numpy_2d(class_weights, "class_weights")
    y = np.asarray(labels.detach().cpu().numpy() if hasattr(labels, "detach") else labels).astype(np.int64).reshape(-1)
    if len(y) != len(f):
        raise ValueError(f"{len(f)} features but {len(y)} labels; give one label per feature.")
    if f.shape[1] != w.shape[1]:
        raise ValueError(f"Features have {f.shape[1]} dims but class weights {w.shape[1]}; use the head's weight [C, D].")
    if len(y) and (y.min() < 0 or y.max() >= len(w)):
        raise ValueError(f"Labels must lie in [0, {len(w) - 1}] (training labels, relabelled), got {y.min()}..{y.max()}.")
    f = f / np.maximum(np.linalg.norm(f, axis=1, keepdims=True), 1e-12)
    w = w / np.maximum(np.linalg.norm(w, axis=1, keepdims=True), 1e-12)
    s_p = np.empty(len(f), np.float32)
    s_n = np.empty(len(f), np.float32)
    for s in range(0, len(f), chunk):
        cos = f[s : s + chunk] @ w.T
        rows = np.arange(cos.shape[0])
        yy = y[s : s + chunk]
        s_p[s : s + chunk] = cos[rows, yy]
        cos[rows, yy] = -np.inf
        s_n[s : s + chunk] = cos.max(axis=1)
    return s_n, s_p


def load_pairs_npz(path: str) -> Tuple[np.ndarray, np.ndarray]:
    """(s_n, s_p) from an npz holding ``s_n`` and ``s_p``, or ``features`` + ``labels`` + ``class_weights``."""
    check_file(path, "File", "give an .npz with arrays s_n and s_p (or features, labels and class_weights).")
    keys = set(npz_names(path))
    if {"s_n", "s_p"} <= keys:
        z = read_npz(path, ["s_n", "s_p"])
        s_n, s_p = z["s_n"].reshape(-1), z["s_p"].reshape(-1)
        if len(s_n) != len(s_p):
            raise ValueError(f"{path}: s_n has {len(s_n)} values but s_p {len(s_p)}; they must pair up.")
        return s_n.astype(np.float64), s_p.astype(np.float64)
    # Each role may go by several names; only the first present is read.
    roles = (("features", "feats"), ("labels", "targets"), ("class_weights", "weight", "weights"))
    chosen = [next((n for n in names if n in keys), None) for names in roles]
    if None in chosen:
        raise ValueError(
            f"{path} has arrays {sorted(keys)}; it needs s_n and s_p, or features, labels and class_weights."
        )
    z = read_npz(path, chosen)
    return similarity_pairs(*(z[n] for n in chosen))


def plot_decision_boundary(
    s_n: Any,
    s_p: Any,
    output_path: str,
    head: str = "circle",
    margin: Optional[float] = None,
    max_points: int = 5000,
    seed: int = 0,
    title: Optional[str] = None,
) -> PlotFiles:
    """Scatter a seeded sample of (s_n, s_p) points with the head's decision boundary.

    Points past the boundary are blue, the others orange; the dotted diagonal s_p = s_n is the
    boundary without margin. The JSON holds the fraction of *all* points past the boundary.
    """
    s_n, s_p = np.asarray(s_n, np.float64).reshape(-1), np.asarray(s_p, np.float64).reshape(-1)
    if len(s_n) != len(s_p):
        raise ValueError(f"s_n has {len(s_n)} values but s_p {len(s_p)}; give one (s_n, s_p) pair per sample.")
    if len(s_n) == 0:
        raise ValueError("No (s_n, s_p) point to plot.")
    m = resolve_margin(head, margin)
    ok = past_boundary(s_n, s_p, head, m)
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(s_n), size=min(max_points, len(s_n)), replace=False))
    bn, bp = decision_boundary(head, m)
    fig, (ax,) = new_figure(size=(6.0, 6.0))
    ax.scatter(s_n[idx][ok[idx]], s_p[idx][ok[idx]], s=6, alpha=0.5, color="tab:blue", label="past the boundary")
    ax.scatter(s_n[idx][~ok[idx]], s_p[idx][~ok[idx]], s=6, alpha=0.5, color="tab:orange", label="not past it")
    ax.plot(bn, bp, color="k", linewidth=2, label=f"{head} boundary: {boundary_equation(head, m)}")
    ax.plot([-1, 1], [-1, 1], color="0.5", linestyle=":", linewidth=1, label="s_p = s_n")
    ax.plot([0], [1], marker="*", color="k", markersize=10, linestyle="none", label="optimum (0, 1)")
    x0 = min(-0.2, np.percentile(s_n, 0.5)) - 0.05
    x1 = max(0.6, np.percentile(s_n, 99.5)) + 0.05
    y0 = min(0.2, np.percentile(s_p, 0.5)) - 0.05
    ax.set(xlim=(max(-1.0, x0), min(1.0, x1)), ylim=(max(-1.0, y0), 1.02), aspect="equal",
           title=title or f"Training pairs in the (s_n, s_p) plane: {head}",
           xlabel="s_n: largest cosine similarity to another class", ylabel="s_p: cosine similarity to own class")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    data: Dict[str, Any] = {
        "head": head, "margin": m, "boundary": boundary_equation(head, m),
        "num_points": int(len(s_n)), "num_plotted": int(len(idx)),
        "fraction_past_boundary": float(ok.mean()),
        "s_p_mean": float(s_p.mean()), "s_n_mean": float(s_n.mean()),
    }
    rows = [[fmt(a), fmt(b), int(c)] for a, b, c in zip(s_n[idx], s_p[idx], ok[idx])]
    return save_plot(fig, output_path, data, ["s_n", "s_p", "past_boundary"], rows)


def head_from_config(config_file: str) -> Tuple[str, float]:
    """(head name, margin) of a run's config (e.g. ``OUTPUT_DIR/config.yaml``), defaults resolved."""
    from reid.config import load_config  # only this entry point reads configs

    check_file(config_file, "Config", "give a run's config.yaml or a configs/*.yml file.")
    cfg = load_config(config_file)
    name = str(cfg.MODEL.HEADS.NAME).lower()
    return name, resolve_margin(name, cfg.MODEL.HEADS.MARGIN)
