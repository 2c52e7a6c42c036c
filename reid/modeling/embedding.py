"""An optional embedding between global pooling and the neck (``MODEL.HEADS.FC_DIM``)."""
from __future__ import annotations

from typing import Tuple

from torch import nn


class FCEmbedding(nn.Sequential):
    """Linear -> BatchNorm1d -> ReLU: torchreid's OSNet ``fc`` block.

    torchreid's OSNet test feature is this block's output (so it is non-negative); its
    files name the layers ``fc.0`` (Linear) and ``fc.1`` (BatchNorm1d), ours are
    ``embedding.0`` / ``embedding.1``. The Linear starts from N(0, 0.01^2) with zero bias.
    """

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(nn.Linear(in_features, out_features), nn.BatchNorm1d(out_features), nn.ReLU())
        nn.init.normal_(self[0].weight, std=0.01)
        nn.init.zeros_(self[0].bias)


def build_embedding(fc_dim: int, in_features: int) -> Tuple[nn.Module, int]:
    """``(module, output width)``: an :class:`FCEmbedding` for ``fc_dim > 0``, else the identity."""
    fc_dim = int(fc_dim)
    if fc_dim < 0:
        raise ValueError(f"MODEL.HEADS.FC_DIM must be >= 0 (0 = no embedding), got {fc_dim}.")
    if fc_dim == 0:
        return nn.Identity(), int(in_features)
    return FCEmbedding(int(in_features), fc_dim), fc_dim


__all__ = ["FCEmbedding", "build_embedding"]
