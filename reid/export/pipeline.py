"""What ``tools/export.py`` does with a checked :class:`~reid.export.request.ExportRequest`: write each file
(plain, for a tracker, or at a reduced precision), check it against PyTorch, and refuse what fails.

The order: the model is checked against the request; the calibration crops and the labelled check
set are read once (before any file is written, so a bad source fails first); each output is
written; fp32 files are compared with PyTorch at batch sizes 1, 7 and 32 (clip files: on clips of 1, 2
and 5 frames, 1 to 32 of them), reduced-precision files were checked as they were written
(``reid.export.precision_export``).
"""
from __future__ import annotations

import os
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np
from torch import nn
from yacs.config import CfgNode

from reid.data.build import trained_on_tracklets
from reid.data.datasets.folders import check_folder_cameras
from reid.evaluation.thresholds import load_thresholds, resolution_known
from reid.modeling import camera_count, takes_camera_ids

from .boxmot import export_for_boxmot
from .calibration_crops import check_loader, check_set, load_calibration
from .clips import temporal_name
from .identity import short, weights_hash
from .pixels import boxmot_input
from .precision_export import export_at_precision, report_path
from .request import ExportRequest
from .writer import CHECK_BATCH_SIZES, ExportCheck, ExportMismatchError, check_opset, compare_with_export, export_model

Log = Callable[[str], None]


class _PrecisionInputs:
    """The calibration crops and the labelled check set of one request (read once, at its input size)."""

    def __init__(self, request: ExportRequest, model: nn.Module, cfg: CfgNode, size: Sequence[int], log: Log) -> None:
        self.cfg = cfg.clone()
        self.cfg.defrost()
        self.cfg.INPUT.SIZE_TEST = [int(s) for s in size]
        self.pixels: Optional[np.ndarray] = None
        self.source = ""
        self.check: Optional[Tuple[str, list, list]] = None
        if request.check_on:  # read (and refused) before any slow work
            if len(request.check_on) == 2 and takes_camera_ids(model):
                check_folder_cameras(*request.check_on)  # the evaluation's bookkeeping cameras are not the images'
            self.check = check_set(self.cfg, request.check_on)
            log(f"accuracy check on {self.check[0]}: {len(self.check[1])} query / {len(self.check[2])} gallery images")
        if request.calibration:
            self.pixels, self.source = load_calibration(self.cfg, request.calibration, request.calibration_images,
                                                        request.seed)
            log(f"calibration crops: {self.source}")

    def write(self, request: ExportRequest, model: nn.Module, out: str, size: Sequence[int],
              write_fp32: Callable[[str], None], log: Log) -> None:
        name, query, gallery = self.check if self.check else ("", [], [])
        export_at_precision(
            model, out, size, request, write_fp32=write_fp32, pixels=self.pixels, calibration=self.source,
            to_input=boxmot_input if request.tracker else None,
            check_batches=(lambda: check_loader(self.cfg, query, gallery)) if self.check else None,
            check_query=len(query), check_name=name, log=log)
        log(f"report: {report_path(out)}")


def _thresholds_metadata(path: str, size: Sequence[int], log: Log) -> Optional[dict]:
    """A run's thresholds.json as exported metadata, when it holds for this export's features."""
    record = load_thresholds(path)  # checked as a whole before any of it is copied
    made = record.get("extraction")
    # The exported model computes one pass at `size` (no flip averaging): thresholds calibrated
    # on other features would not hold their FAR for its scores.
    if made is not None and (made["input_size"] != list(size) or made["flip"]):
        log(f"note: {path} was calibrated on features of input size {made['input_size']}"
            f"{' with flip averaging' if made['flip'] else ''}, not those of this export ({list(size)}, one pass); "
            "its thresholds are not stored in the exported model.")
        return None
    if not resolution_known(record):
        log(f"note: {path} does not record how many pairs its thresholds rest on (not written by this "
            "toolkit's calibration); they are not stored in the exported model.")
        return None
    log(f"the run's calibrated thresholds ({path}) go into the metadata")
    return record


def _note_video_model(request: ExportRequest, model: nn.Module, cfg: CfgNode, log: Log) -> None:
    """Say what a video model's file computes: its clips (--clips), else single frames."""
    video = trained_on_tracklets(cfg)
    if request.clips:
        log(f"clip files: every clip's frames through the frame encoder, pooled by {temporal_name(model)}, then the "
            "neck (as model(clips)); a clip is all real frames (no frame mask)"
            + ("" if video else "; note: the model was not trained on tracklets (DATASETS.NAMES)"))
    elif video and hasattr(model, "temporal"):
        log("note: the model was trained on tracklets; these files take single frames (each a clip of one frame, "
            "without the temporal pooling across frames). --clips writes files that pool a clip's frames.")


