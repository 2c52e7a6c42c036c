"""Pairwise distances and similarities between two sets of features."""
from __future__ import annotations

from typing import Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

METRICS = ("euclidean", "cosine")


def _upcast(x: Tensor) -> Tensor:
    """Half/bfloat16 -> float32; float32/float64 unchanged."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def cosine_similarity_matrix(x: Tensor, y: Tensor) -> Tensor:
    """Cosines ``[N, M]`` between rows of x ``[N, D]`` and y ``[M, D]`` (L2-normalised first).

    At least float32 and outside autocast: a bf16 cosine has a step of 2^-8 near 1, which
    a loss scale of 80-256 turns into logit jumps of 0.3-1.
    """
    with torch.autocast(device_type=x.device.type, enabled=False):
        return F.normalize(_upcast(x), dim=1) @ F.normalize(_upcast(y), dim=1).t()


def pairwise_distance(x: Tensor, y: Tensor, metric: str = "euclidean") -> Tensor:
    """Distances ``[N, M]`` between rows of x and y, at least float32, outside autocast.

    * ``euclidean``: sqrt(|x|^2 + |y|^2 - 2 x.y), with the squared distance clamped at 1e-12
      before the square root: rounding can make it slightly negative, and the derivative of
      sqrt at 0 is infinite. (The expansion cancels badly in bf16, hence no autocast.)
    * ``cosine``: 1 - cos(x, y), in [0, 2].
    """
    metric = str(metric).lower()
    if metric == "euclidean":
        with torch.autocast(device_type=x.device.type, enabled=False):
            x, y = _upcast(x), _upcast(y)
            sq = x.pow(2).sum(1, keepdim=True) + y.pow(2).sum(1).unsqueeze(0) - 2.0 * (x @ y.t())
            return sq.clamp_min(1e-12).sqrt()
    if metric == "cosine":
        return 1.0 - cosine_similarity_matrix(x, y)
    raise ValueError(f"Unknown metric {metric!r}. Valid metrics: {', '.join(METRICS)}.")


def check_batch(name: str, values: Tensor, targets: Tensor, what: str = "features [B, D]") -> None:
    """A ValueError unless `values` is ``[B, ...]`` (2-d) with one label of `targets` ``[B]`` per row."""
    if values.dim() != 2 or targets.dim() != 1 or values.shape[0] != targets.shape[0]:
        raise ValueError(f"{name} expects {what} and targets [B], got {tuple(values.shape)} and "
                         f"{tuple(targets.shape)}.")


def label_masks(targets: Tensor) -> Tuple[Tensor, Tensor]:
    """``(positive, negative)`` boolean ``[B, B]`` masks; self-pairs are neither."""
    same = targets.unsqueeze(0) == targets.unsqueeze(1)
    eye = torch.eye(targets.shape[0], dtype=torch.bool, device=targets.device)
    return same & ~eye, ~same
