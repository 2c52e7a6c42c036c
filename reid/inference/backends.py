"""Inference backends for feature extraction: PyTorch, or the exported ONNX file run by
ONNX Runtime or OpenVINO (``Predictor(backend=...)``, ``tools/extract.py --backend``).

The non-PyTorch backends run the file ``tools/export.py`` writes (raw 0-255 pixels in,
L2-normalised features out; a model with SIE also takes each image's camera id, ``camids``):
a given ``exported`` file, or one exported into a temporary folder when the predictor is built. Trackers and CPU-only servers use them because a
compiled graph with fused operators is faster on CPUs than eager PyTorch; the features agree
with PyTorch fp32 to about 1e-6 (``benchmarks/bench_extract.py`` measures both).
"""
from __future__ import annotations

import functools
import logging
import os
import shutil
import tempfile
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from reid.config.sie_keys import either_key
from reid.export.exported import FORMAT_RUNTIMES, ExportedModel
from reid.export.files import export_format
from reid.export.identity import short, weights_hash
from reid.export.options import check_precision
from reid.export.precision import convert_fp16
from reid.export.runtimes import require_runtime
from reid.export.writer import export_onnx
from reid.modeling import camera_count
from reid.utils.registry import Registry
from reid.utils.text_files import printable

from .options import BACKEND_NAMES

logger = logging.getLogger(__name__)

BACKEND_REGISTRY = Registry("inference backend", declared=BACKEND_NAMES[1:])
# (uint8/float pixels [B, 3, H, W], camera ids int64 [B] or None) -> features [B, D]; the caller
# checks the ids (reid.export.camera_ids.check_camids) and gives them only to a model with SIE.
Runtime = Callable[[torch.Tensor, Optional[torch.Tensor]], np.ndarray]


class ExportedRuntime:
    """A backend's runner (``runtime(pixels, camids) -> features``; raw pixels in, whatever the file's
    own convention) with what it runs: `path` (the given exported file, None when the model was
    exported for the occasion), `identity` (the weights identity that file records, checked against
    the model where one is given; None when it records none) and `precision`; `file` is the opened
    :class:`~reid.export.exported.ExportedModel` (input size, feature width, cameras)."""

    def __init__(self, file: ExportedModel, path: Optional[str] = None, identity: Optional[Dict[str, str]] = None,
                 precision: str = "fp32") -> None:
        self.file, self.path, self.identity, self.precision = file, path, identity, precision

    def __call__(self, images: torch.Tensor, camids: Optional[torch.Tensor] = None) -> np.ndarray:
        return self.file(images, camids)


def _export_now(model: nn.Module, input_size: Tuple[int, int], precision: str) -> Tuple[str, str]:
    """`model` as an ONNX file in a temporary folder (removed by the caller) at `precision` (fp32 or
    fp16; int8 needs calibration crops: tools/export.py)."""
    folder = tempfile.mkdtemp(prefix="reid_runtime_")
    path = export_onnx(model, os.path.join(folder, "model.onnx"), input_size)
    if precision == "fp16":
        convert_fp16(path, path)
    return path, folder


def _check_precision(path: Optional[str], recorded: str, wanted: Optional[str]) -> str:
    """The precision features are made at: a given file's (`path`; a ValueError when `wanted` is another),
    else `wanted` (the model was exported at it for the run; fp32 when None)."""
    if not path:
        return wanted or "fp32"
    if wanted and wanted != recorded:
        raise ValueError(f"{path} is an {recorded} file and --precision {wanted} was asked for; export one at "
                         f"{wanted} with tools/export.py --precision {wanted}, or leave --precision out.")
    return recorded


def _check_size(path: str, size: Sequence[int], input_size: Tuple[int, int]) -> None:
    if tuple(size) != tuple(input_size):
        raise ValueError(f"{path} was exported for {size[0]}x{size[1]} images, the model's config resizes to "
                         f"{input_size[0]}x{input_size[1]} (INPUT.SIZE_TEST); export it again at this size.")


def _check_weights(path: str, model: nn.Module, recorded: Optional[Dict[str, str]],
                   weights: str) -> Optional[Dict[str, str]]:
    """The weights identity `path` records must be `model`'s: a file exported from other weights
    would give features that the gallery's metadata attributes to `weights`. A file recording none
    (exported before identities were written) is let through with a note. Returns the identity."""
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


