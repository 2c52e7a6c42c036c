"""Export a model for deployment (a torch.export program, ONNX) and check it against PyTorch.

The exported graph takes raw RGB pixels, float32 0-255, ``[B, 3, H, W]`` (B free, H and W
fixed to the size it was exported at) and returns L2-normalised features ``[B, D]``: the
pixel normalisation is inside the model and the L2 normalisation is added here, so a
deployment needs neither mean/std constants nor a post-processing step.

Both formats come from one ``torch.export`` program (the eval-mode graph, batch axis
declared dynamic):

* ``.pt2``: that program, saved with ``torch.export.save``; load it with
  ``torch.export.load(path).module()``. It needs only torch.
* ``.onnx``: the same program through ``torch.onnx.export(..., dynamo=True)`` (needs the
  ``onnx`` and ``onnxscript`` packages). MGN's stripe pooling (adaptive max pooling whose
  bins do not divide the rows) has no ONNX translation; it is decomposed first into one
  slice + max per bin, with PyTorch's bin bounds (see :func:`adaptive_max_pool2d_by_bins`).

TorchScript is not written: torch deprecates tracing and ``torch.jit.load`` warns on every
load; ``.pt2`` replaces it (see docs/inference.md).
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reid.utils.file_io import atomic_write


class ExportMismatchError(RuntimeError):
    """An exported model's outputs differ from the PyTorch model's by more than the tolerance."""


PathLike = Union[str, "os.PathLike[str]"]
INPUT_NAME = "images"
OUTPUT_NAME = "features"
BATCH_AXIS = "batch"
DEFAULT_OPSET = 18  # the lowest opset torch's torch.export-based ONNX exporter writes
CHECK_BATCH_SIZES = (1, 7)
EXTENSIONS: Dict[str, str] = {".pt2": "pt2", ".onnx": "onnx"}
TORCHSCRIPT_EXTENSIONS = (".ts", ".pt", ".torchscript", ".jit")
ONNX_EXTRA_HINT = "pip install onnx onnxscript onnxruntime (or pip install 'circle-reid[export]')"
METADATA_KEY = "circle_reid"  # ONNX metadata_props key / .pt2 extra file: what the model expects


class NormalizedFeatureModel(nn.Module):
    """Wrap a re-ID model: raw pixels ``[B, 3, H, W]`` (0-255) -> L2-normalised ``[B, D]``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.model(images), dim=1)


def _wrap(model: nn.Module) -> NormalizedFeatureModel:
    if getattr(model, "uses_camids", False):
        raise ValueError("This model uses camera ids (SIE, MODEL.TRANSREID.SIE_CAMERA) and exported models take "
                         "images only: export a model trained with SIE_CAMERA False, or extract features with "
                         "tools/extract.py from a list file of 'path pid camid' lines.")
    # Export always takes the CPU eval-mode graph: BatchNorm must use running statistics,
    # and a CPU graph runs anywhere. A copy, so that the caller's model keeps its device and
    # train/eval mode.
    return NormalizedFeatureModel(copy.deepcopy(model)).to("cpu").eval()


def _example_input(input_size: Sequence[int], batch: int, seed: int = 0) -> torch.Tensor:
    h, w = int(input_size[0]), int(input_size[1])
    gen = torch.Generator().manual_seed(seed)
    # Integer-valued pixels, as real images give.
    return torch.randint(0, 256, (batch, 3, h, w), generator=gen).float()


def _check_size(input_size: Sequence[int]) -> Tuple[int, int]:
    if len(input_size) != 2 or min(int(s) for s in input_size) < 16:
        raise ValueError(
            f"input_size must be [height, width] of at least 16 px each (INPUT.SIZE_TEST), got "
            f"{list(input_size)}."
        )
    return int(input_size[0]), int(input_size[1])


RAW_PIXELS = "RGB pixels 0-255 (no mean/std to apply)"


def _metadata(input_size: Tuple[int, int], feature_dim: int, pixels: str = RAW_PIXELS,
              extra: Optional[Dict[str, Any]] = None) -> str:
    h, w = input_size
    return json.dumps({
        "input": f"{INPUT_NAME}: float32 [batch, 3, {h}, {w}], {pixels}",
        "input_size": [h, w],
        "output": f"{OUTPUT_NAME}: float32 [batch, {feature_dim}], L2-normalised",
        **(extra or {}),
    })


