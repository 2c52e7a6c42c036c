"""Small checks shared by the meta architectures."""
from __future__ import annotations

from ..loss_assembly import FEAT_CHOICES


def neck_feat_from_cfg(cfg) -> str:
    """``MODEL.HEADS.NECK_FEAT`` checked to be "before" or "after"."""
    value = str(cfg.MODEL.HEADS.NECK_FEAT).lower()
    if value not in FEAT_CHOICES:
        raise ValueError(
            f"MODEL.HEADS.NECK_FEAT must be one of {', '.join(FEAT_CHOICES)}, got {value!r}."
        )
    return value


def missing_targets_error() -> ValueError:
    """The error for a train-mode forward without labels."""
    return ValueError(
        "The model is in train mode and needs targets: call model(images, targets), "
        "or call model.eval() to extract features with model(images)."
    )


__all__ = ["missing_targets_error", "neck_feat_from_cfg"]
