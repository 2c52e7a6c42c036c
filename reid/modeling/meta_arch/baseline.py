"""Baseline: one global feature (BoT-style) with a BNNeck and an identity head."""
from __future__ import annotations

from typing import Dict, Optional, Union

import torch
from torch import nn

from ..backbones import build_backbone
from ..embedding import build_embedding
from ..neck import build_neck
from ..pooling import build_pooling
from ..temporal import build_temporal
from .common import ReIDModel, freeze_unreached, missing_targets_error


class Baseline(ReIDModel):
    """pixels -> backbone -> pooling -> [fc embedding] -> neck -> identity head.

    Train mode: ``model(images, targets)`` -> ``{"loss_id", "loss_triplet", ...}`` per
    ``MODEL.LOSSES``; ``last_stats`` then holds the head's mean ``s_p`` / ``s_n``.
    Eval mode: ``model(images)`` -> ``[B, feature_dim]``, the feature after the neck
    (``MODEL.HEADS.NECK_FEAT`` "after") or the pooled one before it ("before").
    Images are raw RGB pixels (uint8 or float, 0-255) ``[B, 3, H, W]``. A backbone with SIE
    (``uses_camids``) also takes the camera ids ``camids`` ``[B]``.

    Clips ``[B, T, 3, H, W]`` (video re-ID: T frames of a tracklet) give one feature each: every
    frame's feature before the neck, pooled over the frames by ``temporal`` (``MODEL.VIDEO.TEMPORAL``,
    reid/modeling/temporal.py; ``frame_mask [B, T]`` marks the real frames of padded clips), then
    the neck and the head, as an image's feature.
    """

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        heads_cfg = cfg.MODEL.HEADS
        self.backbone = build_backbone(cfg)
        self.pool = build_pooling(heads_cfg.POOLING, gem_p=float(heads_cfg.GEM_P))
        self.embedding, self.feature_dim = build_embedding(heads_cfg.FC_DIM, self.backbone.out_channels)
        self.neck = build_neck(heads_cfg.NECK, self.feature_dim)
        if not self.loss_assembly.uses_after_features:
            freeze_unreached([self.neck], "the neck (every loss uses the features before it)")
        heads = self.identity_heads(cfg, [self.feature_dim])
        self.head: Optional[nn.Module] = heads[0] if heads else None
        self.temporal = build_temporal(str(cfg.MODEL.VIDEO.TEMPORAL), self.feature_dim)

    def set_identity_head(self, head: nn.Module) -> None:
        """Train with `head` as the identity head from now on (learning without labels puts its
        cluster memory here; the optimizer is not told, so `head` should have no parameters)."""
        self.head = head

    def frame_features(self, images: torch.Tensor, camids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Each image's feature before the neck ``[N, D]`` (what the temporal pooling pools): video
        extraction runs long tracklets through it a batch of frames at a time."""
        x = self.preprocess(images)
        fmap = self.backbone(x, camids) if self.uses_camids else self.backbone(x)
        return self.embedding(self.pool(fmap))

    def embed_pooled(self, before: torch.Tensor) -> torch.Tensor:
        """The eval-mode feature of pooled features ``before`` ``[B, D]``: after the neck, or
        ``before`` itself (``MODEL.HEADS.NECK_FEAT``)."""
        return self.neck(before) if self.neck_feat == "after" else before

    def forward(
        self, images: torch.Tensor, targets: Optional[torch.Tensor] = None, camids: Optional[torch.Tensor] = None,
        frame_mask: Optional[torch.Tensor] = None,
    ) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        clips = images.dim() == 5
        if clips:  # every frame through the backbone at once; a clip's camera is each of its frames'
            num, frames = images.shape[:2]
            images = images.flatten(0, 1)
            camids = camids.repeat_interleave(frames) if camids is not None else None
        before = self.frame_features(images, camids)
        if clips:
            before = self.temporal(before.view(num, frames, -1), frame_mask)
        if not self.training:
            return self.embed_pooled(before)
        after = self.neck(before)
        if targets is None:
            raise missing_targets_error()
        heads = [self.head] if self.head is not None else []
        losses, self.last_stats = self.loss_assembly(
            targets, heads, [after], {"before": [before], "after": [after]}
        )
        return losses


__all__ = ["Baseline"]
