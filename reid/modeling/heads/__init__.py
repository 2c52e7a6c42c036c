"""Identity heads: features + targets -> logits for softmax cross-entropy.

Names: linear, normface, amsoftmax (alias cosface), arcface, circle, curricularface.
Learning without labels puts its memories (``reid.uda.cluster_memory``, ``reid.uda.camera_proxies``)
in the same place, through the model's ``set_identity_head``.
The formulas live in :mod:`reid.modeling.heads.functional`; docs/losses.md explains them.
"""
from .amsoftmax import AMSoftmaxHead
from .arcface import ArcFaceHead
from .base import CosineHead
from .build import (
    COSINE_HEADS,
    HEAD_DEFAULTS,
    HEAD_EXTRA_KWARGS,
    HEAD_REGISTRY,
    MARGIN_HEADS,
    build_head,
)
from .circle import CircleHead
from .curricular import CurricularFaceHead
from .linear import LinearHead
from .normface import NormFaceHead

__all__ = [
    "AMSoftmaxHead",
    "ArcFaceHead",
    "COSINE_HEADS",
    "CircleHead",
    "CosineHead",
    "CurricularFaceHead",
    "HEAD_DEFAULTS",
    "HEAD_EXTRA_KWARGS",
    "HEAD_REGISTRY",
    "LinearHead",
    "MARGIN_HEADS",
    "NormFaceHead",
    "build_head",
]
