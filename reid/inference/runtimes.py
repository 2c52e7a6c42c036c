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

from reid.modeling import camera_count
from reid.utils.npz_files import json_object
from reid.utils.path_kinds import check_file
from reid.utils.registry import Registry
from reid.utils.text_files import printable

from .export import ONNX_EXTRA_HINT, RAW_PIXELS, export_onnx, onnx_feeds
from .exported import METADATA_KEY, recorded_cameras, unreadable
from .identity import recorded_identity, short, weights_hash
from .precision import PRECISIONS, check_precision, convert_fp16

logger = logging.getLogger(__name__)

RUNTIMES = Registry("inference backend")
# (uint8/float pixels [B, 3, H, W], camera ids int64 [B] or None) -> features [B, D]; the caller
# checks the ids (reid.inference.camera_ids.check_camids) and gives them only to a model with SIE.
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


def _threads() -> int:
    return max(1, torch.get_num_threads())


def _check_file(path: str, names: Sequence[str], model: nn.Module, metadata: Optional[str], given: bool,
                weights: str) -> Optional[Dict[str, str]]:
    """Every check of a file against the model; returns the weights identity it records (a given file)."""
    _check_inputs(path, names, model, metadata)
    if not given:  # exported from this model a moment ago
        return None
    _check_pixels(path, metadata)
    return _check_weights(path, model, metadata, weights)


@RUNTIMES.register("onnxruntime")
def onnxruntime_runtime(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str] = None,
                        weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """ONNX Runtime on the CPU, all graph optimisations, torch's thread count."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError(f"--backend onnxruntime needs onnxruntime: {ONNX_EXTRA_HINT}.") from e
    path, folder = _onnx_file(model, input_size, exported, precision or "fp32")
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = _threads()
        try:
            session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's own exception types, with the C++ context in the message
            raise unreadable(path, e) from None
        _check_size(path, session.get_inputs()[0].shape, input_size)
        names = [i.name for i in session.get_inputs()]
        metadata = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        identity = _check_file(path, names, model, metadata, folder is None, weights)
        recorded = _check_precision(exported, metadata, precision)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return ExportedRuntime(lambda x, camids=None: session.run(None, onnx_feeds(names, x, camids))[0],
                           exported, identity, recorded)


@RUNTIMES.register("openvino")
def openvino_runtime(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str] = None,
                     weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """OpenVINO on the CPU (reads the ONNX file directly), the file's own precision (fp32 layers in
    fp32), torch's thread count."""
    try:
        import openvino as ov
    except ImportError as e:
        raise ImportError("--backend openvino needs OpenVINO: pip install openvino (or use --backend onnxruntime).") from e
    path, folder = _onnx_file(model, input_size, exported, precision or "fp32")
    try:
        core = ov.Core()
        try:
            graph = core.read_model(path)
        except Exception as e:  # OpenVINO's own exception types, with the C++ context in the message
            raise unreadable(path, e) from None
        # OpenVINO's ONNX reader keeps the file's metadata_props under "framework".
        key = ["framework", METADATA_KEY]
        metadata = graph.get_rt_info(key).astype(str) if graph.has_rt_info(key) else None
        _check_size(path, graph.input(0).get_partial_shape(), input_size)
        names = [i.get_any_name() for i in graph.inputs]
        identity = _check_file(path, names, model, metadata, folder is None, weights)
        recorded = _check_precision(exported, metadata, precision)
        runner = OpenVINOBatches(core, graph, _threads())
        runner(np.zeros((1, 3, *input_size), np.float32), torch.zeros(1, dtype=torch.int64) if len(names) > 1 else None)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return ExportedRuntime(runner, exported, identity, recorded)


class OpenVINOBatches:
    """An OpenVINO model run at static batch sizes: a batch of n images runs in the model compiled for
    the next power of two (n > 64: the next multiple of 64), zero-padded, and the padding's rows are
    dropped.

    OpenVINO runs int8 graphs about twice as fast with a static batch as with the free batch axis
    of the file (fp32 alike; docs/benchmarks.md), and every image is computed on its own, so padding
    changes no feature. Powers of two keep a tracker's varying crop counts to a few compilations.
    """

    MAX_BUCKET = 64

    def __init__(self, core, graph, threads: int) -> None:
        self.core, self.graph = core, graph
        # f32: on CPUs with bf16 units OpenVINO otherwise computes fp32 layers in bf16 (~1e-3); an
        # int8 or fp16 file keeps the arithmetic it records.
        self.config = {"INFERENCE_NUM_THREADS": int(threads), "INFERENCE_PRECISION_HINT": "f32"}
        self.names = [i.get_any_name() for i in graph.inputs]
        self._requests: Dict[int, object] = {}

    @classmethod
    def bucket(cls, n: int) -> int:
        """The batch size a batch of `n` images runs at."""
        n = int(n)
        return 1 << (n - 1).bit_length() if n <= cls.MAX_BUCKET else -(-n // cls.MAX_BUCKET) * cls.MAX_BUCKET

    def _request(self, batch: int):
        if batch not in self._requests:
            model = self.graph.clone()
            model.reshape({i.get_any_name(): [batch] + [d.get_length() for d in list(i.get_partial_shape())[1:]]
                           for i in model.inputs})
            self._requests[batch] = self.core.compile_model(model, "CPU", self.config).create_infer_request()
        return self._requests[batch]

    def __call__(self, images, camids=None) -> np.ndarray:
        x = torch.as_tensor(images).to(torch.float32)
        n = int(x.shape[0])
        b = self.bucket(n)
        if b != n:
            x = torch.cat([x, x.new_zeros((b - n, *x.shape[1:]))])
            if camids is not None:
                camids = torch.cat([camids, camids.new_zeros(b - n)])
        out = self._request(b).infer(onnx_feeds(self.names, x, camids))[0]
        return np.array(out[:n])  # a copy: the request reuses its output buffer


def build_runtime(name: str, model: nn.Module, input_size: Sequence[int], exported: Optional[str] = None,
                  weights: str = "", precision: Optional[str] = None) -> ExportedRuntime:
    """A non-PyTorch backend for `model`; an unknown name lists the valid ones (torch included).

    A given `exported` file must hold `model`'s weights (the identity it records, see
    :mod:`reid.inference.identity`; `weights` names the model's weights file in messages), take
    raw pixels, and match the model's input size and camera ids. `precision` (fp32, fp16, int8;
    None: what the file records) must be the given file's; without a file the model is exported at
    it now, which int8 cannot be (its calibration crops come with tools/export.py).
    """
    if str(name).lower() not in RUNTIMES:
        raise ValueError(f"Unknown inference backend {name!r}. Valid names: torch, {', '.join(RUNTIMES.names())}.")
    # Checked before the backend's package is imported: a wrong file is the mistake to report first.
    if exported and not str(exported).lower().endswith(".onnx"):
        raise ValueError(f"--exported {exported} is not an .onnx file; these backends run ONNX "
                         "(write one with tools/export.py --output model.onnx).")
    if precision is not None:
        precision = check_precision(precision)
        if precision == "int8" and not exported:
            raise ValueError("int8 needs calibration crops: write the file with tools/export.py --precision int8 "
                             "--calibration CROPS and pass it with --exported.")
    return RUNTIMES.get(name)(model, (int(input_size[0]), int(input_size[1])), exported, weights=weights,
                              precision=precision)


BACKEND_NAMES = ("torch",) + tuple(RUNTIMES.names())

__all__ = ["BACKEND_NAMES", "RUNTIMES", "ExportedRuntime", "Runtime", "build_runtime"]