def _check_inputs(path: str, names: Sequence[str], model: nn.Module, recorded: Optional[int]) -> None:
    """The file must take camera ids exactly when the model does (SIE), and as many cameras as it
    knows (`recorded`: the count the file records, None when it records none)."""
    cameras = camera_count(model)
    if cameras and len(names) < 2:
        raise ValueError(f"{path} takes images only, but this model uses camera ids (SIE): export it again with "
                         "tools/export.py (a model with SIE gets a second input, camids).")
    if not cameras and len(names) > 1:
        raise ValueError(f"{path} takes camera ids ({names[1]}) and this model does not: the file comes from "
                         "another model; export this one with tools/export.py.")
    # A file without the record (written before it existed) cannot be checked; its ids are still range-checked.
    if cameras and recorded is not None and recorded != cameras:
        raise ValueError(f"{path} was exported from a model with {recorded} cameras (SIE), this model has {cameras} "
                         f"({either_key('NUM_CAMERAS')}): the file comes from another model; export this one "
                         "again with tools/export.py.")


def _runtime(runtime: str, model: Optional[nn.Module], input_size: Optional[Tuple[int, int]],
             exported: Optional[str] = None, weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """`exported` (or `model` exported now) opened in `runtime` on the CPU (``reid.export.runtimes.OnnxFile``),
    and checked against `model` where one is given."""
    require_runtime(runtime)  # before an export of the model, which takes a while
    if exported:
        opened = ExportedModel(exported, runtime)
    else:
        path, folder = _export_now(model, input_size, precision or "fp32")
        try:
            opened = ExportedModel(path, runtime)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    identity = opened.identity
    if model is not None:
        _check_size(opened.path, opened.input_size, input_size)
        _check_inputs(opened.path, opened.input_names, model, opened.num_cameras)
        identity = _check_weights(opened.path, model, opened.identity, weights) if exported else None
    recorded = _check_precision(exported, opened.precision, precision)
    if runtime == "openvino":  # compiles batch 1 now: a file OpenVINO cannot run fails here, not mid-gallery
        opened(np.zeros((1, 3, *opened.input_size), np.float32),
               torch.zeros(1, dtype=torch.int64) if opened.needs_camids else None)
    return ExportedRuntime(opened, exported, identity, recorded)


for _name in BACKEND_NAMES[1:]:  # every backend but torch runs the ONNX file in its runtime
    BACKEND_REGISTRY.register(_name)(functools.partial(_runtime, _name))


def file_backend(path: str, backend: Optional[str] = None) -> str:
    """The backend that runs the exported file `path`: `backend` when it can (a ValueError naming the
    ones that can otherwise), else the format's own (ONNX Runtime for ``.onnx``, torch for ``.pt2``)."""
    fmt = export_format(path)
    runtimes = FORMAT_RUNTIMES[fmt]
    name = str(backend or runtimes[0]).lower()
    if name not in runtimes:
        what = "an ONNX file" if fmt == "onnx" else "a .pt2 program"
        theirs = "a checkpoint's weights or a .pt2 program" if name == "torch" else "ONNX files"
        raise ValueError(f"{path} is {what}, which runs with {' or '.join(runtimes)} (--backend {name} runs {theirs}); "
                         f"choose {' or '.join(runtimes)}.")
    return name


def file_runtime(path: str, backend: Optional[str] = None, precision: Optional[str] = None) -> ExportedRuntime:
    """An exported file run on its own (no checkpoint to check it against): a ``.pt2`` program with
    torch, an ``.onnx`` file with ONNX Runtime or OpenVINO (`backend`)."""
    name = file_backend(path, backend)
    if precision is not None:
        precision = check_precision(precision)
    if name == "torch":
        opened = ExportedModel(path, "torch")
        return ExportedRuntime(opened, path, opened.identity, _check_precision(path, opened.precision, precision))
    return BACKEND_REGISTRY.get(name)(None, None, path, precision=precision)


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


__all__ = ["BACKEND_NAMES", "BACKEND_REGISTRY", "ExportedRuntime", "Runtime", "build_runtime", "file_backend",
           "file_runtime"]
