"""Export a model for deployment (a torch.export program, ONNX) and check it against PyTorch.

The exported graph takes raw RGB pixels, float32 0-255, ``[B, 3, H, W]`` (B free, H and W
fixed to the size it was exported at) and returns L2-normalised features ``[B, D]``: the
pixel normalisation is inside the model and the L2 normalisation is added here, so a
deployment needs neither mean/std constants nor a post-processing step. A model with SIE
(camera embedding) gets a second input, ``camids``: int64 ``[B]``, each image's camera id, on
the same free batch axis (see :mod:`reid.export.camera_ids`); other models keep one input. With
``clips=True`` a video model takes clips ``[B, T, 3, H, W]`` instead, T free too, and returns one
feature per clip (:mod:`reid.export.clips`).

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

from reid.config import value_range
from reid.modeling import camera_count
from reid.utils.file_io import atomic_write

from .camera_ids import CAMIDS_NAME
from .clips import CLIP_CHECK_SHAPES, CLIP_EXAMPLE, FRAMES_AXIS, clip_record, example_clips, wrap_clips
from .exported import load_exported
from .files import METADATA_KEY, ONNX_EXTRA_HINT, export_format, program_feature_dim
from .identity import weights_identity
from .options import DEFAULT_OPSET, MIN_SIDE
from .pixels import RAW_PIXELS


class ExportMismatchError(RuntimeError):
    """An exported model's outputs differ from the PyTorch model's by more than the tolerance."""


PathLike = Union[str, "os.PathLike[str]"]
INPUT_NAME = "images"
OUTPUT_NAME = "features"
BATCH_AXIS = "batch"
CHECK_BATCH_SIZES = (1, 7, 32)  # 32: a full batch, where exports with a wrong batch axis go wrong
MAX_BATCH = 2**31 - 1  # the batch axis' upper bound where torch needs one (torch 2.6, see export_program)


class NormalizedFeatureModel(nn.Module):
    """Wrap a re-ID model: raw pixels ``[B, 3, H, W]`` (0-255) -> L2-normalised ``[B, D]``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.model(images), dim=1)


