"""Small checks shared by the meta architectures."""
from __future__ import annotations

import logging
from typing import Iterable

from torch import nn

from ..loss_assembly import FEAT_CHOICES

logger = logging.getLogger(__name__)


def freeze_unreached(modules: Iterable[nn.Module], why: str) -> None:
    """Freeze (``requires_grad=False``) modules that no configured loss reaches.

    Their parameters would never get a gradient: DistributedDataParallel stops with
    "Expected to have finished reduction" on the second iteration when a parameter it
    manages gets none, and weight decay would shrink them for nothing. Frozen, they keep
    their initial values (a BNNeck then still normalises with its running statistics).
    """
    frozen = 0
    for module in modules:
        for p in module.parameters():
            if p.requires_grad:
                p.requires_grad_(False)
                frozen += 1
    if frozen:
        logger.info("Frozen %d parameter tensor(s) that no loss trains: %s.", frozen, why)


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


__all__ = ["freeze_unreached", "missing_targets_error", "neck_feat_from_cfg"]
