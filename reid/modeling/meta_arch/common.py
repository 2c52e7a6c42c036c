"""What the meta architectures share: their base class and small checks."""
from __future__ import annotations

import logging
from typing import Dict, Iterable, List, Sequence

import torch
from torch import nn

from ..camera_input import camera_count, takes_camera_ids
from ..loss_assembly import LossAssembly, check_feat
from .identity_head import build_identity_head
from .preprocess import PixelNormalizer

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
    return check_feat("MODEL.HEADS.NECK_FEAT", cfg.MODEL.HEADS.NECK_FEAT)


def missing_targets_error() -> ValueError:
    """The error for a train-mode forward without labels."""
    return ValueError(
        "The model is in train mode and needs targets: call model(images, targets), "
        "or call model.eval() to extract features with model(images)."
    )


class ReIDModel(nn.Module):
    """Base of the meta architectures: pixel normalisation (``preprocess``), the configured losses
    (``loss_assembly``, ``neck_feat``, ``last_stats``) and the camera ids of a ``backbone`` with SIE."""

    def __init__(self, cfg) -> None:
        super().__init__()
        self.preprocess = PixelNormalizer(cfg.MODEL.PIXEL_MEAN, cfg.MODEL.PIXEL_STD)
        self.backbone_name = str(cfg.MODEL.BACKBONE.NAME).lower()
        self.neck_feat = neck_feat_from_cfg(cfg)
        self.loss_assembly = LossAssembly.from_cfg(cfg)
        self.last_stats: Dict[str, torch.Tensor] = {}

    @property
    def uses_camids(self) -> bool:
        """Whether the model needs camera ids (a ViT with SIE)."""
        return takes_camera_ids(getattr(self, "backbone", None))

    @property
    def num_cameras(self) -> int:
        """How many camera ids the model knows (ids 0..num_cameras-1; 0 without SIE)."""
        return camera_count(getattr(self, "backbone", None))

    def identity_heads(self, cfg, widths: Sequence[int]) -> List[nn.Module]:
        """One identity head per feature width (their settings logged once). None without the identity
        loss or classes: a head would hold unused parameters (which also breaks DistributedDataParallel)."""
        if not self.loss_assembly.uses_identity:
            return []
        heads = [build_identity_head(cfg, width, log=i == 0) for i, width in enumerate(widths)]
        return [h for h in heads if h is not None]


__all__ = ["ReIDModel", "freeze_unreached", "missing_targets_error", "neck_feat_from_cfg"]
