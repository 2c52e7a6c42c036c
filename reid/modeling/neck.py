"""Necks between the pooled feature and the identity head (``MODEL.HEADS.NECK``)."""
from __future__ import annotations

from torch import nn

NECK_NAMES = ("bnneck", "none")


class BNNeck(nn.BatchNorm1d):
    """BatchNorm1d whose bias (shift) is fixed at zero and never trained.

    Luo et al. (BoT, 2019): a trainable shift moves features away from the origin, which
    hurts the cosine geometry the identity heads and the test distance rely on; scaling
    alone keeps the classifier's and the metric losses' features compatible.
    """

    def __init__(self, num_features: int) -> None:
        super().__init__(num_features)  # weight 1, bias 0
        self.bias.requires_grad_(False)


def build_neck(name: str, num_features: int) -> nn.Module:
    """``"bnneck"`` -> :class:`BNNeck`, ``"none"`` -> identity; other names raise ValueError."""
    key = str(name).lower()
    if key == "bnneck":
        return BNNeck(num_features)
    if key == "none":
        return nn.Identity()
    raise ValueError(f"Unknown MODEL.HEADS.NECK {name!r}. Valid names: {', '.join(NECK_NAMES)}.")


__all__ = ["BNNeck", "NECK_NAMES", "build_neck"]
