"""The log(1 + sum exp) form shared by the unified loss (Eq. 1) and the Circle loss (Eq. 6)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor


def masked_logsumexp(x: Tensor, mask: Optional[Tensor] = None, dim: int = -1) -> Tensor:
    """log(sum over True entries of exp(x)) along ``dim``; -inf for rows with no True entry.

    Empty rows are handled without NaN gradients: they take the log-sum-exp of zeros,
    which is then replaced by -inf.
    """
    if mask is None:
        return x.logsumexp(dim)
    has_any = mask.any(dim, keepdim=True)
    filled = x.masked_fill(~mask, float("-inf"))
    filled = torch.where(has_any, filled, torch.zeros_like(filled))
    lse = filled.logsumexp(dim, keepdim=True)
    lse = torch.where(has_any, lse, torch.full_like(lse, float("-inf")))
    return lse.squeeze(dim)


def softplus_pair_loss(
    pos_logits: Tensor,
    neg_logits: Tensor,
    pos_mask: Optional[Tensor] = None,
    neg_mask: Optional[Tensor] = None,
) -> Tensor:
    """``log(1 + sum_j exp(neg_j) * sum_i exp(-pos_i))`` over the last dim, per row.

    = softplus(logsumexp(neg) + logsumexp(-pos)), stable for any logit size. The masks
    select which entries count; a row with no positive or no negative gives 0.
    Eq. 1 uses pos = gamma s_p, neg = gamma (s_n + m); Eq. 6 uses the Circle logits.
    """
    neg = masked_logsumexp(neg_logits, neg_mask)
    pos = masked_logsumexp(-pos_logits, pos_mask)
    return F.softplus(neg + pos)


def unified_loss(
    s_p: Tensor,
    s_n: Tensor,
    gamma: float,
    margin: float,
    pos_mask: Optional[Tensor] = None,
    neg_mask: Optional[Tensor] = None,
) -> Tensor:
    """Eq. 1: ``log(1 + sum_i sum_j exp(gamma (s_n^j - s_p^i + m)))`` per row.

    ``s_p [..., K]`` within-class and ``s_n [..., L]`` between-class similarities. With one
    positive (class-level labels) it is AM-Softmax (Eq. 2); with m = 0, NormFace; and
    (1/gamma) of it tends to the hard-mined triplet [max s_n - min s_p + m]_+ (Eq. 3) as
    gamma grows. Used for analysis and tests.
    """
    return softplus_pair_loss(gamma * s_p, gamma * (s_n + margin), pos_mask, neg_mask)
