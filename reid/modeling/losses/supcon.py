"""Supervised contrastive loss between two sets of features (CLIP-ReID's first stage).

For anchors a_i with labels y_i and contrast features c_j with labels z_j (Khosla et al.,
NeurIPS 2020, Eq. 2, "L_out", with the contrast set given apart from the anchors; CLIP-ReID,
Li et al., AAAI 2023: its image-to-text L_i2t and text-to-image L_t2i, with s(V, T) = V . T):

    L = -(1 / B) sum_i (1 / |P(i)|) sum_{p in P(i)} log( exp(a_i . c_p / tau) / sum_j exp(a_i . c_j / tau) ),
    P(i) = {j : z_j = y_i}

Features are used as given (CLIP-ReID neither normalises them nor scales by a temperature
other than 1). Anchors without a positive are refused: their term would be 0 / 0.
"""
from __future__ import annotations

import torch
from torch import Tensor


def supervised_contrastive_loss(anchors: Tensor, contrast: Tensor, anchor_labels: Tensor, contrast_labels: Tensor,
                                temperature: float = 1.0) -> Tensor:
    """The loss above for ``anchors [B, D]`` against ``contrast [N, D]`` (float32 math)."""
    if anchors.dim() != 2 or contrast.dim() != 2 or anchors.shape[1] != contrast.shape[1]:
        raise ValueError(f"supervised_contrastive_loss expects [B, D] and [N, D] features, got "
                         f"{tuple(anchors.shape)} and {tuple(contrast.shape)}.")
    positive = (anchor_labels[:, None] == contrast_labels[None, :]).float()
    count = positive.sum(dim=1)
    if bool((count == 0).any()):
        raise ValueError("supervised_contrastive_loss: an anchor has no contrast feature of its label.")
    logits = anchors.float() @ contrast.float().t() / float(temperature)
    log_prob = logits - torch.logsumexp(logits, dim=1, keepdim=True)
    return -((positive * log_prob).sum(dim=1) / count).mean()


__all__ = ["supervised_contrastive_loss"]
