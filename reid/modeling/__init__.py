"""Models: backbones, identity heads, losses, meta architectures and ``build_model``.

``reid.modeling.heads`` and ``reid.modeling.losses`` are imported by path. This package
never imports ``reid.data``, ``reid.engine`` or ``reid.evaluation`` (layering).
"""
from .build import build_model, model_summary
from .camera_input import camera_count, takes_camera_ids, unwrap_model

__all__ = ["build_model", "camera_count", "model_summary", "takes_camera_ids", "unwrap_model"]
