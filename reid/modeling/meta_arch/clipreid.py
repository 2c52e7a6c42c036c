"""CLIP-ReID's image model (Li et al., AAAI 2023, Sec. 3.3): a CLIP image encoder and two
features, each with its own BNNeck and identity head.

* The encoder (``clip_vit_b16``, ``clip_rn50``: reid.modeling.backbones.clip) gives, per image,
  a feature ``f`` (ViT: the class token after ``ln_post``, 768 wide; RN50: the last stage
  average-pooled, 2048 wide), its projection into CLIP's joint space ``f_proj`` (512 / 1024; RN50:
  the attention pooling) and an earlier feature ``f_last`` (ViT: the class token before the last
  block; RN50: the third stage average-pooled).
* ``neck`` / ``neck_proj`` (CLIP-ReID's ``bottleneck`` / ``bottleneck_proj``) are BNNecks on
  ``f`` and ``f_proj``; ``head`` / ``proj_head`` (its ``classifier`` / ``classifier_proj``)
  classify the features after them.
* Test feature: ``[f, f_proj]`` concatenated (``MODEL.HEADS.NECK_FEAT before``, CLIP-ReID's
  ``TEST.NECK_FEAT 'before'``), or the two after their necks (``after``): 1280 wide for ViT-B/16,
  3072 for RN50.
* Training losses (``MODEL.LOSSES``): the identity loss over both heads, triplet / pair-wise
  Circle over ``[f_last, f, f_proj]`` ("before") or the two features after the necks ("after").
  Each is the mean over its terms (CLIP-ReID sums them: its ID weight 0.25 over two heads is
  0.5 here, its triplet weight 1 over three features is 3; configs/*/clipreid_*.yml say so).
* Two stages (``MODEL.CLIPREID.PROMPT_LEARNING``): ``text_head`` holds every identity's text
  feature, learned by the first stage (reid.modeling.meta_arch.clipreid_prompts; run by
  tools/train.py before this model trains), and ``loss_i2t`` is the cross entropy of
  ``f_proj @ text.T`` (label smoothing as the identity loss's), weight ``I2T_WEIGHT``.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..backbones import build_backbone
from ..backbones.clip import CLIP_SPECS, ClipResNet, ClipViT
from ..clip_text import TextHead
from ..losses import cross_entropy_loss
from ..neck import build_neck
from .common import ReIDModel, freeze_unreached, missing_targets_error


class ClipReID(ReIDModel):
    """``model(images, targets, camids)`` in training, ``model(images, camids=...)`` (``camids``
    only with SIE) in eval mode -> ``[B, D + D_proj]`` (see the module docstring)."""

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.backbone = build_backbone(cfg)
        if not isinstance(self.backbone, (ClipViT, ClipResNet)):
            raise ValueError(f"MODEL.META_ARCHITECTURE clipreid needs a CLIP backbone ({', '.join(CLIP_SPECS)}), "
                             f"not {cfg.MODEL.BACKBONE.NAME!r}: set MODEL.BACKBONE.NAME to one of them.")
        dim, proj_dim = self.backbone.out_channels, self.backbone.proj_dim
        self.feature_dim = dim + proj_dim
        self.neck = build_neck(cfg.MODEL.HEADS.NECK, dim)
        self.neck_proj = build_neck(cfg.MODEL.HEADS.NECK, proj_dim)
        if not self.loss_assembly.uses_after_features:
            freeze_unreached([self.neck, self.neck_proj], "the necks (every loss uses the features before them)")
        heads = self.identity_heads(cfg, [dim, proj_dim])
        self.head, self.proj_head = heads if heads else (None, None)
        num_classes = int(cfg.MODEL.HEADS.NUM_CLASSES)
        # Without identities (testing, feature extraction) there is nothing to hold text features of.
        two_stage = bool(cfg.MODEL.CLIPREID.PROMPT_LEARNING) and num_classes > 0
        self.text_head = TextHead(num_classes, proj_dim) if two_stage else None
        self.i2t_weight = float(cfg.MODEL.CLIPREID.I2T_WEIGHT)

    def branch_features(self, images: torch.Tensor,
                        camids: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(f_last, f, f_proj)`` before the necks (see the module docstring)."""
        x = self.preprocess(images)
        if isinstance(self.backbone, ClipViT):
            return self.backbone.features(x, camids)
        x3, x4, proj = self.backbone.features(x)
        return F.adaptive_avg_pool2d(x3, 1).flatten(1), F.adaptive_avg_pool2d(x4, 1).flatten(1), proj

    def prompt_features(self, images: torch.Tensor) -> torch.Tensor:
        """The projection ``f_proj`` without SIE: what CLIP-ReID's first stage contrasts with text."""
        x = self.preprocess(images)
        if isinstance(self.backbone, ClipViT):
            return self.backbone.features(x, sie=False)[2]
        return self.backbone.features(x)[2]

    def forward(self, images: torch.Tensor, targets: Optional[torch.Tensor] = None,
                camids: Optional[torch.Tensor] = None) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        last, feat, proj = self.branch_features(images, camids)
        after, after_proj = self.neck(feat), self.neck_proj(proj)
        if not self.training:
            return torch.cat([after, after_proj] if self.neck_feat == "after" else [feat, proj], dim=1)
        if targets is None:
            raise missing_targets_error()
        heads: List[nn.Module] = [h for h in (self.head, self.proj_head) if h is not None]
        losses, self.last_stats = self.loss_assembly(
            targets, heads, [after, after_proj][:len(heads)],
            {"before": [last, feat, proj], "after": [after, after_proj]})
        if self.text_head is not None:
            i2t = cross_entropy_loss(self.text_head(proj), targets, label_smooth=self.loss_assembly.label_smooth)
            losses = {**losses, "loss_i2t": self.i2t_weight * i2t}
        return losses


__all__ = ["ClipReID"]
