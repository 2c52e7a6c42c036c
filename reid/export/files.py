"""What an exported model file is, before anything runs it: its format (by extension), the
``circle_reid`` record it carries (input convention, size, cameras, weights identity, precision),
its inputs, and one-line errors for a file that is not one.

The files are written by :mod:`reid.export.writer` (``tools/export.py``): ``.pt2`` (a
``torch.export`` program) and ``.onnx``; :mod:`reid.export.exported` runs them.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Union

import torch

from reid.utils.file_signatures import content_kind, read_head
from reid.utils.npz_files import json_object

from .options import EXTENSIONS, PRECISIONS

PathLike = Union[str, "os.PathLike[str]"]

TORCHSCRIPT_EXTENSIONS = (".ts", ".pt", ".torchscript", ".jit")
ONNX_EXTRA_HINT = "pip install onnx onnxscript onnxruntime (or pip install 'circle-reid[export]')"
METADATA_KEY = "circle_reid"  # ONNX metadata_props key / .pt2 extra file: what the model expects


def export_format(path: PathLike) -> str:
    """"pt2" or "onnx" from the file extension of `path`."""
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    if ext in TORCHSCRIPT_EXTENSIONS:
        raise ValueError(f"{p!r}: TorchScript (.ts/.pt) is no longer written or read (torch deprecates it); "
                         "export to .pt2 instead (a torch.export program: tools/export.py --output model.pt2).")
    raise ValueError(
        f"Cannot tell the export format of {p!r} from its extension; use .pt2 for a torch.export "
        "program or .onnx for ONNX."
    )


def unreadable(path: str, error: BaseException, what: str = "ONNX model") -> ValueError:
    """A file a runtime cannot load, in one line naming it: what its first bytes say it is (an empty
    file, a JPEG image, a text file, ...), else the first line of the runtime's own message
    (onnxruntime's and torch's run to many lines of C++ or Python context)."""
    head = read_head(path)
    # ONNX models are binary data and .pt2 programs zip archives: only another kind is named by its bytes.
    archive = head is not None and head.startswith(b"PK") and what != "ONNX model"
    kind = content_kind(head, os.path.basename(path)) if head is not None and not archive else None
    if kind is not None and kind != "binary data":
        return ValueError(f"{path!r} is not a readable {what}: it is {kind}; give a file tools/export.py wrote, "
                          "or export it again.")
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return ValueError(f"{path!r} is not a readable {what} ({first[:300]}); give a file tools/export.py wrote, "
                      "or export it again.")


def program_feature_dim(program: torch.export.ExportedProgram) -> int:
    """D of the program's output ``[batch, D]`` (the output node lists the user outputs)."""
    features = next(n for n in program.graph.nodes if n.op == "output").args[0][0]
    return int(features.meta["val"].shape[1])


def recorded_cameras(text: Optional[str]) -> Optional[int]:
    """The camera count an exported file records (its ``circle_reid`` metadata text), or None when
    it records none (a model without SIE, or a file from before the count was written)."""
    value = (json_object(text, strings=False) or {}).get("num_cameras")  # absent or unreadable: none recorded
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def onnx_feeds(names: Sequence[str], images: torch.Tensor, camids: Optional[torch.Tensor] = None) -> Dict[str, Any]:
    """The ONNX Runtime inputs of an exported file whose inputs are `names` (images[, camids])."""
    feeds = {names[0]: images.to(torch.float32).numpy()}
    if camids is not None:
        feeds[names[1]] = camids.numpy()
    return feeds


def file_record(text: Optional[str]) -> Dict[str, Any]:
    """The ``circle_reid`` record of an exported file (its metadata text); {} when it carries none
    (a file from another exporter) or it is unreadable."""
    return json_object(text, strings=False) or {}


def recorded_precision(text: Optional[str]) -> str:
    """The precision an exported file records; fp32 when it records none."""
    value = file_record(text).get("precision", "fp32")
    return value if isinstance(value, str) and value in PRECISIONS else "fp32"


__all__ = ["METADATA_KEY", "ONNX_EXTRA_HINT", "export_format", "file_record",
           "onnx_feeds", "program_feature_dim", "recorded_cameras", "recorded_precision", "unreadable"]
