"""Draw docs/images/circle_boundary.png: AM-Softmax vs Circle in the (s_n, s_p) plane.

Each panel shows the loss's decision boundary and its normalised gradient-descent
direction (-dL/ds_n, -dL/ds_p) on a grid, computed with autograd through the same
functions the heads use (reid.modeling.losses.similarity_losses). AM-Softmax pushes every
point the same way (s_p - s_n changes at equal rates); Circle's direction depends on how
far each similarity is from its optimum and converges to the target (s_n, s_p) = (0, 1).

    python benchmarks/plot_decision_boundaries.py [--out docs/images/circle_boundary.png]
"""
from __future__ import annotations

import argparse
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from reid.modeling.losses import amsoftmax_loss_sp_sn, circle_loss_sp_sn  # noqa: E402


def descent_field(loss_fn, s_n: np.ndarray, s_p: np.ndarray):
    """Unit vectors of -grad L at each grid point (zero where the gradient vanishes)."""
    sp = torch.tensor(s_p, dtype=torch.float64, requires_grad=True)
    sn = torch.tensor(s_n, dtype=torch.float64, requires_grad=True)
    loss_fn(sp, sn).sum().backward()
    u, v = -sn.grad.numpy(), -sp.grad.numpy()
    norm = np.hypot(u, v)
    norm[norm == 0] = 1.0
    return u / norm, v / norm


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/images/circle_boundary.png")
    args = parser.parse_args()

    # Small gamma for the arrows only: with the training values (64 / 128) the loss
    # saturates and the arrows would only show the sign pattern. Directions are the same.
    am_scale, am_m = 8.0, 0.35
    circle_gamma, circle_m = 8.0, 0.25
    s_n, s_p = np.meshgrid(np.linspace(0.05, 0.95, 8), np.linspace(0.05, 0.95, 8))
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.5), dpi=90)

    u, v = descent_field(lambda a, b: amsoftmax_loss_sp_sn(a, b, am_scale, am_m), s_n, s_p)
    ax = axes[0]
    ax.quiver(s_n, s_p, u, v, color="0.45", scale=12, width=0.006, pivot="mid")
    line = np.linspace(0, 1 - am_m, 50)
    ax.plot(line, line + am_m, color="tab:blue", lw=2, label=r"$s_p - s_n = m$")
    ax.set_title(f"AM-Softmax (m={am_m})")

    u, v = descent_field(lambda a, b: circle_loss_sp_sn(a, b, circle_gamma, circle_m), s_n, s_p)
    ax = axes[1]
    ax.quiver(s_n, s_p, u, v, color="0.45", scale=12, width=0.006, pivot="mid")
    r = math.sqrt(2) * circle_m
    theta = np.linspace(-math.pi / 2, math.pi / 2, 200)
    ax.plot(r * np.cos(theta), 1 + r * np.sin(theta), color="tab:red", lw=2,
            label=r"$s_n^2 + (s_p - 1)^2 = 2m^2$")
    ax.plot([0], [1], "k*", ms=9, label="target (0, 1)")
    ax.set_title(f"Circle (m={circle_m})")

    for ax in axes:
        ax.set_xlim(-0.05, 1.05)
        ax.set_ylim(-0.05, 1.05)
        ax.set_aspect("equal")
        ax.set_xlabel(r"$s_n$")
        ax.set_ylabel(r"$s_p$")
        ax.legend(loc="lower right", fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
