"""Exports that multi-object trackers load as they are (``tools/export.py --for boxmot``).

BoxMOT's re-ID backends (the ``boxmot`` package; ONNX through onnxruntime) cut each detection
from the BGR frame, resize it with OpenCV's bilinear filter to the input size the ONNX graph
declares (people: 256x128), convert it to RGB, divide by 255, subtract ImageNet's mean and
divide by its std, stack the crops into ``[N, 3, H, W]`` float32 (N free), read the graph's
first output ``[N, D]`` and L2-normalise it. This toolkit's models take raw 0-255 pixels and
normalise inside, so the tracker export prepends the inverse of BoxMOT's normalisation
(``x * 255 * std + 255 * mean``), which gives the model the pixels it was trained on; the
rest is the ordinary ONNX export (fixed H x W, free batch axis, L2-normalised features).
BoxMOT gives a model image crops only, so a model whose features need camera ids (SIE) is refused.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from reid.config.sie_keys import either_key
from reid.modeling import camera_count

from .identity import weights_identity
from .options import DEFAULT_OPSET, MIN_SIDE, TRACKERS
from .pixels import BOXMOT_MEAN, BOXMOT_PIXELS, BOXMOT_STD
from .writer import check_input_size, export_onnx

PathLike = Union[str, "os.PathLike[str]"]


class BoxMOTInput(nn.Module):
    """BoxMOT's normalised crops -> raw 0-255 RGB pixels -> `model`."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.register_buffer("scale", 255.0 * torch.tensor(BOXMOT_STD).view(1, 3, 1, 1))
        self.register_buffer("shift", 255.0 * torch.tensor(BOXMOT_MEAN).view(1, 3, 1, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(images * self.scale + self.shift)


def check_tracker_export(tracker: str, outputs: Sequence[str], input_size: Optional[Sequence[int]]) -> Tuple[int, int]:
    """The fixed ``(H, W)`` of an export for `tracker`; a one-line ValueError naming what to do otherwise."""
    if tracker not in TRACKERS:
        raise ValueError(f"Unknown tracker {tracker!r} for --for; valid: {', '.join(TRACKERS)}.")
    bad = [o for o in outputs if not str(o).lower().endswith(".onnx")]
    if bad:
        raise ValueError(f"--for boxmot writes ONNX, which BoxMOT runs with onnxruntime; name {bad[0]} *.onnx "
                         "(BoxMOT's .pt files hold its own architectures, not this toolkit's).")
    size = [int(s) for s in input_size] if input_size else []
    if len(size) != 2 or min(size) < MIN_SIDE:
        raise ValueError(f"--for boxmot needs a fixed input size (BoxMOT reads the crop size from the ONNX graph); "
                         f"got {size or 'none'}: pass --input-size H W (people: 256 128) or set INPUT.SIZE_TEST.")
    for out in outputs:
        name = os.path.basename(os.fspath(out)).lower()
        # BoxMOT reads a model's conventions from its file name: releases of its re-ID backend
        # normalise the crops of a file named "*clip*" with 0.5 / 0.5 instead of ImageNet's mean
        # and std (the export would then see other pixels than it was written for, silently), and
        # resize crops for a file named "*veri*" or "*vehicleid*" to 256x256.
        if "clip" in name:
            raise ValueError(f"--for boxmot: {out}: BoxMOT normalises the crops of a file whose name contains "
                             "'clip' with mean/std 0.5 (not ImageNet's, which this export expects); name it "
                             "without 'clip' (e.g. clipreid -> vitb16_reid).")
        if ("veri" in name or "vehicleid" in name) and list(size) != [256, 256]:
            raise ValueError(f"--for boxmot: {out}: BoxMOT resizes the crops of a file whose name contains 'veri' "
                             f"or 'vehicleid' to 256x256, this export takes {size[0]}x{size[1]}; export at "
                             "--input-size 256 256 or name the file without those words.")
    return check_input_size(size)


def check_tracker_model(tracker: str, model: nn.Module) -> None:
    """A one-line ValueError when `model` needs more than the image crops a tracker gives it (SIE)."""
    if camera_count(model):
        raise ValueError(f"--for {tracker}: this model uses camera ids (SIE) and BoxMOT gives re-ID models image "
                         "crops only; export without --for (the file then takes images and camids), or use a model "
                         f"trained with {either_key('SIE_CAMERA', 'False')}.")


def export_for_boxmot(model: nn.Module, path: PathLike, input_size: Sequence[int],
                      opset: int = DEFAULT_OPSET, metadata: Optional[Dict] = None) -> str:
    """Write `model` as an ONNX file that BoxMOT's ReID backend loads unchanged; returns `path`.

    Input ``images``: float32 ``[N, 3, H, W]`` in BoxMOT's convention (:data:`BOXMOT_PIXELS`),
    H x W fixed to `input_size`, N free; output ``features`` ``[N, D]``, L2-normalised. The
    metadata records the identity of `model`'s weights (``weights_sha256``), as every export's does.
    """
    size = check_tracker_export("boxmot", [os.fspath(path)], input_size)
    check_tracker_model("boxmot", model)
    # The identity of the re-ID model's weights, not of the wrapper (whose constants are BoxMOT's).
    metadata = {**weights_identity(model), **(metadata or {})}
    return export_onnx(BoxMOTInput(model), path, size, opset=opset, pixels=BOXMOT_PIXELS, metadata=metadata)


__all__ = [
    "BoxMOTInput",
    "check_tracker_export",
    "check_tracker_model",
    "export_for_boxmot",
]