def export_program(model: nn.Module, input_size: Sequence[int]) -> torch.export.ExportedProgram:
    """The ``torch.export`` program of `model` wrapped with L2 normalisation (CPU, eval mode).

    Input ``[batch, 3, H, W]`` with the batch axis dynamic and ``H, W = input_size``.
    """
    size = _check_size(input_size)
    example = _example_input(size, batch=2)
    # A size-2 example with a declared range: export must not specialise the batch to 2 (or 1).
    batch = torch.export.Dim(BATCH_AXIS, min=1)
    return torch.export.export(_wrap(model), (example,), dynamic_shapes=({0: batch},), strict=False)


def export_pt2(model: nn.Module, path: PathLike, input_size: Sequence[int],
               metadata: Optional[Dict[str, Any]] = None) -> str:
    """Save the :func:`export_program` of `model` to `path` (``.pt2``) atomically; returns `path`.

    Load it with ``torch.export.load(path).module()``, or :func:`load_exported`. `metadata`
    (JSON-able) joins what the file records about its input and output (e.g. the run's
    calibrated decision thresholds).
    """
    path = os.fspath(path)
    program = export_program(model, input_size)
    feature_dim = _feature_dim(program)
    extra = {f"{METADATA_KEY}.json": _metadata(_check_size(input_size), feature_dim, extra=metadata)}
    atomic_write(path, lambda f: torch.export.save(program, f, extra_files=extra))
    return path


