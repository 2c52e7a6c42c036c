"""ONNX files run in ONNX Runtime or OpenVINO on the CPU: sessions, what a file records, static batches.

The export checks (:mod:`reid.export.precision_export`: batch parity and accuracy in every runtime
installed) and the extraction backends (:mod:`reid.inference.backends`) both open files here, so
a file is read, refused and run the same way wherever it is used.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch

from .clips import clip_file_refusal, is_clip_file
from .files import METADATA_KEY, ONNX_EXTRA_HINT, onnx_feeds, unreadable

Transform = Callable[[torch.Tensor], torch.Tensor]
# (pixels [B, 3, H, W] in the file's input convention, camera ids int64 [B] or None) -> features [B, D]
Runner = Callable[..., np.ndarray]


def installed_runtimes() -> List[str]:
    """The runtimes installed here that run ONNX files (ONNX Runtime always; OpenVINO where installed)."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return ["onnxruntime"]
    return ["onnxruntime", "openvino"]


_INSTALL_HINTS = {"onnxruntime": f"Running an ONNX model needs onnxruntime: {ONNX_EXTRA_HINT}.",
                  "openvino": "Running an ONNX model with OpenVINO needs it: pip install openvino (or use onnxruntime)."}


def require_runtime(runtime: str) -> None:
    """An ImportError saying what to install when `runtime`'s package is missing (checked before slow work)."""
    if runtime not in _INSTALL_HINTS:
        return
    try:
        __import__(runtime)
    except ImportError as e:
        raise ImportError(_INSTALL_HINTS[runtime]) from e


def _threads(threads: Optional[int]) -> int:
    return max(1, int(threads) if threads else torch.get_num_threads())


class OnnxFile:
    """An ONNX file opened in `runtime` ("onnxruntime" or "openvino") on the CPU, with `threads`
    (default: torch's thread count): its input names, input and output shapes, the ``circle_reid``
    record it carries (``metadata``, a JSON text or None) and ``run(pixels, camids=None) -> [B, D]``
    (pixels in the file's own input convention).

    A file the runtime cannot read is a one-line ValueError naming it (``exported.unreadable``).
    ONNX Runtime runs with every graph optimisation; OpenVINO at static batch sizes
    (:class:`OpenVINOBatches`).
    """

    def __init__(self, path: str, runtime: str = "onnxruntime", threads: Optional[int] = None) -> None:
        self.path, self.runtime = str(path), runtime
        require_runtime(runtime)
        if runtime == "onnxruntime":
            self._open_onnxruntime(_threads(threads))
        elif runtime == "openvino":
            self._open_openvino(_threads(threads))
        else:
            raise ValueError(f"Unknown ONNX runtime {runtime!r}; use onnxruntime or openvino.")

    def _open_onnxruntime(self, threads: int) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = threads
        options.log_severity_level = 3
        try:
            session = ort.InferenceSession(self.path, options, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime's own exception types, with the C++ context in the message
            raise unreadable(self.path, e) from None
        self.input_names = [i.name for i in session.get_inputs()]
        self.input_shape: Sequence[Any] = session.get_inputs()[0].shape
        self.output_shape: Sequence[Any] = session.get_outputs()[0].shape
        self.metadata: Optional[str] = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        names = self.input_names
        self.run = lambda x, camids=None: session.run(None, onnx_feeds(names, torch.as_tensor(x), camids))[0]

    def _open_openvino(self, threads: int) -> None:
        import openvino as ov

        core = ov.Core()
        try:
            graph = core.read_model(self.path)
        except Exception as e:  # OpenVINO's own exception types, with the C++ context in the message
            raise unreadable(self.path, e) from None
        # OpenVINO's ONNX reader keeps the file's metadata_props under "framework".
        key = ["framework", METADATA_KEY]
        self.metadata = graph.get_rt_info(key).astype(str) if graph.has_rt_info(key) else None
        self.input_names = [i.get_any_name() for i in graph.inputs]
        self.input_shape = list(graph.input(0).get_partial_shape())
        self.output_shape = list(graph.output(0).get_partial_shape())
        self.run = OpenVINOBatches(core, graph, threads)

    @property
    def clips(self) -> bool:
        """Whether the file takes clips ``[B, T, 3, H, W]`` (a video model's ``--clips`` file), not images."""
        return is_clip_file(self.metadata, len(list(self.input_shape)))

    @property
    def feature_dim(self) -> int:
        """D of the output ``[batch, D]``."""
        return int(str(list(self.output_shape)[1]))


def onnx_runner(path: str, runtime: str = "onnxruntime", to_input: Optional[Transform] = None) -> Runner:
    """``run(pixels float32 [B, 3, H, W] 0-255, camids or None) -> [B, D]`` of an ONNX file in `runtime`
    (CPU), with `to_input` applied to the pixels first (a tracker's input convention)."""
    opened = OnnxFile(path, runtime)
    if opened.clips:  # this runner feeds images
        raise ValueError(clip_file_refusal(path))
    convert = to_input or (lambda x: x)
    return lambda x, camids=None: opened.run(convert(torch.as_tensor(x)), camids)


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


__all__ = ["OnnxFile", "OpenVINOBatches", "Runner", "installed_runtimes", "onnx_runner", "require_runtime"]
