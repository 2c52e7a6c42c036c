"""Softmax cross-entropy over head logits, with optional label smoothing."""
from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from .distance import check_batch


def cross_entropy_loss(logits: Tensor, targets: Tensor, label_smooth: float = 0.0) -> Tensor:
    """Mean cross-entropy of ``logits [B, C]`` against integer ``targets [B]``.

    With label smoothing eps the target distribution is
    q_c = (1 - eps) [c = y] + eps / C (eps/C on every class, the true one included), so

        loss = -(1 - eps) log p_y - (eps / C) sum_c log p_c.

    eps = 0 is plain cross-entropy. Keep it 0 for margin heads: smoothing rewards raising
    every non-target logit, which works against the margin (for Circle it changes Eq. 6).
    Computed in float32 even when the logits are bf16/fp16.
    """
    eps = float(label_smooth)
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"label_smooth must be in [0, 1), got {label_smooth}.")
    check_batch("cross_entropy_loss", logits, targets, "logits [B, C]")
    # PyTorch's label_smoothing uses the same q_c = (1 - eps) [c = y] + eps / C.
    return F.cross_entropy(logits.float(), targets.long(), label_smoothing=eps)