def _bin_bounds(size: int, bins: int) -> List[Tuple[int, int]]:
    """(start, end) of each of `bins` adaptive-pooling bins over `size` positions (PyTorch's)."""
    return [((i * size) // bins, -(-((i + 1) * size) // bins)) for i in range(bins)]


def adaptive_max_pool2d_by_bins(x: torch.Tensor, output_size: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``aten.adaptive_max_pool2d`` as one slice + max per output cell (static H and W).

    Bin i of n over a size S spans ``floor(i*S/n)`` to ``ceil((i+1)*S/n)``, as in PyTorch,
    so neighbouring bins may share a row. Returns ``(values, indices)`` like the ATen op; the
    indices are zeros: the models never use them (the export check compares the values).
    """
    h, w = int(x.shape[-2]), int(x.shape[-1])
    rows = []
    for h0, h1 in _bin_bounds(h, int(output_size[0])):
        cells = [x[..., h0:h1, w0:w1].amax(dim=(-2, -1), keepdim=True)
                 for w0, w1 in _bin_bounds(w, int(output_size[1]))]
        rows.append(torch.cat(cells, dim=-1))
    values = torch.cat(rows, dim=-2)
    return values, torch.zeros(values.shape, dtype=torch.long, device=x.device)


def _require_onnx_exporter() -> None:
    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401  (torch's torch.export-based exporter is built on it)
    except ImportError as e:
        raise ImportError(f"ONNX export needs the onnx and onnxscript packages: {ONNX_EXTRA_HINT}.") from e


def _name_batch_axis(onnx_model, name: str = BATCH_AXIS) -> None:
    """Call the symbolic batch dimension `name` everywhere in the ONNX graph (torch names it s<N>)."""
    import onnx_ir as ir

    graph = onnx_model.graph
    first = graph.inputs[0].shape[0] if graph.inputs[0].shape is not None else None
    if not isinstance(first, ir.SymbolicDim) or first.value == name:
        return
    old = first.value
    values = list(graph.inputs) + [out for node in graph for out in node.outputs]
    for value in values:
        if value.shape is not None and any(isinstance(d, ir.SymbolicDim) and d.value == old for d in value.shape):
            value.shape = ir.Shape([name if isinstance(d, ir.SymbolicDim) and d.value == old else d
                                    for d in value.shape])


def export_onnx(model: nn.Module, path: PathLike, input_size: Sequence[int],
                opset: int = DEFAULT_OPSET, pixels: str = RAW_PIXELS, metadata: Optional[Dict[str, Any]] = None) -> str:
    """Export `model` (wrapped with L2 normalisation) to ONNX at `path`; returns `path`.

    Input ``images`` float32 ``[batch, 3, H, W]`` 0-255, output ``features`` float32
    ``[batch, D]``, batch axis dynamic. Uses ``torch.onnx.export(..., dynamo=True)``, which
    needs the ``onnx`` and ``onnxscript`` packages. `pixels` describes the input's pixel
    convention in the file's metadata (for models that take other inputs than raw pixels);
    `metadata` (JSON-able) joins it.
    """
    _require_onnx_exporter()
    if int(opset) < DEFAULT_OPSET:
        raise ValueError(f"ONNX opset {opset} is too old for torch's exporter; use --opset {DEFAULT_OPSET} or newer.")
    path = os.fspath(path)
    size = _check_size(input_size)
    program = export_program(model, size)
    feature_dim = _feature_dim(program)
    program = program.run_decompositions({torch.ops.aten.adaptive_max_pool2d.default: adaptive_max_pool2d_by_bins})
    onnx_program = torch.onnx.export(
        program,
        (_example_input(size, batch=2),),
        dynamo=True,
        input_names=[INPUT_NAME],
        output_names=[OUTPUT_NAME],
        opset_version=int(opset),
        verbose=False,
    )
    _name_batch_axis(onnx_program.model)
    onnx_program.model.metadata_props[METADATA_KEY] = _metadata(size, feature_dim, pixels, metadata)
    data = onnx_program.model_proto.SerializeToString()
    atomic_write(path, lambda f: f.write(data))
    return path


def _legacy_torchscript_error(path: str) -> ValueError:
    return ValueError(
        f"{path!r}: TorchScript (.ts/.pt) is no longer written or read (torch deprecates it); "
        f"export to .pt2 instead (a torch.export program: tools/export.py --output model.pt2)."
    )


def export_format(path: PathLike) -> str:
    """"pt2" or "onnx" from the file extension of `path`."""
    p = os.fspath(path)
    ext = os.path.splitext(p)[1].lower()
    if ext in EXTENSIONS:
        return EXTENSIONS[ext]
    if ext in TORCHSCRIPT_EXTENSIONS:
        raise _legacy_torchscript_error(p)
    raise ValueError(
        f"Cannot tell the export format of {p!r} from its extension; use .pt2 for a torch.export "
        "program or .onnx for ONNX."
    )


def export_model(model: nn.Module, path: PathLike, input_size: Sequence[int],
                 opset: int = DEFAULT_OPSET, metadata: Optional[Dict[str, Any]] = None) -> str:
    """Export to ``.pt2`` or ``.onnx``, chosen by the extension of `path` (see export_format);
    `metadata` joins what the file records (see :func:`export_pt2`)."""
    if export_format(path) == "onnx":
        return export_onnx(model, path, input_size, opset=opset, metadata=metadata)
    return export_pt2(model, path, input_size, metadata=metadata)


def _feature_dim(program: torch.export.ExportedProgram) -> int:
    """D of the program's output ``[batch, D]`` (the output node lists the user outputs)."""
    features = next(n for n in program.graph.nodes if n.op == "output").args[0][0]
    return int(features.meta["val"].shape[1])


ImageBatch = Union[torch.Tensor, np.ndarray]


def _as_pixel_batch(images: ImageBatch) -> torch.Tensor:
    """`images` (torch tensor or numpy array, uint8 or float) as a float32 CPU tensor ``[B, 3, H, W]``."""
    if isinstance(images, np.ndarray):
        if images.dtype == np.uint8 or np.issubdtype(images.dtype, np.floating):
            arr = np.ascontiguousarray(images, dtype=np.float32)
            if not arr.flags.writeable:  # torch.from_numpy warns about read-only arrays (np.load mmap)
                arr = arr.copy()
            images = torch.from_numpy(arr)
        else:
            raise TypeError(
                f"Exported model input is a numpy array of dtype {images.dtype}; pass uint8 or float "
                "pixels (0-255), shape [B, 3, H, W]."
            )
    elif not isinstance(images, torch.Tensor):
        raise TypeError(
            f"Exported model input must be a torch tensor or a numpy array [B, 3, H, W], got "
            f"{type(images).__name__}."
        )
    if images.ndim != 4 or images.shape[1] != 3:
        hint = ""
        if images.ndim == 4 and images.shape[-1] == 3:
            hint = " It looks like [B, H, W, 3] (channels last): transpose it with x.transpose(0, 3, 1, 2)."
        elif images.ndim == 3:
            hint = " For one image add a batch axis (x[None])."
        raise ValueError(
            f"Exported model input must have shape [B, 3, H, W] (RGB pixels 0-255), got "
            f"{tuple(images.shape)}.{hint}"
        )
    return images.detach().to("cpu", torch.float32).contiguous()


class ExportedModel:
    """An exported model file, loaded once: ``model(images) -> [B, D]`` numpy features.

    `images` are RGB pixels 0-255, ``[B, 3, H, W]`` with H x W = :attr:`input_size` (the
    export size): a torch tensor or a numpy array, uint8 or float (converted to float32).
    Another size is refused with a ValueError that names both sizes. ``.pt2`` files run with
    torch, ``.onnx`` files with onnxruntime, both on the CPU.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = os.fspath(path)
        self.format = export_format(self.path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"Exported model {self.path!r} does not exist; run tools/export.py first.")
        if self.format == "onnx":
            self._load_onnx()
        else:
            self._load_pt2()

    def _load_onnx(self) -> None:
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise ImportError(f"Running an ONNX model needs onnxruntime: {ONNX_EXTRA_HINT}.") from e
        try:
            session = ort.InferenceSession(self.path, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own exception types for unreadable files
            raise ValueError(f"{self.path!r} is not a readable ONNX model ({str(e).strip()}); export it again.") from e
        inp = session.get_inputs()[0]
        self.input_size = (int(inp.shape[2]), int(inp.shape[3]))
        self.feature_dim = int(session.get_outputs()[0].shape[1])
        self._input_name = inp.name
        self._run = lambda x: session.run(None, {self._input_name: x.numpy()})[0]

    def _load_pt2(self) -> None:
        try:
            program = torch.export.load(self.path)
        except Exception as e:  # a truncated or foreign file fails deep inside the loader
            raise ValueError(f"{self.path!r} is not a readable .pt2 program ({str(e).strip()}); export it again.") from e
        name = program.graph_signature.user_inputs[0]
        shape = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name).meta["val"].shape
        self.input_size = (int(shape[2]), int(shape[3]))
        self.feature_dim = _feature_dim(program)
        module = program.module()

        def run(x: torch.Tensor) -> np.ndarray:
            with torch.no_grad():
                return module(x).numpy()

        self._run = run

    def check_input(self, images: ImageBatch) -> torch.Tensor:
        """`images` as float32 ``[B, 3, H, W]``; a ValueError when H x W is not the export size."""
        x = _as_pixel_batch(images)
        h, w = int(x.shape[2]), int(x.shape[3])
        if (h, w) != self.input_size:
            eh, ew = self.input_size
            raise ValueError(
                f"{self.path} expects images of {eh}x{ew} (height x width, [B, 3, {eh}, {ew}]), got "
                f"{h}x{w}; resize the crops to {eh}x{ew}, or export again with --input-size {h} {w}."
            )
        return x

    def __call__(self, images: ImageBatch) -> np.ndarray:
        return self._run(self.check_input(images))


def load_exported(path: PathLike) -> ExportedModel:
    """Load an exported model file once; returns an :class:`ExportedModel` (``run(images) -> [B, D]``).

    ``.onnx`` needs onnxruntime (an ImportError says how to install it); ``.pt2`` needs only torch.
    """
    return ExportedModel(path)


def run_exported(path: PathLike, images: ImageBatch) -> np.ndarray:
    """Run an exported model file on RGB pixels ``[B, 3, H, W]``; returns ``[B, D]`` numpy.

    `images` may be a torch tensor or a numpy array, uint8 or float (see :class:`ExportedModel`).
    """
    return load_exported(path)(images)


@dataclass(frozen=True)
class ExportCheck:
    """How far an exported model's outputs are from the PyTorch model's on the same inputs."""

    path: str
    format: str
    batch_sizes: Tuple[int, ...]
    max_abs_diff: float

    def passed(self, tol: float = 1e-4) -> bool:
        """Whether the largest difference is within `tol` (features are unit vectors)."""
        return self.max_abs_diff <= tol

    def __str__(self) -> str:
        sizes = ", ".join(str(b) for b in self.batch_sizes)
        return (
            f"{self.format} {self.path}: max abs difference to PyTorch {self.max_abs_diff:.2e} "
            f"(random inputs, batch sizes {sizes})"
        )


def compare_with_export(model: nn.Module, path: PathLike, input_size: Sequence[int],
                        batch_sizes: Sequence[int] = CHECK_BATCH_SIZES, seed: int = 0) -> ExportCheck:
    """Feed the same random pixel batches to `model` (PyTorch, CPU) and to the exported file.

    Batch sizes other than the example's (2) check that the batch axis really is dynamic.
    """
    wrapped = _wrap(model)
    size = _check_size(input_size)
    run = load_exported(path)
    worst = 0.0
    for i, b in enumerate(batch_sizes):
        x = _example_input(size, batch=int(b), seed=seed + 1 + i)
        with torch.no_grad():
            expected = wrapped(x).numpy()
        got = run(x)
        if got.shape != expected.shape:
            raise ValueError(
                f"Exported model {os.fspath(path)!r} returned shape {got.shape} for a batch of {b}, "
                f"PyTorch {expected.shape}; re-export it from this model."
            )
        worst = max(worst, float(np.abs(got - expected).max()))
    return ExportCheck(os.fspath(path), export_format(path), tuple(int(b) for b in batch_sizes), worst)


__all__ = [
    "CHECK_BATCH_SIZES",
    "ExportCheck",
    "ExportMismatchError",
    "ExportedModel",
    "NormalizedFeatureModel",
    "adaptive_max_pool2d_by_bins",
    "compare_with_export",
    "export_format",
    "export_model",
    "export_onnx",
    "export_program",
    "export_pt2",
    "load_exported",
    "run_exported",
]
