"""The input conventions an exported file may record, and the conversion from raw pixels to each.

Every exported file records its convention in its ``circle_reid`` record (``input``): raw RGB pixels
0-255 (``tools/export.py``), or BoxMOT's normalised crops (``--for boxmot``). Whatever runs a file
(:class:`reid.export.exported.ExportedModel`, every tool) hands it raw pixels and converts them here,
so a tracker's file gives the same features in every tool as in the tracker.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import torch

RAW_PIXELS = "RGB pixels 0-255 (no mean/std to apply)"
#: BoxMOT's input convention: RGB / 255, then ImageNet mean and std.
BOXMOT_MEAN = (0.485, 0.456, 0.406)
BOXMOT_STD = (0.229, 0.224, 0.225)
BOXMOT_PIXELS = "RGB / 255, minus ImageNet mean (0.485, 0.456, 0.406), divided by std (0.229, 0.224, 0.225) (BoxMOT)"

Transform = Callable[[torch.Tensor], torch.Tensor]


def boxmot_input(pixels: torch.Tensor) -> torch.Tensor:
    """Raw RGB pixels ``[B, 3, H, W]`` (0-255) as BoxMOT feeds them to a model (float32)."""
    mean = torch.tensor(BOXMOT_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(BOXMOT_STD).view(1, 3, 1, 1)
    return (pixels.float() / 255.0 - mean) / std


def input_convention(record: Dict[str, Any]) -> Optional[str]:
    """"raw" or "boxmot" from a file's ``circle_reid`` record; None when it records none (a file of
    another exporter, whose convention is unknown) or one this version does not know."""
    described = str(record.get("input", ""))
    if not described:
        return None
    if BOXMOT_PIXELS in described:
        return "boxmot"
    return "raw" if RAW_PIXELS in described else None


def from_raw_pixels(convention: Optional[str]) -> Optional[Transform]:
    """The conversion of raw pixels into `convention` (None: they go in as they are)."""
    return boxmot_input if convention == "boxmot" else None


__all__ = ["BOXMOT_MEAN", "BOXMOT_PIXELS", "BOXMOT_STD", "RAW_PIXELS", "boxmot_input", "from_raw_pixels",
           "input_convention"]
