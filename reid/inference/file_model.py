"""An exported file as the model the evaluator calls (``tools/test.py --weights model.onnx``).

The evaluation extracts features batch by batch with ``model(images, camids=...)``; an exported file
(``reid.inference.backends.ExportedRuntime``) answers the same call, so R-1 / mAP / mINP of an ONNX
or ``.pt2`` file at any precision come from the same code as a checkpoint's. The file returns
L2-normalised features; the evaluator's normalisation leaves them as they are.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from torch import nn

from .backends import ExportedRuntime


class ExportedFeatures(nn.Module):
    """``model(images, camids=None) -> [B, D]`` of an exported file: the batch goes to the file's runtime
    on the CPU and its features come back on the images' device. ``uses_camids`` / ``num_cameras``
    say what the file takes (``reid.modeling.camera_input`` asks them); ``feature_dim`` its width."""

    def __init__(self, runtime: ExportedRuntime) -> None:
        super().__init__()
        self.runtime = runtime
        self.feature_dim = int(runtime.file.feature_dim)
        self.uses_camids = bool(runtime.file.needs_camids)
        # A file that takes camera ids but records no count (exported before it was written): ids are
        # range-checked per call against any non-negative id.
        self.num_cameras = int(runtime.file.num_cameras or 0) if self.uses_camids else 0

    def forward(self, images: torch.Tensor, camids: Optional[torch.Tensor] = None) -> torch.Tensor:
        cams = None if camids is None else camids.detach().cpu()
        features = self.runtime(images.detach().cpu(), cams)
        return torch.from_numpy(np.asarray(features, dtype=np.float32)).to(images.device)

    def extra_repr(self) -> str:
        return f"{self.runtime.file.path} ({self.runtime.file.runtime}, {self.runtime.precision})"


__all__ = ["ExportedFeatures"]
