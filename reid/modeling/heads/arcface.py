"""ArcFace head: additive angular margin on the target class."""
from __future__ import annotations

import math

from torch import Tensor

from .base import CosineHead
from .functional import arcface_logits


class ArcFaceHead(CosineHead):
    """Target logit ``s cos(theta_y + m)``, others ``s cos theta_j`` (Deng et al., CVPR 2019).

    Defaults s = 64, m = 0.5 rad (the paper's setting). Never NaN, also for cosines of
    exactly +-1; see :func:`reid.modeling.heads.functional.arcface_target_cos` for the
    clamp and the fallback used when theta_y + m > pi.

    Args:
        easy_margin: apply the margin only where cos theta_y > 0.
    """

    DEFAULT_SCALE = 64.0
    DEFAULT_MARGIN = 0.5
    EXTRA_KWARGS = {"easy_margin": False}

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        scale: float = 64.0,
        margin: float = 0.5,
        easy_margin: bool = False,
    ) -> None:
        if not 0.0 <= float(margin) < math.pi:  # else the theta + m > pi fallback makes no sense
            raise ValueError(f"An angular margin must be in [0, pi) radians, got {float(margin)}.")
        super().__init__(in_features, num_classes, scale, margin)
        self.easy_margin = bool(easy_margin)

    def margin_logits(self, cos: Tensor, target_mask: Tensor) -> Tensor:
        return arcface_logits(cos, target_mask, self.scale, self.margin, self.easy_margin)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", easy_margin={self.easy_margin}"
