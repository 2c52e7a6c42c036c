"""Circle head: class-level Circle loss (Sun et al., CVPR 2020)."""
from __future__ import annotations

from torch import Tensor

from .base import CosineHead
from .functional import circle_logits


class CircleHead(CosineHead):
    """Circle logits: target ``gamma alpha_p (s_p - (1 - m))``, others ``gamma alpha_n (s_n - m)``.

    alpha_p = [1 + m - s_p]_+ and alpha_n = [s_n + m]_+ are constants in back-propagation.
    Cross-entropy over these logits is the paper's Eq. 6 with one positive per sample, and
    its decision boundary is the circle s_n^2 + (s_p - 1)^2 = 2 m^2 (Eq. 8). ``scale`` is
    the paper's gamma. Defaults gamma = 128, m = 0.25: the paper's re-ID setting (an
    earlier version of the paper gave gamma = 256).
    """

    DEFAULT_SCALE = 128.0
    DEFAULT_MARGIN = 0.25

    @property
    def gamma(self) -> float:
        """The paper's name for the scale."""
        return self.scale

    def margin_logits(self, cos: Tensor, target_mask: Tensor) -> Tensor:
        return circle_logits(cos, target_mask, self.scale, self.margin)
