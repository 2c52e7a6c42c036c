"""CurricularFace head: ArcFace positive, hard negatives re-weighted by a learned curriculum."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor

from .arcface import ArcFaceHead
from .functional import curricular_logits, target_cosine


class CurricularFaceHead(ArcFaceHead):
    """CurricularFace (Huang et al., CVPR 2020).

    Target logit ``s cos(theta_y + m)`` (ArcFace, same safe fallback); a negative j with
    cos theta_j > cos(theta_y + m) (a "hard" one) gets ``s cos theta_j (t + cos theta_j)``,
    the others ``s cos theta_j``. Early in training t is near 0, which shrinks hard
    negatives' logits (easy samples dominate); as the positive cosines grow, t grows and
    hard negatives weigh more.

    ``t`` is a buffer (saved in ``state_dict`` and checkpoints), starting at 0. In training
    mode, each forward with targets first sets
    ``t = momentum * t + (1 - momentum) * mean(cos theta_y)`` (batch mean, no gradient),
    then uses the new t, as in the paper's algorithm. The 0.99 weighs the old value, so t
    is a slow moving average (the authors' released training does the same; the formula as
    printed in the paper reads as if alpha weighed the batch mean). Eval mode never changes t.
    In a multi-process run the batch mean is averaged over the processes (an all-reduce), so
    every rank holds the same t, the EMA of the global batch's mean as on one GPU.

    Defaults s = 64, m = 0.5 (ArcFace's), momentum = 0.99.
    """

    EXTRA_KWARGS = {"easy_margin": False, "momentum": 0.99}

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        scale: float = 64.0,
        margin: float = 0.5,
        easy_margin: bool = False,
        momentum: float = 0.99,
    ) -> None:
        super().__init__(in_features, num_classes, scale, margin, easy_margin)
        if not 0.0 <= float(momentum) <= 1.0:
            raise ValueError(f"CurricularFace momentum must be in [0, 1], got {momentum}.")
        self.momentum = float(momentum)
        self.register_buffer("t", torch.zeros(()))

    def margin_logits(self, cos: Tensor, target_mask: Tensor) -> Tensor:
        if self.training:
            with torch.no_grad():
                batch_mean = target_cosine(cos.detach(), target_mask).mean()
                if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                    # Training forwards run in lockstep on every rank, so this collective is safe.
                    dist.all_reduce(batch_mean, op=dist.ReduceOp.SUM)
                    batch_mean = batch_mean / dist.get_world_size()
                self.t.mul_(self.momentum).add_((1.0 - self.momentum) * batch_mean.to(self.t.dtype))
        # A copy, so that a later in-place update of the buffer (next step, or DDP's buffer
        # broadcast) can never touch a value this step's graph holds.
        t = self.t.detach().clone().to(cos.dtype)
        return curricular_logits(cos, target_mask, self.scale, self.margin, t, self.easy_margin)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", momentum={self.momentum}"
