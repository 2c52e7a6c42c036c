"""Export a model for deployment (TorchScript, ONNX) and check the export against PyTorch.

The exported graph takes raw RGB pixels, float32 0-255, ``[B, 3, H, W]`` (B free, H and W
fixed to the size it was exported at) and returns L2-normalised features ``[B, D]``: the
pixel normalisation is inside the model and the L2 normalisation is added here, so a
deployment needs neither mean/std constants nor a post-processing step.

TorchScript export uses tracing: the eval-mode forward has no data-dependent control flow,
and scripting would have to understand every Python construct of the training code.
ONNX export uses torch's TorchScript-based exporter (``dynamo=False``), which needs only the
``onnx`` package; the newer exporter would add ``onnxscript`` as a further dependency.
"""
from __future__ import annotations

import contextlib
import copy
import io
import os
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reid.utils.file_io import atomic_write

from .onnx_ops import adaptive_pool_symbolic


class ExportMismatchError(RuntimeError):
    """An exported model's outputs differ from the PyTorch model's by more than the tolerance."""


PathLike = Union[str, "os.PathLike[str]"]
INPUT_NAME = "images"
OUTPUT_NAME = "features"
DEFAULT_OPSET = 17
TORCHSCRIPT_EXTENSIONS = (".pt", ".ts", ".torchscript", ".jit")
ONNX_EXTENSIONS = (".onnx",)
EXPORT_EXTRA_HINT = "pip install onnx onnxruntime (or pip install 'circle-reid[export]')"


class NormalizedFeatureModel(nn.Module):
    """Wrap a re-ID model: raw pixels ``[B, 3, H, W]`` (0-255) -> L2-normalised ``[B, D]``."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.model(images), dim=1)


def _wrap(model: nn.Module) -> NormalizedFeatureModel:
    # Export always traces the CPU eval-mode graph: BatchNorm must use running statistics,
    # and a CPU graph runs anywhere (TorchScript modules can be moved to CUDA after loading).
    # A copy, so that the caller's model keeps its device and train/eval mode.
    return NormalizedFeatureModel(copy.deepcopy(model)).to("cpu").eval()


@contextlib.contextmanager
def _quiet_export_warnings() -> Iterator[None]:
    """Silence the warnings every export prints but that say nothing about this model.

    torch marks tracing and the TorchScript-based ONNX exporter as deprecated (see the module
    docstring for why they are used), and the tracer warns that the model's input-shape
    check becomes a constant, which is intended: the exported graph fixes C, H and W.
    compare_with_export is the real check that the export is faithful.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=r".*legacy TorchScript-based ONNX")
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        yield


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


def export_torchscript(model: nn.Module, path: PathLike, input_size: Sequence[int]) -> str:
    """Trace `model` (wrapped with L2 normalisation) and save TorchScript to `path` atomically.

    The batch size stays free; `input_size` is ``[height, width]`` (normally INPUT.SIZE_TEST).
    Load it with ``torch.jit.load(path)``. Returns `path`.
    """
    path = os.fspath(path)
    wrapped = _wrap(model)
    example = _example_input(_check_size(input_size), batch=2)
    with torch.no_grad(), _quiet_export_warnings():
        # check_trace re-runs the model only to compare; compare_with_export does that properly.
        traced = torch.jit.trace(wrapped, example, check_trace=False)
        atomic_write(path, lambda f: torch.jit.save(traced, f))
    return path


def export_onnx(model: nn.Module, path: PathLike, input_size: Sequence[int],
                opset: int = DEFAULT_OPSET) -> str:
    """Export `model` (wrapped with L2 normalisation) to ONNX at `path`, batch axis dynamic.

    Input ``images`` float32 ``[batch, 3, H, W]`` 0-255, output ``features`` float32
    ``[batch, D]``. Needs the ``onnx`` package. Returns `path`.
    """
    try:
        import onnx  # noqa: F401  (torch's exporter needs it to write the file)
    except ImportError as e:
        raise ImportError(f"ONNX export needs the onnx package: {EXPORT_EXTRA_HINT}.") from e
    path = os.fspath(path)
    wrapped = _wrap(model)
    example = _example_input(_check_size(input_size), batch=2)
    buf = io.BytesIO()
    with torch.no_grad(), _quiet_export_warnings(), adaptive_pool_symbolic(int(opset)):
        torch.onnx.export(
            wrapped,
            (example,),
            buf,
            dynamo=False,
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=int(opset),
            do_constant_folding=True,
        )
    data = buf.getvalue()
    atomic_write(path, lambda f: f.write(data))
    return path


def export_format(path: PathLike) -> str:
    """"onnx" or "torchscript" from the file extension of `path`."""
    low = os.fspath(path).lower()
    if low.endswith(ONNX_EXTENSIONS):
        return "onnx"
    if low.endswith(TORCHSCRIPT_EXTENSIONS):
        return "torchscript"
    raise ValueError(
        f"Cannot tell the export format of {os.fspath(path)!r} from its extension; use .onnx "
        f"for ONNX or one of {', '.join(TORCHSCRIPT_EXTENSIONS)} for TorchScript."
    )


def export_model(model: nn.Module, path: PathLike, input_size: Sequence[int],
                 opset: int = DEFAULT_OPSET) -> str:
    """Export to ONNX or TorchScript, chosen by the extension of `path` (see export_format)."""
    if export_format(path) == "onnx":
        return export_onnx(model, path, input_size, opset=opset)
    return export_torchscript(model, path, input_size)


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


def load_exported(path: PathLike) -> Callable[[ImageBatch], np.ndarray]:
    """Load an exported model file once; returns ``run(images) -> [B, D] numpy``.

    `images` are RGB pixels 0-255, ``[B, 3, H, W]``: a torch tensor or a numpy array, uint8
    or float (converted to float32). ONNX files run with onnxruntime on the CPU (an
    ImportError says how to install it); TorchScript files with torch on the CPU.
    """
    path = os.fspath(path)
    fmt = export_format(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Exported model {path!r} does not exist; run tools/export.py first.")
    if fmt == "onnx":
        try:
            import onnxruntime as ort
        except ImportError as e:
            raise ImportError(f"Running an ONNX model needs onnxruntime: {EXPORT_EXTRA_HINT}.") from e
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

        def run_onnx(images: ImageBatch) -> np.ndarray:
            x = _as_pixel_batch(images).numpy()
            return session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]

        return run_onnx
    with _quiet_export_warnings():
        module = torch.jit.load(path, map_location="cpu")

    def run_torchscript(images: ImageBatch) -> np.ndarray:
        with torch.no_grad():
            return module(_as_pixel_batch(images)).numpy()

    return run_torchscript


def run_exported(path: PathLike, images: ImageBatch) -> np.ndarray:
    """Run an exported model file on RGB pixels ``[B, 3, H, W]``; returns ``[B, D]`` numpy.

    `images` may be a torch tensor or a numpy array, uint8 or float (see :func:`load_exported`).
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
                        batch_sizes: Sequence[int] = (1, 3), seed: int = 0) -> ExportCheck:
    """Feed the same random pixel batches to `model` (PyTorch, CPU) and to the exported file.

    Batch sizes other than the traced one (2) check that the batch axis really is dynamic.
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
    "ExportCheck",
    "ExportMismatchError",
    "NormalizedFeatureModel",
    "compare_with_export",
    "export_format",
    "export_model",
    "export_onnx",
    "export_torchscript",
    "load_exported",
    "run_exported",
]
