"""Inference backends for feature extraction: PyTorch, or the exported ONNX file run by
ONNX Runtime or OpenVINO (``Predictor(backend=...)``, ``tools/extract.py --backend``).

The non-PyTorch backends run the file ``tools/export.py`` writes (raw 0-255 pixels in,
L2-normalised features out; a model with SIE also takes each image's camera id, ``camids``):
a given ``exported`` file, or one exported into a temporary folder when the predictor is built. Trackers and CPU-only servers use them because a
compiled graph with fused operators is faster on CPUs than eager PyTorch; the features agree
with PyTorch fp32 to about 1e-6 (``benchmarks/bench_extract.py`` measures both).
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from reid.export.exported import ONNX_EXTRA_HINT, recorded_cameras
from reid.export.identity import recorded_identity, short, weights_hash
from reid.export.options import PRECISIONS, check_precision
from reid.export.precision import convert_fp16
from reid.export.runtimes import OnnxFile
from reid.export.writer import RAW_PIXELS, export_onnx
from reid.modeling import camera_count
from reid.utils.npz_files import json_object
from reid.utils.path_kinds import check_file
from reid.utils.registry import Registry
from reid.utils.text_files import printable

from .options import BACKEND_NAMES

logger = logging.getLogger(__name__)

BACKEND_REGISTRY = Registry("inference backend", declared=BACKEND_NAMES[1:])
# (uint8/float pixels [B, 3, H, W], camera ids int64 [B] or None) -> features [B, D]; the caller
# checks the ids (reid.export.camera_ids.check_camids) and gives them only to a model with SIE.
Runtime = Callable[[torch.Tensor, Optional[torch.Tensor]], np.ndarray]


class ExportedRuntime:
    """A backend's runner (``runtime(pixels, camids) -> features``) with what it runs: `path` (the
    given exported file, None when the model was exported for the occasion) and `identity` (the
    weights identity that file records and that was checked against the model, None when it
    records none: a file exported before identities were written)."""

    def __init__(self, run: Runtime, path: Optional[str] = None, identity: Optional[Dict[str, str]] = None,
                 precision: str = "fp32") -> None:
        self._run, self.path, self.identity, self.precision = run, path, identity, precision

    def __call__(self, images: torch.Tensor, camids: Optional[torch.Tensor] = None) -> np.ndarray:
        return self._run(images, camids)


def _onnx_file(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str],
               precision: str = "fp32") -> Tuple[str, Optional[str]]:
    """The ONNX file to run, and a temporary folder to remove afterwards (None for a given file);
    exported now at `precision` (fp32 or fp16; int8 needs calibration crops: tools/export.py)."""
    if exported:
        check_file(exported, "Exported model", "name a .onnx file written by tools/export.py.",
                   missing_hint="write it with tools/export.py.")
        return str(exported), None
    folder = tempfile.mkdtemp(prefix="reid_runtime_")
    path = export_onnx(model, os.path.join(folder, "model.onnx"), input_size)
    if precision == "fp16":
        convert_fp16(path, path)
    return path, folder


def file_precision(metadata: Optional[str]) -> str:
    """The precision an exported file records (its ``circle_reid`` metadata); fp32 when it records none."""
    value = (json_object(metadata) or {}).get("precision", "fp32")
    return value if value in PRECISIONS else "fp32"


def _check_precision(path: Optional[str], metadata: Optional[str], wanted: Optional[str]) -> str:
    """The precision features are made at: a given file's (`path`; a ValueError when `wanted` is another),
    else `wanted` (the model was exported at it for the run; fp32 when None)."""
    if not path:
        return wanted or "fp32"
    recorded = file_precision(metadata)
    if wanted and wanted != recorded:
        raise ValueError(f"{path} is an {recorded} file and --precision {wanted} was asked for; export one at "
                         f"{wanted} with tools/export.py --precision {wanted}, or leave --precision out.")
    return recorded


def _check_size(path: str, shape: Sequence[object], input_size: Tuple[int, int]) -> None:
    size = tuple(int(str(d)) for d in list(shape)[2:4])
    if size != tuple(input_size):
        raise ValueError(f"{path} was exported for {size[0]}x{size[1]} images, the model's config resizes to "
                         f"{input_size[0]}x{input_size[1]} (INPUT.SIZE_TEST); export it again at this size.")


def _check_weights(path: str, model: nn.Module, metadata: Optional[str], weights: str) -> Optional[Dict[str, str]]:
    """The weights identity `path` records (its ``circle_reid`` `metadata`) must be `model`'s: a
    file exported from other weights would give features that the gallery's metadata attributes
    to `weights`. A file recording none (exported before identities were written) is let through
    with a note. Returns the identity recorded, or None."""
    try:
        recorded = recorded_identity(metadata)
    except ValueError as e:
        raise ValueError(f"{path}: {e}.") from None
    given = weights or "the model given"
    if recorded is None:
        logger.warning("note: %s records no weights identity (exported before circle-reid recorded one), so it cannot "
                       "be checked against %s; galleries made with it name the file instead of those weights. Export "
                       "again with tools/export.py to record it.", path, printable(given))
        return None
    mine = weights_hash(model)
    if recorded["weights_sha256"] != mine:
        source = printable(recorded["weights_file"]) or "unnamed weights"
        raise ValueError(f"{path} was exported from other weights than {printable(given)}: it records {source} "
                         f"(sha256 {short(recorded['weights_sha256'])}...), the model given has sha256 {short(mine)}...; "
                         "pass the --run / --weights it was exported from, or export this model with tools/export.py.")
    return recorded


def _check_pixels(path: str, metadata: Optional[str]) -> None:
    """The file must take raw pixels (a tracker export takes its tracker's normalised crops)."""
    described = (json_object(metadata) or {}).get("input", "")
    if described and RAW_PIXELS not in described:
        raise ValueError(f"{path} takes other inputs than raw pixels ({described[:200]}): it was exported for a tracker "
                         "(--for); export without --for for these backends.")


def _check_inputs(path: str, names: Sequence[str], model: nn.Module, metadata: Optional[str]) -> None:
    """The file must take camera ids exactly when the model does (SIE), and as many cameras as it
    knows (`metadata`: the file's ``circle_reid`` record, which holds the count)."""
    cameras = camera_count(model)
    if cameras and len(names) < 2:
        raise ValueError(f"{path} takes images only, but this model uses camera ids (SIE): export it again with "
                         "tools/export.py (a model with SIE gets a second input, camids).")
    if not cameras and len(names) > 1:
        raise ValueError(f"{path} takes camera ids ({names[1]}) and this model does not: the file comes from "
                         "another model; export this one with tools/export.py.")
    recorded = recorded_cameras(metadata)
    # A file without the record (written before it existed) cannot be checked; its ids are still range-checked.
    if cameras and recorded is not None and recorded != cameras:
        raise ValueError(f"{path} was exported from a model with {recorded} cameras (SIE), this model has {cameras} "
                         "(MODEL.TRANSREID.NUM_CAMERAS): the file comes from another model; export this one "
                         "again with tools/export.py.")


def _check_file(path: str, names: Sequence[str], model: nn.Module, metadata: Optional[str], given: bool,
                weights: str) -> Optional[Dict[str, str]]:
    """Every check of a file against the model; returns the weights identity it records (a given file)."""
    _check_inputs(path, names, model, metadata)
    if not given:  # exported from this model a moment ago
        return None
    _check_pixels(path, metadata)
    return _check_weights(path, model, metadata, weights)


def _runtime(runtime: str, model: nn.Module, input_size: Tuple[int, int], exported: Optional[str], weights: str,
             precision: Optional[str]) -> ExportedRuntime:
    """`exported` (or `model` exported now) opened in `runtime` and checked against `model`."""
    path, folder = _onnx_file(model, input_size, exported, precision or "fp32")
    try:
        opened = OnnxFile(path, runtime)
        _check_size(path, opened.input_shape, input_size)
        identity = _check_file(path, opened.input_names, model, opened.metadata, folder is None, weights)
        recorded = _check_precision(exported, opened.metadata, precision)
        if runtime == "openvino":  # compiles batch 1 now: a file OpenVINO cannot run fails here, not mid-gallery
            opened.run(np.zeros((1, 3, *input_size), np.float32),
                       torch.zeros(1, dtype=torch.int64) if len(opened.input_names) > 1 else None)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return ExportedRuntime(opened.run, exported, identity, recorded)


@BACKEND_REGISTRY.register("onnxruntime")
def onnxruntime_runtime(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str] = None,
                        weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """ONNX Runtime on the CPU, all graph optimisations, torch's thread count."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise ImportError(f"--backend onnxruntime needs onnxruntime: {ONNX_EXTRA_HINT}.") from e
    return _runtime("onnxruntime", model, input_size, exported, weights, precision)


@BACKEND_REGISTRY.register("openvino")
def openvino_runtime(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str] = None,
                     weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """OpenVINO on the CPU (reads the ONNX file directly), the file's own precision (fp32 layers in
    fp32), torch's thread count, static batch sizes (``reid.export.runtimes.OpenVINOBatches``)."""
    try:
        import openvino  # noqa: F401
    except ImportError as e:
        raise ImportError("--backend openvino needs OpenVINO: pip install openvino (or use --backend onnxruntime).") from e
    return _runtime("openvino", model, input_size, exported, weights, precision)


