"""Exported model files: their formats, what they record, and running them (``load_exported``).

The files are written by :mod:`reid.export.writer` (``tools/export.py``): ``.pt2`` (a
``torch.export`` program, run with torch) and ``.onnx`` (run with onnxruntime), both taking raw
RGB pixels 0-255 ``[B, 3, H, W]`` (plus ``camids`` ``[B]`` for a model with SIE) and returning
L2-normalised features ``[B, D]``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from reid.utils.file_signatures import content_kind, read_head
from reid.utils.npz_files import json_object
from reid.utils.path_kinds import check_file

from .camera_ids import CamIds, check_camids
from .identity import recorded_identity

PathLike = Union[str, "os.PathLike[str]"]

EXTENSIONS: Dict[str, str] = {".pt2": "pt2", ".onnx": "onnx"}
TORCHSCRIPT_EXTENSIONS = (".ts", ".pt", ".torchscript", ".jit")
ONNX_EXTRA_HINT = "pip install onnx onnxscript onnxruntime (or pip install 'circle-reid[export]')"
METADATA_KEY = "circle_reid"  # ONNX metadata_props key / .pt2 extra file: what the model expects


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


def unreadable(path: str, error: BaseException, what: str = "ONNX model") -> ValueError:
    """A file a runtime cannot load, in one line naming it: what its first bytes say it is (an empty
    file, a JPEG image, a text file, ...), else the first line of the runtime's own message
    (onnxruntime's and torch's run to many lines of C++ or Python context)."""
    head = read_head(path)
    # ONNX models are binary data and .pt2 programs zip archives: only another kind is named by its bytes.
    archive = head is not None and head.startswith(b"PK") and what != "ONNX model"
    kind = content_kind(head, os.path.basename(path)) if head is not None and not archive else None
    if kind is not None and kind != "binary data":
        return ValueError(f"{path!r} is not a readable {what}: it is {kind}; give a file tools/export.py wrote, "
                          "or export it again.")
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)
    return ValueError(f"{path!r} is not a readable {what} ({first[:300]}); give a file tools/export.py wrote, "
                      "or export it again.")


def program_feature_dim(program: torch.export.ExportedProgram) -> int:
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


def recorded_cameras(text: Optional[str]) -> Optional[int]:
    """The camera count an exported file records (its ``circle_reid`` metadata text), or None when
    it records none (a model without SIE, or a file from before the count was written)."""
    value = (json_object(text, strings=False) or {}).get("num_cameras")  # absent or unreadable: none recorded
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class ExportedModel:
    """An exported model file, loaded once: ``model(images) -> [B, D]`` numpy features
    (``model(images, camids)`` for a model with SIE: :attr:`needs_camids`).

    `images` are RGB pixels 0-255, ``[B, 3, H, W]`` with H x W = :attr:`input_size` (the
    export size): a torch tensor or a numpy array, uint8 or float (converted to float32).
    Another size is refused with a ValueError that names both sizes. `camids` are the images'
    camera ids (integers ``0..num_cameras-1``, one per image), checked before they reach the
    graph; models without SIE ignore them. ``.pt2`` files run with torch, ``.onnx`` files
    with onnxruntime, both on the CPU. :attr:`identity` is the weights identity the file records
    (``weights_sha256``, ``weights_file``: :mod:`reid.export.identity`), None for a file
    exported before identities were written.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = os.fspath(path)
        self.format = export_format(self.path)
        check_file(self.path, "Exported model", "name a .onnx or .pt2 file written by tools/export.py.",
                   missing_hint="run tools/export.py first.")
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
            raise unreadable(self.path, e) from None
        inputs = session.get_inputs()
        self.input_size = (int(inputs[0].shape[2]), int(inputs[0].shape[3]))
        self.feature_dim = int(session.get_outputs()[0].shape[1])
        self.input_names = tuple(i.name for i in inputs)
        metadata = session.get_modelmeta().custom_metadata_map.get(METADATA_KEY)
        self.num_cameras = recorded_cameras(metadata)
        self.identity = self._identity(metadata)
        self._run = lambda *args: session.run(None, onnx_feeds(self.input_names, *args))[0]

    def _load_pt2(self) -> None:
        extra = {f"{METADATA_KEY}.json": ""}
        try:
            program = torch.export.load(self.path, extra_files=extra)
        except Exception as e:  # a truncated or foreign file fails deep inside the loader
            raise unreadable(self.path, e, ".pt2 program") from None
        self.input_names = tuple(program.graph_signature.user_inputs)
        name = self.input_names[0]
        shape = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name).meta["val"].shape
        self.input_size = (int(shape[2]), int(shape[3]))
        self.feature_dim = program_feature_dim(program)
        self.num_cameras = recorded_cameras(extra[f"{METADATA_KEY}.json"])
        self.identity = self._identity(extra[f"{METADATA_KEY}.json"])
        module = program.module()

        def run(*args: torch.Tensor) -> np.ndarray:
            with torch.no_grad():
                return module(*args).numpy()

        self._run = run

    def _identity(self, metadata: Optional[str]) -> Optional[Dict[str, str]]:
        try:
            return recorded_identity(metadata)
        except ValueError as e:
            raise ValueError(f"{self.path!r}: {e}.") from None

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

    @property
    def needs_camids(self) -> bool:
        """Whether the file takes camera ids (``camids``) beside the images: a model with SIE."""
        return len(self.input_names) > 1

    def __call__(self, images: ImageBatch, camids: Optional[CamIds] = None) -> np.ndarray:
        x = self.check_input(images)
        if not self.needs_camids:
            return self._run(x)
        return self._run(x, check_camids(camids, x.shape[0], self.num_cameras, self.path))


def onnx_feeds(names: Sequence[str], images: torch.Tensor, camids: Optional[torch.Tensor] = None) -> Dict[str, Any]:
    """The ONNX Runtime inputs of an exported file whose inputs are `names` (images[, camids])."""
    feeds = {names[0]: images.to(torch.float32).numpy()}
    if camids is not None:
        feeds[names[1]] = camids.numpy()
    return feeds


def load_exported(path: PathLike) -> ExportedModel:
    """Load an exported model file once; returns an :class:`ExportedModel` (``run(images) -> [B, D]``,
    ``run(images, camids)`` for a model with SIE).

    ``.onnx`` needs onnxruntime (an ImportError says how to install it); ``.pt2`` needs only torch.
    """
    return ExportedModel(path)


def run_exported(path: PathLike, images: ImageBatch, camids: Optional[CamIds] = None) -> np.ndarray:
    """Run an exported model file on RGB pixels ``[B, 3, H, W]`` (and camera ids ``[B]`` where it
    takes them); returns ``[B, D]`` numpy.

    `images` may be a torch tensor or a numpy array, uint8 or float (see :class:`ExportedModel`).
    """
    return load_exported(path)(images, camids)


__all__ = [
    "EXTENSIONS",
    "ExportedModel",
    "METADATA_KEY",
    "ONNX_EXTRA_HINT",
    "export_format",
    "load_exported",
    "onnx_feeds",
    "program_feature_dim",
    "recorded_cameras",
    "run_exported",
    "unreadable",
]