def run_export(request: ExportRequest, model: nn.Module, cfg: CfgNode, weights_sha256: Optional[str] = None,
               thresholds: Optional[str] = None, log: Log = print) -> List[Optional[ExportCheck]]:
    """Write every output of `request` from `model` (``cfg``: its inference config) and check it.

    The files record the weights' identity (`weights_sha256`, computed when not given, and the file
    name of ``cfg.MODEL.WEIGHTS``); `thresholds` (a run's thresholds.json) goes into their metadata as
    ``decision_thresholds`` where it holds for the export's features. Returns each fp32 file's check
    against PyTorch (None where not checked: ``check`` off, a reduced-precision file, or no
    onnxruntime). Raises ExportMismatchError when a difference exceeds the request's ``tol``, after
    every file has been written and checked; PrecisionCheckError when a reduced file fails its gate.
    """
    request.check_model(model)
    for note in request.notes:  # flags given that apply to something else: said, not silently ignored
        log(note)
    if request.onnx_outputs:
        check_opset(request.opset)
    h, w = cfg.INPUT.SIZE_TEST
    size = list(request.size((int(h), int(w))))
    pixels = "RGB/255 with ImageNet mean/std (BoxMOT)" if request.tracker else "RGB 0-255"
    _note_video_model(request, model, cfg, log)
    shape = f"[batch, frames, 3, {size[0]}, {size[1]}]" if request.clips else f"[batch, 3, {size[0]}, {size[1]}]"
    cameras = camera_count(model)
    camera_input = f" and camids int64 [batch] (camera ids 0..{cameras - 1}, SIE)" if cameras else ""
    # The weights' identity (their state's hash and file name): a later --exported with --run /
    # --weights is checked against it, and galleries made with the file record it.
    metadata = {"weights_sha256": weights_sha256 or weights_hash(model)}
    if cfg.MODEL.WEIGHTS:
        metadata["weights_file"] = os.path.basename(str(cfg.MODEL.WEIGHTS))
    log(f"the weights' identity goes into the metadata: sha256 {short(metadata['weights_sha256'])}... of "
        f"{metadata.get('weights_file', 'the model given')}")
    record = _thresholds_metadata(thresholds, size, log) if thresholds else None
    if record is not None:
        metadata["decision_thresholds"] = record
    inputs = _PrecisionInputs(request, model, cfg, size, log) if request.reduced else None

    def write_fp32(path: str, extra: Optional[dict] = None) -> None:
        recorded = {**metadata, **(extra or {})}
        if request.tracker:
            export_for_boxmot(model, path, size, opset=request.opset, metadata=recorded)
        else:
            export_model(model, path, size, opset=request.opset, metadata=recorded, clips=request.clips)

    checks: List[Optional[ExportCheck]] = []
    for out in request.outputs:
        precision = request.precision_of(out)
        if inputs is not None and out in request.onnx_outputs:
            inputs.write(request, model, out, size, write_fp32, log)
        else:
            if request.check_on:
                log(f"note: --check-on scores ONNX files; {out} is a torch.export program, which computes as PyTorch "
                    "does (checked against it below)")
            write_fp32(out, {"precision": "fp32"})
        log(f"wrote {'onnx' if out in request.onnx_outputs else 'pt2'} model {out} ({precision}; input float32 "
            f"{shape} {pixels}{camera_input}, output L2-normalised [batch, {model.feature_dim}])")
        if not request.check or precision != "fp32":  # reduced precision: checked as it was written
            checks.append(None)
            continue
        try:
            # The file runs in its own input convention (a tracker's gets its crops converted): its
            # features must be the model's on the same raw pixels.
            result = compare_with_export(model, out, size, batch_sizes=CHECK_BATCH_SIZES, clips=request.clips)
        except ImportError as e:
            log(f"check of {out} skipped: {e}")
            checks.append(None)
            continue
        log(f"check: {result} -> {'OK' if result.passed(request.tol) else f'FAILED (tolerance {request.tol:g})'}")
        checks.append(result)
    bad = [c for c in checks if c is not None and not c.passed(request.tol)]
    if bad:
        raise ExportMismatchError(
            f"{len(bad)} exported model(s) differ from PyTorch by more than {request.tol:g}: "
            + "; ".join(f"{c.path} ({c.max_abs_diff:.2e})" for c in bad)
            + ". Try another --opset, or report the model and versions."
        )
    return checks


__all__ = ["run_export"]
