"""Losses as functions of one within-class similarity s_p and one between-class s_n.

For gradient plots (Circle paper Fig. 2) and analysis: each function takes tensors
``s_p`` and ``s_n`` (broadcastable; one positive and one negative per element) and
returns the per-element loss, so autograd gives dL/ds_p and dL/ds_n. They run the very
code the heads and losses run (two-class logits through the head formulas, then the
same cross-entropy; the same hinge as the triplet loss), so a plot shows what training
optimises.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from reid.modeling.heads.functional import amsoftmax_logits, circle_logits

from .triplet import triplet_hinge


def _two_class_cosines(s_p: Tensor, s_n: Tensor) -> Tuple[Tensor, Tensor]:
    """Stack to cosines ``[..., 2]`` (class 0 = target) and the matching target mask."""
    s_p, s_n = torch.broadcast_tensors(s_p, s_n)
    cos = torch.stack([s_p, s_n], dim=-1)
    target_mask = torch.zeros_like(cos, dtype=torch.bool)
    target_mask[..., 0] = True
    return cos, target_mask


def _cross_entropy_target0(logits: Tensor) -> Tensor:
    """Per-element cross-entropy with class 0 as the target, for any leading shape."""
    return logits.logsumexp(-1) - logits[..., 0]


def circle_loss_sp_sn(s_p: Tensor, s_n: Tensor, gamma: float = 128.0, m: float = 0.25) -> Tensor:
    """Class-level Circle loss (Eq. 6, K = L = 1) through the Circle head's logits."""
    cos, mask = _two_class_cosines(s_p, s_n)
    return _cross_entropy_target0(circle_logits(cos, mask, gamma, m))


def amsoftmax_loss_sp_sn(s_p: Tensor, s_n: Tensor, scale: float = 64.0, m: float = 0.35) -> Tensor:
    """AM-Softmax (Eq. 2, one negative) through the AM-Softmax head's logits."""
    cos, mask = _two_class_cosines(s_p, s_n)
    return _cross_entropy_target0(amsoftmax_logits(cos, mask, scale, m))


def triplet_loss_sp_sn(s_p: Tensor, s_n: Tensor, margin: float = 0.3) -> Tensor:
    """Triplet hinge (Eq. 3) [s_n - s_p + m]_+, i.e. the triplet loss on d = 1 - s."""
    s_p, s_n = torch.broadcast_tensors(s_p, s_n)
    return triplet_hinge(1.0 - s_p, 1.0 - s_n, margin)
