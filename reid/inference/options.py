"""What a user chooses when features are extracted: names only, so that a program's ``--help`` and
argument checks answer without loading torch."""
from typing import Tuple

#: PyTorch, or the model's ONNX export (a given file, or one written for the occasion) in ONNX
#: Runtime or OpenVINO on the CPU (``reid.inference.backends``).
BACKEND_NAMES: Tuple[str, ...] = ("torch", "onnxruntime", "openvino")

__all__ = ["BACKEND_NAMES"]
