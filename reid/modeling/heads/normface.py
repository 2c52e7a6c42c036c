"""NormFace head: softmax over scaled cosines, no margin."""
from __future__ import annotations

from torch import Tensor

from .base import CosineHead
from .functional import normface_logits


class NormFaceHead(CosineHead):
    """``s cos(theta_j)`` for every class (Wang et al., ACM MM 2017).

    NormFace learns or bounds the scale; here it is fixed at s = 64, CosFace's/ArcFace's
    published scale, so that ``normface`` is exactly ``amsoftmax`` with m = 0 (an ablation
    of the margin alone). The margin is fixed at 0.
    """

    DEFAULT_SCALE = 64.0
    DEFAULT_MARGIN = 0.0
    # Its margin is fixed at 0: build_head ignores a given margin (with a warning).
    FIXED_PARAMS = ("margin",)

    def __init__(
        self, in_features: int, num_classes: int, scale: float = 64.0, margin: float = 0.0
    ) -> None:
        if margin != 0:
            raise ValueError(
                f"The normface head has no margin, got margin={margin}; use -1/None (or 0), "
                "or pick 'amsoftmax', 'arcface' or 'circle' for a margin."
            )
        super().__init__(in_features, num_classes, scale, 0.0)

    def margin_logits(self, cos: Tensor, target_mask: Tensor) -> Tensor:
        return normface_logits(cos, self.scale)
