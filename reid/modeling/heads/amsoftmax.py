"""AM-Softmax / CosFace head: additive cosine margin on the target class."""
from __future__ import annotations

from torch import Tensor

from .base import CosineHead
from .functional import amsoftmax_logits


class AMSoftmaxHead(CosineHead):
    """Target logit ``s (cos theta_y - m)``, others ``s cos theta_j``.

    AM-Softmax (Wang et al., SPL 2018) and CosFace (Wang et al., CVPR 2018) are the same
    loss. Defaults s = 64, m = 0.35: CosFace's published setting, and the one the Circle
    paper uses for its AM-Softmax re-ID baselines (AM-Softmax's own paper used s = 30).
    """

    DEFAULT_SCALE = 64.0
    DEFAULT_MARGIN = 0.35

    def margin_logits(self, cos: Tensor, target_mask: Tensor) -> Tensor:
        return amsoftmax_logits(cos, target_mask, self.scale, self.margin)
