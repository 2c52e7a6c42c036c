"""What every identity head shares: the class weights, input checks, cosines and stats.

A head maps features ``[B, D]`` and integer targets ``[B]`` to the logits ``[B, C]`` that
softmax cross-entropy takes, with any margin already applied to the target class. After a
forward with targets, ``head.last_stats`` holds ``{"s_p", "s_n"}``: detached batch means of
the target cosine and of the non-target cosines (for logging).

Without targets (``head(features)``) a head returns margin-free logits (``s cos`` for the
cosine heads, the plain linear logits for the linear head), usable to classify training
identities at inference; ``last_stats`` is then empty because s_p needs a target.
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def check_head_inputs(
    features: Tensor, targets: Optional[Tensor], in_features: int, num_classes: int
) -> None:
    """Raise a ValueError naming the bad shape, dtype or label."""
    if features.dim() != 2 or features.shape[1] != in_features:
        raise ValueError(
            f"Head expects features of shape [B, {in_features}], got {tuple(features.shape)}."
        )
    if targets is None:
        return
    if targets.dim() != 1 or targets.shape[0] != features.shape[0]:
        raise ValueError(
            f"Head expects targets of shape [{features.shape[0]}] (one label per feature), "
            f"got {tuple(targets.shape)}."
        )
    if targets.dtype.is_floating_point or targets.dtype == torch.bool or targets.is_complex():
        raise ValueError(
            f"Head targets must be an integer tensor (int64), got dtype {targets.dtype}."
        )
    # Range check on CPU only: on CUDA it would force a host-device sync every step, and
    # an out-of-range label fails in one_hot there anyway.
    if targets.device.type == "cpu" and targets.numel() > 0:
        lo, hi = int(targets.min()), int(targets.max())
        if lo < 0 or hi >= num_classes:
            raise ValueError(
                f"Head targets must lie in [0, {num_classes - 1}] (num_classes={num_classes}), "
                f"got labels from {lo} to {hi}."
            )


def batch_cosine_stats(cos: Tensor, target_mask: Tensor) -> Dict[str, Tensor]:
    """Detached means of the target cosines (``s_p``) and of all other cosines (``s_n``).

    Sums with the mask instead of boolean indexing, which would sync with the GPU.
    """
    with torch.no_grad():
        cos = cos.detach().float()
        mask = target_mask.to(cos.dtype)
        rows, cols = cos.shape
        pos_sum = (cos * mask).sum()
        s_p = pos_sum / rows
        s_n = (cos.sum() - pos_sum) / (rows * (cols - 1))
    return {"s_p": s_p, "s_n": s_n}


def check_sizes(in_features: int, num_classes: int) -> None:
    """Reject sizes a head cannot work with, naming the value."""
    if int(in_features) < 1:
        raise ValueError(f"in_features must be >= 1, got {in_features}.")
    if int(num_classes) < 2:
        raise ValueError(
            f"num_classes must be >= 2 (cross-entropy over a single class is always 0), "
            f"got {num_classes}."
        )


class CosineHead(nn.Module):
    """Base of the heads whose logits are functions of cos(feature, class weight).

    Subclasses implement :meth:`margin_logits`. The cosines are computed in float32 even
    under autocast: a bf16 cosine near 1 has a step of 2^-8, which times a scale of 64-128
    moves a logit by 0.25-0.5, as much as the margins themselves.

    Args:
        in_features: feature width D.
        num_classes: number of identities C (>= 2).
        scale: logit scale s (gamma for Circle), > 0; None: the head's ``DEFAULT_SCALE``.
        margin: margin m, >= 0; None: the head's ``DEFAULT_MARGIN``.
    """

    DEFAULT_SCALE: Optional[float] = None
    DEFAULT_MARGIN: Optional[float] = None
    # Extra constructor keywords this head accepts (name -> default), used by build_head.
    EXTRA_KWARGS: Dict[str, object] = {}

    def __init__(self, in_features: int, num_classes: int, scale: Optional[float] = None,
                 margin: Optional[float] = None) -> None:
        super().__init__()
        check_sizes(in_features, num_classes)
        self.in_features = int(in_features)
        self.num_classes = int(num_classes)
        self.scale = float(self.DEFAULT_SCALE if scale is None else scale)
        self.margin = float(self.DEFAULT_MARGIN if margin is None else margin)
        # Only directions matter after normalisation; a small normal draw gives random,
        # roughly orthogonal class directions.
        self.weight = nn.Parameter(torch.empty(self.num_classes, self.in_features))
        nn.init.normal_(self.weight, std=0.01)
        self.last_stats: Dict[str, Tensor] = {}

    def cosine(self, features: Tensor) -> Tensor:
        """Cosines ``[B, C]`` between features and class weights, float32, in [-1, 1]."""
        with torch.autocast(device_type=features.device.type, enabled=False):
            f = F.normalize(features.float(), dim=1)
            w = F.normalize(self.weight.float(), dim=1)
            # Rounding can push |cos| a hair past 1, outside acos/sqrt's domain.
            return F.linear(f, w).clamp(-1.0, 1.0)

    def margin_logits(self, cos: Tensor, target_mask: Tensor) -> Tensor:
        """Logits from cosines and a one-hot boolean target mask (subclass hook)."""
        raise NotImplementedError

    def logits_from_cosine(self, cos: Tensor, targets: Optional[Tensor] = None) -> Tensor:
        """Margin logits for given cosines ``[B, C]``; sets ``last_stats``.

        Split from :meth:`forward` so tests can differentiate the loss w.r.t. the cosines.
        """
        if targets is None:
            self.last_stats = {}
            return self.scale * cos
        target_mask = F.one_hot(targets.long(), self.num_classes).bool()
        self.last_stats = batch_cosine_stats(cos, target_mask)
        return self.margin_logits(cos, target_mask)

    def forward(self, features: Tensor, targets: Optional[Tensor] = None) -> Tensor:
        """Logits ``[B, C]`` for cross-entropy; margin-free ``s cos`` when targets is None."""
        check_head_inputs(features, targets, self.in_features, self.num_classes)
        return self.logits_from_cosine(self.cosine(features), targets)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, num_classes={self.num_classes}, "
            f"scale={self.scale}, margin={self.margin}"
        )
