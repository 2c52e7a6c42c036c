"""Cosine -> logit maps of the identity heads: the one place where each formula lives.

Every function takes ``cos``, the cosines between features and class weights (shape
``[..., C]``, values in [-1, 1]) and, when the margin depends on the target, a boolean
``target_mask`` of the same shape that is True at exactly one (the target) class per row.
It returns the logits that softmax cross-entropy takes. The heads, the pair-wise Circle
loss and the scalar ``(s_p, s_n)`` losses used for gradient plots all call these
functions, so no formula is typed twice.

Equation numbers refer to Sun et al., "Circle Loss: A Unified Perspective of Pair
Similarity Optimization", CVPR 2020, unless another paper is named.
"""
from __future__ import annotations

import math
from typing import Union

import torch
from torch import Tensor

# Cosines are clamped to [-1 + ARC_EPS, 1 - ARC_EPS] before sin(theta) = sqrt(1 - cos^2)
# is taken, so sin(theta) >= sqrt(2 ARC_EPS) and d sin / d cos = -cos / sin stays bounded
# (about 700) instead of reaching the infinite slope of sqrt at 0, whose product with a
# zero gradient elsewhere in the chain would be NaN.
ARC_EPS = 1e-6


def target_cosine(cos: Tensor, target_mask: Tensor) -> Tensor:
    """Each row's target cosine, shape ``[..., 1]`` (needs exactly one True per row).

    A masked sum rather than a gather so that it works for any leading shape and sends
    the gradient only to the target entry.
    """
    return (cos * target_mask.to(cos.dtype)).sum(dim=-1, keepdim=True)


def normface_logits(cos: Tensor, scale: float) -> Tensor:
    """NormFace (Wang et al., ACM MM 2017): scaled cosines, no margin.

    It is Circle paper Eq. 2 (AM-Softmax) with m = 0.
    """
    return scale * cos


def amsoftmax_logits(cos: Tensor, target_mask: Tensor, scale: float, margin: float) -> Tensor:
    """AM-Softmax (Wang et al., SPL 2018) = CosFace (Wang et al., CVPR 2018).

    Target logit ``s (cos - m)``, other logits ``s cos``; cross-entropy over these is Circle
    paper Eq. 2 (with gamma = s): log(1 + sum_j exp(s (s_n^j + m - s_p))).
    """
    return scale * (cos - margin * target_mask.to(cos.dtype))


def arcface_target_cos(cos: Tensor, margin: float, easy_margin: bool = False) -> Tensor:
    """``cos(theta + m)`` with theta = arccos(cos), computed without acos and never NaN.

    ArcFace (Deng et al., CVPR 2019) additive angular margin, via the expansion
    cos(theta + m) = cos(theta) cos(m) - sin(theta) sin(m).

    * Past theta + m > pi, cos(theta + m) would rise again, rewarding a worse angle. There
      the function switches to ``cos(theta) - m sin(m)`` (the margin's first-order effect
      at theta = pi - m), which keeps the target logit non-increasing in theta; at the
      switch point it steps down by cos(m) + m sin(m) - 1 (0.117 for m = 0.5).
    * ``easy_margin``: apply the margin only where cos(theta) > 0 (theta < pi/2) and keep
      plain cos(theta) elsewhere.
    """
    clamped = cos.clamp(-1.0 + ARC_EPS, 1.0 - ARC_EPS)
    sin = torch.sqrt(1.0 - clamped * clamped)
    shifted = clamped * math.cos(margin) - sin * math.sin(margin)
    if easy_margin:
        return torch.where(cos > 0, shifted, cos)
    threshold = math.cos(math.pi - margin)  # cos(theta) at theta = pi - m
    return torch.where(cos > threshold, shifted, cos - margin * math.sin(margin))


def arcface_logits(
    cos: Tensor, target_mask: Tensor, scale: float, margin: float, easy_margin: bool = False
) -> Tensor:
    """ArcFace logits: ``s cos(theta_y + m)`` for the target, ``s cos(theta_j)`` otherwise."""
    phi = arcface_target_cos(target_cosine(cos, target_mask), margin, easy_margin)
    return scale * torch.where(target_mask, phi, cos)


def circle_positive_logits(s_p: Tensor, gamma: float, margin: float) -> Tensor:
    """``gamma alpha_p (s_p - Delta_p)``: the positive term of Eq. 6, elementwise.

    alpha_p = [O_p - s_p]_+ (Eq. 5) with O_p = 1 + m and Delta_p = 1 - m. alpha_p is
    detached: the paper treats it as a constant in back-propagation, which is what makes
    the gradients those of Eq. 10 (and the loss's two terms meet on the circle of Eq. 8).
    """
    alpha_p = (1.0 + margin - s_p).clamp_min(0.0).detach()
    return gamma * alpha_p * (s_p - (1.0 - margin))


def circle_negative_logits(s_n: Tensor, gamma: float, margin: float) -> Tensor:
    """``gamma alpha_n (s_n - Delta_n)``: the negative term of Eq. 6, elementwise.

    alpha_n = [s_n - O_n]_+ (Eq. 5) with O_n = -m and Delta_n = m; detached like alpha_p,
    giving the gradients of Eq. 9.
    """
    alpha_n = (s_n + margin).clamp_min(0.0).detach()
    return gamma * alpha_n * (s_n - margin)


def circle_logits(cos: Tensor, target_mask: Tensor, gamma: float, margin: float) -> Tensor:
    """Class-level Circle logits: the target column is positive, every other column negative.

    With one positive per row, softmax cross-entropy over these logits is
    log(1 + sum_j exp(gamma alpha_n^j (s_n^j - Delta_n)) exp(-gamma alpha_p (s_p - Delta_p))),
    i.e. Eq. 6 with K = 1.
    """
    return torch.where(
        target_mask,
        circle_positive_logits(cos, gamma, margin),
        circle_negative_logits(cos, gamma, margin),
    )


def curricular_logits(
    cos: Tensor,
    target_mask: Tensor,
    scale: float,
    margin: float,
    t: Union[Tensor, float],
    easy_margin: bool = False,
) -> Tensor:
    """CurricularFace (Huang et al., CVPR 2020) logits for a given curriculum value ``t``.

    Positive: T(cos theta_y) = cos(theta_y + m), the ArcFace target (same safe fallback).
    Negatives: N(t, cos theta_j) = cos theta_j (t + cos theta_j) for hard negatives, those
    with cos theta_j > T(cos theta_y), and cos theta_j otherwise. Hardness is judged against
    the target logit actually used (after the fallback), so the rule stays consistent in the
    rare theta_y + m > pi regime. ``t`` is a constant here (the head keeps and updates it).
    """
    phi = arcface_target_cos(target_cosine(cos, target_mask), margin, easy_margin)
    hard = cos > phi
    negatives = torch.where(hard, cos * (t + cos), cos)
    return scale * torch.where(target_mask, phi, negatives)


__all__ = [
    "ARC_EPS",
    "amsoftmax_logits",
    "arcface_logits",
    "arcface_target_cos",
    "circle_logits",
    "circle_negative_logits",
    "circle_positive_logits",
    "curricular_logits",
    "normface_logits",
    "target_cosine",
]
