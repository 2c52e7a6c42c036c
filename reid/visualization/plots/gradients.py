"""Gradient fields of triplet, AM-Softmax and Circle losses over the (s_n, s_p) plane
(Circle paper, Fig. 2).

Gradients come from autograd through the implemented similarity-space losses in
``reid.modeling.losses.similarity_losses``, so the figure shows what the code optimises,
not a re-typed formula. Each loss is called on a grid of (s_p, s_n) pairs; because the
losses are per element, d(sum)/d(s) at each grid point is that point's own gradient.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._figure import PlotFiles, fmt, new_figure, save_plot
from .decision_boundary import decision_boundary

# loss name -> (function name in similarity_losses, names of its parameters after (s_p, s_n))
LOSS_FUNCTIONS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "triplet": ("triplet_loss_sp_sn", ("margin",)),
    "amsoftmax": ("amsoftmax_loss_sp_sn", ("scale", "margin")),
    "circle": ("circle_loss_sp_sn", ("gamma", "margin")),
}
TITLES = {"triplet": "Triplet loss", "amsoftmax": "AM-Softmax loss", "circle": "Circle loss"}


def default_loss_params() -> Dict[str, Dict[str, float]]:
    """Published head defaults for AM-Softmax and Circle, and the config's triplet margin."""
    # the published defaults live with the heads and the config: one source for each number
    from reid.config import get_cfg
    from reid.modeling.heads import HEAD_DEFAULTS

    am, ci = HEAD_DEFAULTS["amsoftmax"], HEAD_DEFAULTS["circle"]
    return {
        "triplet": {"margin": float(get_cfg().MODEL.LOSSES.TRIPLET.MARGIN)},
        "amsoftmax": {"scale": float(am["scale"]), "margin": float(am["margin"])},
        "circle": {"gamma": float(ci["scale"]), "margin": float(ci["margin"])},
    }


@dataclass
class GradientField:
    """Loss and its gradient on a grid; arrays are ``[len(s_p_axis), len(s_n_axis)]``."""

    loss: str
    params: Dict[str, float]
    s_n: np.ndarray
    s_p: np.ndarray
    value: np.ndarray
    grad_s_n: np.ndarray
    grad_s_p: np.ndarray

    @property
    def grad_norm(self) -> np.ndarray:
        return np.hypot(self.grad_s_n, self.grad_s_p)


def loss_gradients(loss: str, s_n: np.ndarray, s_p: np.ndarray, **params: float) -> GradientField:
    """Loss values and (dL/ds_n, dL/ds_p) by autograd at the points (s_n, s_p) (same shapes)."""
    # torch and the model code load only when gradients are drawn: other plots need neither
    import torch

    from reid.modeling.losses import similarity_losses

    key = str(loss).lower()
    if key not in LOSS_FUNCTIONS:
        raise ValueError(f"Unknown loss {loss!r}; use one of {', '.join(LOSS_FUNCTIONS)}.")
    fn_name, names = LOSS_FUNCTIONS[key]
    missing = [n for n in names if n not in params]
    if missing:
        raise ValueError(f"Loss {key!r} needs parameter(s) {missing} (it takes {', '.join(names)}).")
    fn = getattr(similarity_losses, fn_name)
    s_n, s_p = np.asarray(s_n, np.float64), np.asarray(s_p, np.float64)
    if s_n.shape != s_p.shape:
        raise ValueError(f"s_n has shape {s_n.shape} but s_p {s_p.shape}; they must match point for point.")
    sp = torch.tensor(s_p, dtype=torch.float64, requires_grad=True)
    sn = torch.tensor(s_n, dtype=torch.float64, requires_grad=True)
    value = fn(sp, sn, *[params[n] for n in names])
    if value.shape != sp.shape:
        raise RuntimeError(
            f"{fn_name} returned shape {tuple(value.shape)} for inputs of shape {tuple(sp.shape)}; the gradient "
            "field needs per-element losses."
        )
    g_p, g_n = torch.autograd.grad(value.sum(), [sp, sn], allow_unused=True)
    zeros = np.zeros_like(s_p)
    return GradientField(
        key, {n: float(params[n]) for n in names}, s_n, s_p, value.detach().numpy(),
        zeros if g_n is None else g_n.numpy(), zeros if g_p is None else g_p.numpy(),
    )


