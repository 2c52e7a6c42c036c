"""``build_model(cfg)`` and a one-paragraph summary for the training banner."""
from __future__ import annotations

from torch import nn

from .meta_arch import META_ARCH_REGISTRY


def build_model(cfg) -> nn.Module:
    """Build ``cfg.MODEL.META_ARCHITECTURE`` ("baseline" or "mgn") on the CPU.

    The caller moves the model to its device (and wraps it for DDP); an unknown name
    raises a KeyError that lists the valid ones. The model has ``feature_dim``, the
    width of the eval-mode feature.
    """
    return META_ARCH_REGISTRY.get(cfg.MODEL.META_ARCHITECTURE)(cfg)


def _millions(n: int) -> str:
    return f"{n / 1e6:.2f}M"


def model_summary(model: nn.Module) -> str:
    """A one-line description: class, parameter counts, eval feature dimension."""
    params = list(model.parameters())
    trainable = sum(p.numel() for p in params if p.requires_grad)
    parts = [type(model).__name__]
    if getattr(model, "backbone_name", None):
        parts.append(f"backbone {model.backbone_name}")
    parts.append(f"parameters {_millions(sum(p.numel() for p in params))} (trainable {_millions(trainable)})")
    if getattr(model, "feature_dim", None) is not None:
        parts.append(f"feature dim {model.feature_dim}")
    return " | ".join(parts)


__all__ = ["build_model", "model_summary"]