class CameraFeatureModel(NormalizedFeatureModel):
    """The same for a model with SIE: ``(images [B, 3, H, W], camids int64 [B]) -> [B, D]``."""

    def forward(self, images: torch.Tensor, camids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.normalize(self.model(images, camids=camids), dim=1)


def _wrap(model: nn.Module) -> NormalizedFeatureModel:
    wrapper = CameraFeatureModel if camera_count(model) else NormalizedFeatureModel
    # Export always takes the CPU eval-mode graph: BatchNorm must use running statistics,
    # and a CPU graph runs anywhere. A copy, so that the caller's model keeps its device and
    # train/eval mode.
    return wrapper(copy.deepcopy(model)).to("cpu").eval()


def _example_inputs(input_size: Sequence[int], batch: int, cameras: int = 0,
                    seed: int = 0) -> Tuple[torch.Tensor, ...]:
    """Random inputs of a batch: pixels, and camera ids ``0..cameras-1`` for a model with SIE."""
    h, w = int(input_size[0]), int(input_size[1])
    gen = torch.Generator().manual_seed(seed)
    # Integer-valued pixels, as real images give.
    pixels = torch.randint(0, 256, (batch, 3, h, w), generator=gen).float()
    return (pixels, torch.randint(0, cameras, (batch,), generator=gen)) if cameras else (pixels,)




def check_input_size(input_size: Sequence[int]) -> Tuple[int, int]:
    """`input_size` as ``(height, width)``: each side from 16 px to the largest side a config may
    ask for (``INPUT.SIZE_TEST``'s bound, ``reid.config.value_range``); a ValueError otherwise."""
    high = value_range("INPUT.SIZE_TEST")[1]
    if len(input_size) != 2 or not all(MIN_SIDE <= int(s) <= high for s in input_size):
        raise ValueError(
            f"input_size must be [height, width] of {MIN_SIDE} to {high} px each (the bounds of INPUT.SIZE_TEST), "
            f"got {list(input_size)}."
        )
    return int(input_size[0]), int(input_size[1])






def _input_names(cameras: int) -> List[str]:
    return [INPUT_NAME, CAMIDS_NAME] if cameras else [INPUT_NAME]


def _metadata(input_size: Tuple[int, int], feature_dim: int, pixels: str = RAW_PIXELS,
              extra: Optional[Dict[str, Any]] = None, cameras: int = 0, clips: Optional[nn.Module] = None) -> str:
    """The file's ``circle_reid`` record; `clips`: the video model of a clip file (its record says so)."""
    h, w = input_size
    record: Dict[str, Any] = {"input": f"{INPUT_NAME}: float32 [batch, 3, {h}, {w}], {pixels}"}
    if clips is not None:
        record.update(clip_record(clips, input_size, pixels))
    if cameras:  # models without SIE keep the record they always had
        record.update({"camids": f"{CAMIDS_NAME}: int64 [batch], each image's camera id 0..{cameras - 1} (SIE)",
                       "input_names": _input_names(cameras), "num_cameras": cameras})
    record.update({"input_size": [h, w], "output": f"{OUTPUT_NAME}: float32 [batch, {feature_dim}], L2-normalised"})
    return json.dumps({**record, **(extra or {})})


def _with_identity(model: nn.Module, metadata: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """`metadata` with the identity of `model`'s weights (``weights_sha256``) unless it holds one
    already (a tracker export records its inner re-ID model's, not the wrapper's)."""
    metadata = dict(metadata or {})
    if "weights_sha256" not in metadata:
        metadata.update(weights_identity(model))
    return metadata


def _example(size: Tuple[int, int], cameras: int, clips: bool) -> Tuple[torch.Tensor, ...]:
    """The export example: a batch of 2 images, or of 2 clips of 3 frames."""
    return example_clips(size, *CLIP_EXAMPLE, cameras=cameras) if clips else _example_inputs(size, 2, cameras)


def export_program(model: nn.Module, input_size: Sequence[int], clips: bool = False) -> torch.export.ExportedProgram:
    """The ``torch.export`` program of `model` wrapped with L2 normalisation (CPU, eval mode).

    Input ``[batch, 3, H, W]`` with the batch axis dynamic and ``H, W = input_size``; a model
    with SIE also takes ``camids`` ``[batch]`` on the same axis. `clips`: a video model's clips
    ``[batch, frames, 3, H, W]``, both axes dynamic, one feature per clip (:mod:`reid.export.clips`).
    """
    from torch._dynamo.exc import UserError, UserErrorType

    size = check_input_size(input_size)
    wrapped = wrap_clips(model) if clips else _wrap(model)
    example = _example(size, camera_count(model), clips)

    def export(**bounds: int) -> torch.export.ExportedProgram:
        # A size-2 example with a declared range: export must not specialise the batch to 2 (or 1).
        batch = torch.export.Dim(BATCH_AXIS, min=1, **bounds)
        shapes = [{0: batch} for _ in example]
        if clips:  # the frames axis likewise (an example of 3 frames)
            shapes[0] = {0: batch, 1: torch.export.Dim(FRAMES_AXIS, min=1, **bounds)}
        return torch.export.export(wrapped, example, dynamic_shapes=tuple(shapes), strict=False)

    try:
        return export()
    except UserError as e:
        # torch 2.6 guards token slices (ViTs) against the open axis' end value and then finds
        # that guard violated (pytorch/pytorch#146315); an upper bound avoids it. Newer torch
        # exports the open axis, and the file is the same as ever.
        if e.error_type != UserErrorType.CONSTRAINT_VIOLATION:
            raise
        return export(max=MAX_BATCH)


def export_pt2(model: nn.Module, path: PathLike, input_size: Sequence[int],
               metadata: Optional[Dict[str, Any]] = None, clips: bool = False) -> str:
    """Save the :func:`export_program` of `model` to `path` (``.pt2``) atomically; returns `path`.

    Load it with ``torch.export.load(path).module()``, or :func:`load_exported`. `metadata`
    (JSON-able) joins what the file records about its input and output (e.g. the run's
    calibrated decision thresholds); the file also records the identity of `model`'s weights
    (``weights_sha256``, :mod:`reid.export.identity`) unless `metadata` gives it. `clips`: a video
    model's clip program (see :func:`export_program`).
    """
    path = os.fspath(path)
    program = export_program(model, input_size, clips=clips)
    feature_dim = program_feature_dim(program)
    extra = {f"{METADATA_KEY}.json": _metadata(check_input_size(input_size), feature_dim,
                                               extra=_with_identity(model, metadata), cameras=camera_count(model),
                                               clips=model if clips else None)}
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


def check_opset(opset: int) -> int:
    """`opset` as an int, if torch's exporter can write it: from :data:`DEFAULT_OPSET` (the oldest
    it writes) to the newest the installed onnx knows (asked for a newer one, the exporter quietly
    writes another); a ValueError otherwise. Needs the onnx and onnxscript packages."""
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch's torch.export-based exporter is built on it)
    except ImportError as e:
        raise ImportError(f"ONNX export needs the onnx and onnxscript packages: {ONNX_EXTRA_HINT}.") from e
    newest = int(onnx.defs.onnx_opset_version())
    if isinstance(opset, bool) or not DEFAULT_OPSET <= int(opset) <= newest:
        raise ValueError(f"ONNX opset {opset} cannot be written: torch's exporter writes opsets {DEFAULT_OPSET} to "
                         f"{newest} (the newest the installed onnx {onnx.__version__} knows); use --opset in that range.")
    return int(opset)


def _name_batch_axis(onnx_model, name: str = BATCH_AXIS, axis: int = 0) -> None:
    """Call the symbolic dimension `axis` of the first input (the batch) `name` everywhere in the ONNX
    graph (torch names it s<N>)."""
    import onnx_ir as ir

    graph = onnx_model.graph
    first = graph.inputs[0].shape[axis] if graph.inputs[0].shape is not None else None
    if not isinstance(first, ir.SymbolicDim) or first.value == name:
        return
    old = first.value
    values = list(graph.inputs) + [out for node in graph for out in node.outputs]
    for value in values:
        if value.shape is not None and any(isinstance(d, ir.SymbolicDim) and d.value == old for d in value.shape):
            value.shape = ir.Shape([name if isinstance(d, ir.SymbolicDim) and d.value == old else d
                                    for d in value.shape])


def export_onnx(model: nn.Module, path: PathLike, input_size: Sequence[int], opset: int = DEFAULT_OPSET,
                pixels: str = RAW_PIXELS, metadata: Optional[Dict[str, Any]] = None, clips: bool = False) -> str:
    """Export `model` (wrapped with L2 normalisation) to ONNX at `path`; returns `path`.

    Input ``images`` float32 ``[batch, 3, H, W]`` 0-255 (and ``camids`` int64 ``[batch]`` for a
    model with SIE), output ``features`` float32 ``[batch, D]``, batch axis dynamic. Uses ``torch.onnx.export(..., dynamo=True)``, which
    needs the ``onnx`` and ``onnxscript`` packages. `pixels` describes the input's pixel
    convention in the file's metadata (for models that take other inputs than raw pixels);
    `metadata` (JSON-able) joins it. `clips`: a video model's clips ``images [batch, frames, 3, H, W]``
    (axes named so), one feature per clip (:mod:`reid.export.clips`).
    """
    opset = check_opset(opset)
    path = os.fspath(path)
    size = check_input_size(input_size)
    cameras = camera_count(model)
    program = export_program(model, size, clips=clips)
    feature_dim = program_feature_dim(program)
    program = program.run_decompositions({torch.ops.aten.adaptive_max_pool2d.default: adaptive_max_pool2d_by_bins})
    onnx_program = torch.onnx.export(
        program,
        _example(size, cameras, clips),
        dynamo=True,
        input_names=_input_names(cameras),
        output_names=[OUTPUT_NAME],
        opset_version=int(opset),
        verbose=False,
    )
    _name_batch_axis(onnx_program.model)
    if clips:
        _name_batch_axis(onnx_program.model, FRAMES_AXIS, axis=1)
    onnx_program.model.metadata_props[METADATA_KEY] = _metadata(size, feature_dim, pixels, _with_identity(model, metadata),
                                                                cameras, clips=model if clips else None)
    data = onnx_program.model_proto.SerializeToString()
    atomic_write(path, lambda f: f.write(data))
    return path


def export_model(model: nn.Module, path: PathLike, input_size: Sequence[int],
                 opset: int = DEFAULT_OPSET, metadata: Optional[Dict[str, Any]] = None, clips: bool = False) -> str:
    """Export to ``.pt2`` or ``.onnx``, chosen by the extension of `path` (see export_format);
    `metadata` joins what the file records (see :func:`export_pt2`); `clips`: a video model's clip file."""
    if export_format(path) == "onnx":
        return export_onnx(model, path, input_size, opset=opset, metadata=metadata, clips=clips)
    return export_pt2(model, path, input_size, metadata=metadata, clips=clips)




@dataclass(frozen=True)
class ExportCheck:
    """How far an exported model's outputs are from the PyTorch model's on the same inputs."""

    path: str
    format: str
    batch_sizes: Tuple[int, ...]
    max_abs_diff: float
    camids: bool = False  # whether the inputs included camera ids (a model with SIE)
    frames: Tuple[int, ...] = ()  # a clip file's: the frames of each check's clips (batch_sizes: how many clips)

    def passed(self, tol: float = 1e-4) -> bool:
        """Whether the largest difference is within `tol` (features are unit vectors)."""
        return self.max_abs_diff <= tol

    def __str__(self) -> str:
        sizes = ", ".join(str(b) for b in self.batch_sizes)
        inputs = "random inputs and camera ids" if self.camids else "random inputs"
        if self.frames:
            sizes = ", ".join(f"{b}x{t}" for b, t in zip(self.batch_sizes, self.frames))
            inputs = inputs.replace("inputs", "clips")
            return (f"{self.format} {self.path}: max abs difference to PyTorch {self.max_abs_diff:.2e} "
                    f"({inputs}, clips x frames {sizes})")
        return (f"{self.format} {self.path}: max abs difference to PyTorch {self.max_abs_diff:.2e} "
                f"({inputs}, batch sizes {sizes})")


def compare_with_export(model: nn.Module, path: PathLike, input_size: Sequence[int],
                        batch_sizes: Optional[Sequence[int]] = None, seed: int = 0, clips: bool = False,
                        clip_shapes: Sequence[Tuple[int, int]] = CLIP_CHECK_SHAPES) -> ExportCheck:
    """Feed the same random pixel batches (and, for a model with SIE, random valid camera ids)
    to `model` (PyTorch, CPU) and to the exported file (which converts raw pixels to its own input
    convention: a tracker's file is checked end to end).

    Batch sizes other than the example's (2) check that the batch axis really is dynamic
    (default :data:`CHECK_BATCH_SIZES`). `clips`: `path` is a clip file, fed random clips of
    `clip_shapes` (clips, frames) as ``model(clips)`` is (several frame counts: the frames axis too).
    """
    wrapped = wrap_clips(model, reference=True) if clips else _wrap(model)
    size = check_input_size(input_size)
    cameras = camera_count(model)
    run = load_exported(path, clips=clips)
    shapes = [(int(b), int(t)) for b, t in clip_shapes] if clips else \
        [(int(b), 0) for b in (CHECK_BATCH_SIZES if batch_sizes is None else batch_sizes)]
    worst = 0.0
    for i, (b, t) in enumerate(shapes):
        inputs = example_clips(size, b, t, cameras, seed + 1 + i) if clips else \
            _example_inputs(size, batch=b, cameras=cameras, seed=seed + 1 + i)
        with torch.no_grad():
            expected = wrapped(*inputs).numpy()
        got = run(*inputs)
        if got.shape != expected.shape:
            what = f"{b} clips of {t} frames" if clips else f"a batch of {b}"
            raise ValueError(
                f"Exported model {os.fspath(path)!r} returned shape {got.shape} for {what}, "
                f"PyTorch {expected.shape}; re-export it from this model."
            )
        worst = max(worst, float(np.abs(got - expected).max()))
    return ExportCheck(os.fspath(path), export_format(path), tuple(b for b, _ in shapes), worst, bool(cameras),
                       tuple(t for _, t in shapes) if clips else ())


__all__ = [
    "CHECK_BATCH_SIZES",
    "CameraFeatureModel",
    "ExportCheck",
    "ExportMismatchError",
    "NormalizedFeatureModel",
    "adaptive_max_pool2d_by_bins",
    "check_input_size",
    "check_opset",
    "compare_with_export",
    "export_model",
    "export_onnx",
    "export_program",
    "export_pt2",
]
