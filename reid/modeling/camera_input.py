"""Whether a model takes camera ids beside the images, and how many cameras it knows: asked here only.

A model with a camera embedding (SIE: TransReID's Side Information Embedding, CLIP-ReID's) says so
with the attributes ``uses_camids`` (bool) and ``num_cameras`` (ids ``0..num_cameras-1``); its
``forward`` then takes ``camids=``. Training steps, feature extraction, exports, runtimes and
the command-line tools ask :func:`takes_camera_ids` and :func:`camera_count` rather than the
attributes, so the wrappers a model may be in (DistributedDataParallel, DataParallel,
``torch.compile``) answer as the model does.

Exported files (``reid.export.exported.ExportedModel``) are no ``nn.Module``: they answer
with their own ``needs_camids`` and ``num_cameras`` (read from the file), in the inference layer.
"""
from __future__ import annotations

from torch import nn


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside its wrappers: DistributedDataParallel's and DataParallel's ``module``,
    ``torch.compile``'s ``_orig_mod``; `model` itself when it is in none."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model


def takes_camera_ids(model: nn.Module) -> bool:
    """Whether `model` (or the model in its wrappers) computes features from the images and their
    camera ids (``model(images, camids=...)``): its ``uses_camids``, False when it has none."""
    return bool(getattr(unwrap_model(model), "uses_camids", False))


def camera_count(model: nn.Module) -> int:
    """How many camera ids `model` takes (ids ``0..n-1``), 0 when its features come from the images
    alone. A ValueError when it takes camera ids but does not say how many (``num_cameras``):
    such a model cannot be exported or have its ids checked."""
    inner = unwrap_model(model)
    if not takes_camera_ids(inner):
        return 0
    cameras = int(getattr(inner, "num_cameras", 0))
    if cameras < 1:
        raise ValueError(f"{type(inner).__name__} uses camera ids but does not say how many (num_cameras); "
                         "it cannot be exported or checked.")
    return cameras


__all__ = ["camera_count", "takes_camera_ids", "unwrap_model"]