def gradient_grid(
    losses: Sequence[str] = ("triplet", "amsoftmax", "circle"),
    params: Optional[Mapping[str, Mapping[str, float]]] = None,
    grid: int = 101,
    lim: Tuple[float, float] = (0.0, 1.0),
) -> Dict[str, GradientField]:
    """:func:`loss_gradients` of each loss on a `grid` x `grid` lattice over ``lim`` x ``lim``.

    `params` overrides :func:`default_loss_params` per loss (e.g. ``{"circle": {"gamma": 64}}``).
    """
    if grid < 2:
        raise ValueError(f"grid must be >= 2 points per axis, got {grid}.")
    merged = default_loss_params()
    for name, p in (params or {}).items():
        if name not in merged:
            raise ValueError(f"Parameters given for unknown loss {name!r}; losses: {', '.join(merged)}.")
        merged[name] = {**merged[name], **{k: float(v) for k, v in p.items()}}
    axis = np.linspace(lim[0], lim[1], grid)
    s_n, s_p = np.meshgrid(axis, axis, indexing="xy")  # rows: s_p, columns: s_n
    return {name: loss_gradients(name, s_n, s_p, **merged[name]) for name in losses}


def _boundary(f: GradientField) -> Tuple[np.ndarray, np.ndarray, str]:
    m = f.params["margin"]
    if f.loss == "circle":
        bn, bp = decision_boundary("circle", m)
        return bn, bp, f"s_n^2 + (s_p-1)^2 = 2m^2, m={m:g}"
    bn, bp = decision_boundary("amsoftmax", m)  # triplet and AM-Softmax: the line s_p - s_n = m
    return bn, bp, f"s_p - s_n = {m:g}"


def plot_gradients(
    fields: Mapping[str, GradientField],
    output_path: str,
    arrows: int = 15,
    title: str = "Gradient of each loss over the (s_n, s_p) plane",
) -> PlotFiles:
    """One panel per loss: the gradient norm as a heat map, arrows for the descent direction
    (-gradient, unit length, about `arrows` per axis), and the decision boundary."""
    if not fields:
        raise ValueError("No gradient field to plot.")
    fig, axes = new_figure(ncols=len(fields), size=(5.0, 4.6))
    for ax, (name, f) in zip(axes, fields.items()):
        ext = (f.s_n[0, 0], f.s_n[0, -1], f.s_p[0, 0], f.s_p[-1, 0])
        im = ax.imshow(f.grad_norm, origin="lower", extent=ext, aspect="equal", cmap="viridis")
        cb = fig.colorbar(im, ax=ax, shrink=0.8)
        cb.set_label("|grad L| (loss per unit cosine similarity)")
        step = max(1, f.s_n.shape[0] // arrows)
        sl = (slice(step // 2, None, step), slice(step // 2, None, step))
        gn, gp = -f.grad_s_n[sl], -f.grad_s_p[sl]
        norm = np.hypot(gn, gp)
        # unit arrows show the direction only (magnitude is the colour); where the gradient is
        # under 1% of the panel's largest, the loss has stopped pushing, so no arrow is drawn
        weak = norm < 0.01 * max(float(f.grad_norm.max()), 1e-30)
        safe = np.where(weak, 1.0, norm)
        ax.quiver(f.s_n[sl], f.s_p[sl], np.ma.masked_where(weak, gn / safe), np.ma.masked_where(weak, gp / safe),
                  color="white", angles="xy", scale_units="xy", scale=1.0 / (0.6 * (ext[1] - ext[0]) / arrows),
                  width=0.004)
        bn, bp, eq = _boundary(f)
        ax.plot(bn, bp, color="red", linewidth=1.5, label=f"boundary: {eq}")
        params = ", ".join(f"{k}={v:g}" for k, v in f.params.items())
        ax.set(xlim=(ext[0], ext[1]), ylim=(ext[2], ext[3]), title=f"{TITLES.get(name, name)} ({params})",
               xlabel="s_n (cosine similarity)", ylabel="s_p (cosine similarity)")
        ax.legend(loc="lower right", fontsize=7)
    fig.suptitle(title)
    data: Dict[str, Any] = {
        "grid_s_n": fields[next(iter(fields))].s_n[0],
        "grid_s_p": fields[next(iter(fields))].s_p[:, 0],
        "losses": {n: {"params": f.params, "function": LOSS_FUNCTIONS[n][0], "max_grad_norm": float(f.grad_norm.max()),
                       "min_grad_norm": float(f.grad_norm.min())} for n, f in fields.items()},
        "csv_columns": "one row per loss and grid point",
    }
    rows = [[n, fmt(a), fmt(b), fmt(v), fmt(gn_), fmt(gp_), fmt(g)]
            for n, f in fields.items()
            for a, b, v, gn_, gp_, g in zip(f.s_n.ravel(), f.s_p.ravel(), f.value.ravel(),
                                            f.grad_s_n.ravel(), f.grad_s_p.ravel(), f.grad_norm.ravel())]
    return save_plot(fig, output_path, data, ["loss", "s_n", "s_p", "loss_value", "grad_s_n", "grad_s_p", "grad_norm"], rows)
