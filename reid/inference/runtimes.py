"""Inference backends for feature extraction: PyTorch, or the exported ONNX file run by
ONNX Runtime or OpenVINO (``Predictor(backend=...)``, ``tools/extract.py --backend``).

The non-PyTorch backends run the file ``tools/export.py`` writes (raw 0-255 pixels in,
L2-normalised features out; a model with SIE also takes each image's camera id, ``camids``):
a given ``exported`` file, or one exported into a temporary folder when the predictor is built. Trackers and CPU-only servers use them because a
compiled graph with fused operators is faster on CPUs than eager PyTorch; the features agree
with PyTorch fp32 to about 1e-6 (``benchmarks/bench_extract.py`` measures both).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from reid.utils.registry import Registry

from .camera_ids import model_cameras
from .export import ONNX_EXTRA_HINT, export_onnx, onnx_feeds
from .exported import METADATA_KEY, recorded_cameras

RUNTIMES = Registry("inference backend")
# (uint8/float pixels [B, 3, H, W], camera ids int64 [B] or None) -> features [B, D]; the caller
# checks the ids (reid.inference.camera_ids.check_camids) and gives them only to a model with SIE.
Runtime = Callable[[torch.Tensor, Optional[torch.Tensor]], np.ndarray]


def _onnx_file(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str]) -> Tuple[str, Optional[str]]:
    """The ONNX file to run, and a temporary folder to remove afterwards (None for a given file)."""
    if exported:
        if not os.path.isfile(exported):
            raise FileNotFoundError(f"Exported model {exported} does not exist; write it with tools/export.py.")
        return str(exported), None
    folder = tempfile.mkdtemp(prefix="reid_runtime_")
    return export_onnx(model, os.path.join(folder, "model.onnx"), input_size), folder


def _check_size(path: str, shape: Sequence[object], input_size: Tuple[int, int]) -> None:
    size = tuple(int(str(d)) for d in list(shape)[2:4])
    if size != tuple(input_size):
        raise ValueError(f"{path} was exported for {size[0]}x{size[1]} images, the model's config resizes to "
                         f"{input_size[0]}x{input_size[1]} (INPUT.SIZE_TEST); export it again at this size.")


def _check_inputs(path: str, names: Sequence[str], model: nn.Module, metadata: Optional[str]) -> None:
    """The file must take camera ids exactly when the model does (SIE), and as many cameras as it
    knows (`metadata`: the file's ``circle_reid`` record, which holds the count)."""
    cameras = model_cameras(model)
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


@RUNTIMES.register("onnxruntime")
def onnxruntime_runtime(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str] = None) -> Runtime:
    """ONNX Runtime on the CPU, all graph optimisations, torch's thread count."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError(f"--backend onnxruntime needs onnxruntime: {ONNX_EXTRA_HINT}.") from e
    path, folder = _onnx_file(model, input_size, exported)
    try:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = _threads()
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        _check_size(path, session.get_inputs()[0].shape, input_size)
        names = [i.name for i in session.get_inputs()]
        _check_inputs(path, names, model, session.get_modelmeta().custom_metadata_map.get(METADATA_KEY))
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return lambda x, camids=None: session.run(None, onnx_feeds(names, x, camids))[0]


@RUNTIMES.register("openvino")
def openvino_runtime(model: nn.Module, input_size: Tuple[int, int], exported: Optional[str] = None) -> Runtime:
    """OpenVINO on the CPU (reads the ONNX file directly), fp32, torch's thread count."""
    try:
        import openvino as ov
    except ImportError as e:
        raise ImportError("--backend openvino needs OpenVINO: pip install openvino (or use --backend onnxruntime).") from e
    path, folder = _onnx_file(model, input_size, exported)
    try:
        core = ov.Core()
        graph = core.read_model(path)
        # OpenVINO's ONNX reader keeps the file's metadata_props under "framework".
        key = ["framework", METADATA_KEY]
        metadata = graph.get_rt_info(key).astype(str) if graph.has_rt_info(key) else None
        # f32: on CPUs with bf16 units OpenVINO otherwise computes in bf16 (differences of ~1e-3).
        compiled = core.compile_model(graph, "CPU", {"INFERENCE_NUM_THREADS": _threads(),
                                                     "INFERENCE_PRECISION_HINT": "f32"})
        _check_size(path, compiled.input(0).get_partial_shape(), input_size)
        names = [i.get_any_name() for i in compiled.inputs]
        _check_inputs(path, names, model, metadata)
    finally:
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    request = compiled.create_infer_request()
    return lambda x, camids=None: np.asarray(request.infer(onnx_feeds(names, x, camids))[0])


def build_runtime(name: str, model: nn.Module, input_size: Sequence[int], exported: Optional[str] = None) -> Runtime:
    """A non-PyTorch backend for `model`; an unknown name lists the valid ones (torch included)."""
    if str(name).lower() not in RUNTIMES:
        raise ValueError(f"Unknown inference backend {name!r}. Valid names: torch, {', '.join(RUNTIMES.names())}.")
    # Checked before the backend's package is imported: a wrong file is the mistake to report first.
    if exported and not str(exported).lower().endswith(".onnx"):
        raise ValueError(f"--exported {exported} is not an .onnx file; these backends run ONNX "
                         "(write one with tools/export.py --output model.onnx).")
    return RUNTIMES.get(name)(model, (int(input_size[0]), int(input_size[1])), exported)


BACKEND_NAMES = ("torch",) + tuple(RUNTIMES.names())

__all__ = ["BACKEND_NAMES", "RUNTIMES", "Runtime", "build_runtime"]
