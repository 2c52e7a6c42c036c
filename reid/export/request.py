"""What ``tools/export.py`` asks for, checked in one place before any model is loaded.

An :class:`ExportRequest` exists only checked: its constructor refuses, in one line naming the flag,
what no model could satisfy (an unknown precision, a reduced precision for a ``.pt2`` file, int8
without calibration crops, a tracker export of the wrong kind), and collects notes on flags that
would have no effect. :meth:`ExportRequest.check_model` adds what depends on the model (int8 and
tracker exports of a model with camera ids). Everything after that (``reid.export.pipeline``) takes
the request as given.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from torch import nn

from reid.config.sie_keys import either_key
from reid.modeling import camera_count
from reid.utils.file_io import check_output_file

from .boxmot import check_tracker_export, check_tracker_model
from .clips import check_clip_model
from .exported import export_format
from .options import (
    CALIBRATION_METHODS,
    DEFAULT_CALIBRATION_IMAGES,
    DEFAULT_OPSET,
    QUANTIZERS,
    TRACKERS,
    check_choice,
    check_precision,
)

INT8_NO_CAMIDS = ("--precision int8 is not offered for a model that takes camera ids (SIE): its calibration feeds "
                  "images only; export it at fp16 or fp32, or use a model trained with "
                  f"{either_key('SIE_CAMERA', 'False')}.")
INT8_NEEDS_CALIBRATION = ("--precision int8 needs calibration crops: pass --calibration with a folder, list file or "
                          "dataset name of a few hundred crops of your cameras.")


@dataclass
class ExportRequest:
    """One export command: the files to write and how (the flags of ``tools/export.py``, one field each).

    `outputs` (``.pt2`` / ``.onnx``, format by extension), `input_size` (H, W; None: the model's
    ``INPUT.SIZE_TEST``), `opset`, `check` (compare each fp32 file with PyTorch, largest difference
    `tol`), `tracker` ("boxmot": that tracker's input convention), `precision` of the ONNX files
    (fp32, fp16, int8), int8's `calibration` crops (`calibration_images` of them chosen with `seed`,
    ranges by `calibration_method`, QDQ pairs placed by `quantizer`), and `check_on` (a labelled set
    on which a file losing more than `max_map_drop` mAP points against PyTorch fp32 is not written,
    unless `force`). `clips`: a video model's clip files (frames axis; :mod:`reid.export.clips`), fp32
    only. `notes` holds a line for each flag given that would have no effect.
    """

    outputs: Sequence[str]
    input_size: Optional[Sequence[int]] = None
    opset: int = DEFAULT_OPSET
    check: bool = True
    tol: float = 1e-4
    tracker: Optional[str] = None
    precision: str = "fp32"
    calibration: Sequence[str] = ()
    calibration_images: int = DEFAULT_CALIBRATION_IMAGES
    calibration_method: str = "minmax"
    quantizer: str = "onnxruntime"
    seed: int = 0
    check_on: Sequence[str] = ()
    max_map_drop: float = 1.0
    force: bool = False
    clips: bool = False
    notes: List[str] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.outputs = [str(o) for o in self.outputs or ()]
        if not self.outputs:
            raise ValueError("No output files given; pass e.g. --output model.onnx model.pt2.")
        self.calibration = [str(c) for c in self.calibration or ()]
        self.check_on = [str(c) for c in self.check_on or ()]
        self.precision = check_precision(self.precision)
        self.calibration_method = check_choice("--calibration-method", self.calibration_method, CALIBRATION_METHODS)
        self.quantizer = check_choice("--quantizer", self.quantizer, QUANTIZERS)
        if self.tracker is not None:
            self.tracker = check_choice("--for", self.tracker, TRACKERS)
        for out in self.outputs:  # a bad extension or a folder in the way fails before any slow work
            if export_format(check_output_file(out)) != "onnx" and self.precision != "fp32":
                raise ValueError(f"--precision {self.precision} writes ONNX files (a .pt2 program computes in fp32, "
                                 f"as PyTorch does); name {out} *.onnx, or leave --precision at fp32.")
        if self.clips:
            self._check_clips()
        if self.precision == "int8" and not self.calibration:
            raise ValueError(INT8_NEEDS_CALIBRATION)
        unused = [("--quantizer", "--precision int8", self.precision != "int8" and self.quantizer != "onnxruntime"),
                  ("--calibration-method", "--precision int8",
                   self.precision != "int8" and self.calibration_method != "minmax"),
                  ("--force", "--check-on", self.force and not self.check_on),
                  ("--max-map-drop", "--check-on", self.max_map_drop != 1.0 and not self.check_on)]
        self.notes = [f"note: {flag} has no effect here: it applies to {applies_to}"
                      for flag, applies_to, given in unused if given]

    def _check_clips(self) -> None:
        """--clips writes fp32 files of a video model's clips: refuse the flags that write or score image files."""
        clashes = [("--precision " + self.precision, self.precision != "fp32"), ("--for " + str(self.tracker), self.tracker),
                   ("--calibration", self.calibration), ("--check-on", self.check_on)]
        given = [flag for flag, on in clashes if on]
        if given:
            raise ValueError(f"--clips writes fp32 files that take clips and are checked against PyTorch on random clips; "
                             f"{', '.join(given)} work on image files: leave {'them' if len(given) > 1 else 'it'} out, "
                             "or export without --clips.")

    @property
    def onnx_outputs(self) -> List[str]:
        return [o for o in self.outputs if export_format(o) == "onnx"]

    @property
    def reduced(self) -> bool:
        """Whether the ONNX files go through the precision pipeline (converted, calibrated or scored)."""
        return self.precision != "fp32" or bool(self.calibration) or bool(self.check_on)

    def precision_of(self, out: str) -> str:
        """The arithmetic of output `out`: the request's for ONNX files, fp32 for a ``.pt2`` program."""
        return self.precision if export_format(out) == "onnx" else "fp32"

    def check_model(self, model: nn.Module) -> None:
        """Refuse what `model` cannot be exported as (int8 and tracker exports need images only; clip
        exports a model that pools frames)."""
        if self.precision == "int8" and camera_count(model):
            raise ValueError(INT8_NO_CAMIDS)
        if self.tracker:
            check_tracker_model(self.tracker, model)
        if self.clips:
            check_clip_model(model)

    def size(self, model_size: Sequence[int]) -> Tuple[int, int]:
        """The input size of the files: `input_size`, else the model's (a tracker's must be fixed)."""
        size = [int(s) for s in (self.input_size or model_size)]
        if self.tracker:
            size = list(check_tracker_export(self.tracker, self.outputs, size))
        return size[0], size[1]


__all__ = ["ExportRequest", "INT8_NEEDS_CALIBRATION", "INT8_NO_CAMIDS"]
