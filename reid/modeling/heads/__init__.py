"""Identity heads: features + targets -> logits for softmax cross-entropy.

Names: linear, normface, amsoftmax (alias cosface), arcface, circle, curricularface.
Learning without labels uses :class:`ClusterMemory` (a non-learned memory of cluster
centroids, installed with the model's ``set_identity_head``) in the same place, or
:class:`CameraProxyMemory` (one proxy per cluster and camera, with its own ``loss``).
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
from .camera_proxies import CameraProxyMemory
from .cluster_memory import ClusterMemory
from .curricular import CurricularFaceHead
from .linear import LinearHead
from .normface import NormFaceHead

__all__ = [
    "AMSoftmaxHead",
    "ArcFaceHead",
    "COSINE_HEADS",
    "CameraProxyMemory",
    "CircleHead",
    "ClusterMemory",
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
