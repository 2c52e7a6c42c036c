"""What a user chooses when a model is exported: names and bounds only, so that ``tools/export.py
--help`` and its argument checks answer without loading torch or ONNX."""
import os
from typing import Dict, Sequence, Tuple

#: The arithmetic of an exported file: fp32 as PyTorch, fp16, or int8 calibrated on crops.
PRECISIONS: Tuple[str, ...] = ("fp32", "fp16", "int8")
#: How int8 calibration picks each tensor's range.
CALIBRATION_METHODS: Tuple[str, ...] = ("minmax", "percentile")
#: Who places the QDQ pairs: ONNX Runtime's quantizer (files for ONNX Runtime, TensorRT, BoxMOT) or
#: OpenVINO's NNCF (files OpenVINO runs fastest; ONNX Runtime runs them slowly: docs/benchmarks.md).
QUANTIZERS: Tuple[str, ...] = ("onnxruntime", "nncf")
#: Trackers whose own input convention an export can take (``--for``).
TRACKERS: Tuple[str, ...] = ("boxmot",)
DEFAULT_OPSET = 18  # the lowest opset torch's torch.export-based ONNX exporter writes
MIN_SIDE = 16  # smaller inputs pool away to nothing in the backbones
DEFAULT_CALIBRATION_IMAGES = 300
#: The fewest int8 calibration crops: a quarter (at least one) is held out to check the int8 features.
MIN_CALIBRATION_IMAGES = 2
#: The formats of exported files, by extension: a torch.export program, ONNX.
EXTENSIONS: Dict[str, str] = {".pt2": "pt2", ".onnx": "onnx"}


def is_exported_file(path: "os.PathLike[str] | str") -> bool:
    """Whether `path` names an exported model (``.onnx`` / ``.pt2``) rather than a checkpoint (by its name
    alone: tools decide which model loader to use before anything is read)."""
    return os.path.splitext(os.fspath(path))[1].lower() in EXTENSIONS


def check_choice(what: str, value: str, valid: Sequence[str]) -> str:
    """`value` lower-cased if it is one of `valid`; a ValueError naming `what` and listing them otherwise."""
    v = str(value).lower()
    if v not in valid:
        raise ValueError(f"Unknown {what} {value!r}; valid: {', '.join(valid)}.")
    return v


def check_precision(precision: str) -> str:
    """`precision` lower-cased if it is one of :data:`PRECISIONS`; a ValueError listing them otherwise."""
    return check_choice("precision", precision, PRECISIONS)


__all__ = ["CALIBRATION_METHODS", "DEFAULT_CALIBRATION_IMAGES", "DEFAULT_OPSET", "MIN_CALIBRATION_IMAGES", "MIN_SIDE",
           "PRECISIONS", "QUANTIZERS", "TRACKERS", "check_choice", "check_precision", "is_exported_file", "EXTENSIONS"]
