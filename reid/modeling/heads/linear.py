"""Plain softmax head: a linear classifier, bias-free by default (the BoT baseline)."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .base import batch_cosine_stats, check_head_inputs, check_sizes


class LinearHead(nn.Module):
    """Logits ``features @ weight.T (+ bias)`` with no normalisation and no margin.

    No bias by default, because it follows a BNNeck whose shift is already learned (BoT, Luo
    et al. 2019); ``bias=True`` (``MODEL.HEADS.BIAS``) adds one, as torchreid's classifier
    has (its files then load with their classifier). The weights start from N(0, 0.001^2), BoT's classifier init: small logits give a
    near-uniform softmax at the start, so early gradients are not dominated by a few
    random large logits. ``scale`` and ``margin`` are None (the head has neither).
    ``last_stats`` reports the cosines anyway so logs are comparable across heads.
    """

    DEFAULT_SCALE = None
    DEFAULT_MARGIN = None
    # Plain logits have neither: build_head ignores a given scale/margin (with a warning).
    FIXED_PARAMS = ("scale", "margin")
    EXTRA_KWARGS: dict = {"bias": False}

    def __init__(self, in_features: int, num_classes: int, bias: bool = False) -> None:
        super().__init__()
        check_sizes(in_features, num_classes)
        self.in_features = int(in_features)
        self.num_classes = int(num_classes)
        self.scale = None
        self.margin = None
        self.weight = nn.Parameter(torch.empty(self.num_classes, self.in_features))
        nn.init.normal_(self.weight, std=0.001)
        self.bias = nn.Parameter(torch.zeros(self.num_classes)) if bias else None
        self.last_stats: dict = {}

    def forward(self, features: Tensor, targets: Optional[Tensor] = None) -> Tensor:
        """Linear logits ``[B, C]``; targets only feed ``last_stats`` (no margin)."""
        check_head_inputs(features, targets, self.in_features, self.num_classes)
        logits = F.linear(features, self.weight, self.bias)
        if targets is None:
            self.last_stats = {}
        else:
            with torch.no_grad():
                cos = F.linear(F.normalize(features.detach().float(), dim=1),
                               F.normalize(self.weight.detach().float(), dim=1))
                mask = F.one_hot(targets.long(), self.num_classes).bool()
                self.last_stats = batch_cosine_stats(cos, mask)
        return logits

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, num_classes={self.num_classes}, bias={self.bias is not None}"
