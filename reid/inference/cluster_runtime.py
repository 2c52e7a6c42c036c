"""ONNX Runtime for the clustering's feature pass (UDA.EXTRACT_RUNTIME onnxruntime / auto).

:func:`cluster_runtimes` is what reid.training hands to :mod:`reid.uda.extract_runtime` (which sits
below the export layer and cannot import it): each call of :func:`onnxruntime_runner` exports the
model's current weights as ``tools/export.py`` does (:func:`reid.inference.backends.build_runtime`:
``reid.export.writer.export_onnx`` into a temporary folder, removed once the session is open) and
opens the file in ONNX Runtime on the CPU. The model itself is not changed: the export takes the
eval-mode graph of a copy, with the ``neck_feat`` the caller set.
"""
from __future__ import annotations

from typing import Dict, Tuple

from torch import nn

from reid.export.files import ONNX_EXTRA_HINT
from reid.uda.extract_runtime import ExtractRuntime, Runner

from .backend_choice import ONNX_PACKAGES
from .backends import build_runtime


def onnxruntime_runner(model: nn.Module, input_size: Tuple[int, int]) -> Runner:
    """`model` (its current weights) exported to ONNX now and opened in ONNX Runtime on the CPU:
    ``runner(uint8 pixels [B, 3, H, W], camids or None) -> L2-normalised features [B, D]``."""
    return build_runtime("onnxruntime", model, (int(input_size[0]), int(input_size[1])))


def cluster_runtimes() -> Dict[str, ExtractRuntime]:
    """The runtimes UDA.EXTRACT_RUNTIME may name, beside PyTorch: ONNX Runtime."""
    return {"onnxruntime": ExtractRuntime(onnxruntime_runner, ONNX_PACKAGES, ONNX_EXTRA_HINT)}


__all__ = ["ONNX_PACKAGES", "cluster_runtimes", "onnxruntime_runner"]