def build_runtime(name: str, model: nn.Module, input_size: Sequence[int], exported: Optional[str] = None,
                  weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """A non-PyTorch backend for `model`; an unknown name lists the valid ones (torch included).

    A given `exported` file must hold `model`'s weights (the identity it records, see
    :mod:`reid.export.identity`; `weights` names the model's weights file in messages), take
    raw pixels, and match the model's input size and camera ids. `precision` (fp32, fp16, int8;
    None: what the file records) must be the given file's; without a file the model is exported at
    it now, which int8 cannot be (its calibration crops come with tools/export.py).
    """
    if str(name).lower() not in BACKEND_REGISTRY:
        raise ValueError(f"Unknown inference backend {name!r}. Valid names: {', '.join(BACKEND_NAMES)}.")
    # Checked before the backend's package is imported: a wrong file is the mistake to report first.
    if exported and not str(exported).lower().endswith(".onnx"):
        raise ValueError(f"--exported {exported} is not an .onnx file; these backends run ONNX "
                         "(write one with tools/export.py --output model.onnx).")
    if precision is not None:
        precision = check_precision(precision)
        if precision == "int8" and not exported:
            raise ValueError("int8 needs calibration crops: write the file with tools/export.py --precision int8 "
                             "--calibration CROPS and pass it with --exported.")
    return BACKEND_REGISTRY.get(name)(model, (int(input_size[0]), int(input_size[1])), exported, weights=weights,
                              precision=precision)


__all__ = ["BACKEND_NAMES", "BACKEND_REGISTRY", "ExportedRuntime", "Runtime", "build_runtime"]
