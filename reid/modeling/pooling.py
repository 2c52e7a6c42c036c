"""Global pooling of a feature map ``[B, C, H, W]`` into a vector ``[B, C]``.

``POOLING_REGISTRY`` is keyed by ``MODEL.HEADS.POOLING``: "avg", "max", "gem" (generalised mean,
Radenovic et al. 2018, with a learnable exponent p) or "gem_fixed" (the same with p fixed at
``MODEL.HEADS.GEM_P``: fast-reid's ``GeneralizedMeanPooling`` of its VehicleID and VERI-Wild
configs, which stores no tensor).
"""
from __future__ import annotations

import torch
from torch import nn

from reid.utils.registry import Registry

POOLING_REGISTRY = Registry("MODEL.HEADS.POOLING")


class AvgPool(nn.Module):
    """Mean over all spatial positions."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(2, 3))


class MaxPool(nn.Module):
    """Maximum over all spatial positions."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=(2, 3))


class FixedGeMPool(nn.Module):
    """Generalised mean ``(mean(x^p))^(1/p)`` with a fixed exponent `p` (no parameter, nothing in
    the state dict): p=1 is average, p -> inf approaches max.

    Args:
        p: the exponent (> 0).
        eps: lower clamp; the input must be non-negative (post-ReLU maps are) and the
            clamp keeps ``x^p`` and its gradient finite at zero.
    """

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__()
        if p <= 0:
            raise ValueError(f"MODEL.HEADS.GEM_P must be > 0, got {p!r}.")
        self.p = float(p)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Powers overflow quickly in half precision, so the mean is taken in float32.
        x = x.float().clamp(min=self.eps)
        return x.pow(self.p).mean(dim=(2, 3)).pow(1.0 / self.p)

    def extra_repr(self) -> str:
        return f"p={self.p:.3f} (fixed), eps={self.eps}"


class GeMPool(FixedGeMPool):
    """Generalised mean (:class:`FixedGeMPool`) whose exponent `p` (its initial value) is learnable:
    the optimizer treats it like a norm parameter."""

    def __init__(self, p: float = 3.0, eps: float = 1e-6) -> None:
        super().__init__(p, eps)
        self.p = nn.Parameter(torch.tensor(float(p)))

    def extra_repr(self) -> str:
        return f"p={float(self.p.detach()):.3f}, eps={self.eps}"


POOLING_REGISTRY.register("avg")(lambda gem_p=3.0: AvgPool())
POOLING_REGISTRY.register("max")(lambda gem_p=3.0: MaxPool())
POOLING_REGISTRY.register("gem")(lambda gem_p=3.0: GeMPool(gem_p))
POOLING_REGISTRY.register("gem_fixed")(lambda gem_p=3.0: FixedGeMPool(gem_p))


def build_pooling(name: str, gem_p: float = 3.0) -> nn.Module:
    """Return the pooling module `name`; unknown names raise a KeyError listing valid ones."""
    return POOLING_REGISTRY.get(name)(gem_p=gem_p)


__all__ = ["POOLING_REGISTRY", "AvgPool", "FixedGeMPool", "MaxPool", "GeMPool", "build_pooling"]
