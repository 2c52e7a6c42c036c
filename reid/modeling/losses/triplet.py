"""Batch-hard triplet loss (Hermans et al. 2017), Circle paper Eq. 3 in distance form."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .distance import check_batch, label_masks, pairwise_distance


def triplet_hinge(d_ap: Tensor, d_an: Tensor, margin: float, soft_margin: bool = False) -> Tensor:
    """Per-triplet loss ``[d_ap - d_an + margin]_+``, or ``softplus(d_ap - d_an)`` (soft margin).

    With similarities (d = 1 - s) this is Eq. 3: [s_n - s_p + m]_+.
    """
    if soft_margin:
        return F.softplus(d_ap - d_an)
    return (d_ap - d_an + margin).clamp_min(0.0)


def triplet_loss(
    features: Tensor,
    targets: Tensor,
    margin: float = 0.3,
    soft_margin: bool = False,
    metric: str = "euclidean",
) -> Tensor:
    """Batch-hard triplet loss, mean over anchors.

    For each anchor: the farthest positive (same label, not itself) and the closest
    negative; loss ``[d_ap - d_an + margin]_+`` or ``softplus(d_ap - d_an)`` when
    ``soft_margin`` (margin then unused). Anchors without a positive or without a negative
    in the batch are left out of the mean; with no valid anchor the loss is 0 (still
    attached to the graph so backward works). Computed in float32.

    Args:
        features: ``[B, D]`` (not normalised for euclidean, as in BoT).
        targets: ``[B]`` integer labels.
        margin: hinge margin (>= 0).
        soft_margin: use the soft-margin form.
        metric: "euclidean" or "cosine" (1 - cos).
    """
    check_batch("triplet_loss", features, targets)
    if margin < 0:
        raise ValueError(f"triplet margin must be >= 0, got {margin}.")
    features = features.float()
    dist = pairwise_distance(features, features, metric)
    pos, neg = label_masks(targets)
    valid = (pos.any(1) & neg.any(1)).to(dist.dtype)
    # Rows without a positive (negative) get d_ap = -inf (d_an = +inf): their hinge and
    # softplus are exactly 0 with zero gradient, and the mask drops them from the mean.
    # Masking instead of boolean indexing keeps this free of GPU syncs.
    d_ap = dist.masked_fill(~pos, float("-inf")).amax(1)
    d_an = dist.masked_fill(~neg, float("inf")).amin(1)
    per_anchor = triplet_hinge(d_ap, d_an, margin, soft_margin)
    return (per_anchor * valid).sum() / valid.sum().clamp_min(1.0)
