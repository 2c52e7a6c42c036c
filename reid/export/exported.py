"""Running an exported model file (``load_exported``): a ``.pt2`` program with torch, an ``.onnx``
file with ONNX Runtime or OpenVINO, raw RGB pixels 0-255 in, L2-normalised features out, whatever
input convention the file records (a tracker's file gets its crops converted).

What a file is and records: :mod:`reid.export.files`; the runtimes' sessions: :mod:`reid.export.runtimes`.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from reid.utils.path_kinds import check_file

from .camera_ids import CamIds, check_camids
from .clips import as_clip_batch, clip_file_refusal, image_file_refusal, is_clip_file
from .files import (
    METADATA_KEY,
    export_format,
    file_record,
    program_feature_dim,
    recorded_cameras,
    recorded_precision,
    unreadable,
)
from .identity import recorded_identity
from .pixels import from_raw_pixels, input_convention
from .runtimes import OnnxFile

logger = logging.getLogger(__name__)
PathLike = Union[str, "os.PathLike[str]"]
ImageBatch = Union[torch.Tensor, np.ndarray]
#: The runtimes that run each format.
FORMAT_RUNTIMES: Dict[str, Sequence[str]] = {"onnx": ("onnxruntime", "openvino"), "pt2": ("torch",)}


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
    """An exported model file, loaded once: ``model(images) -> [B, D]`` numpy features
    (``model(images, camids)`` for a model with SIE: :attr:`needs_camids`).

    `images` are RGB pixels 0-255, ``[B, 3, H, W]`` with H x W = :attr:`input_size` (the
    export size): a torch tensor or a numpy array, uint8 or float (converted to float32).
    Another size is refused with a ValueError that names both sizes. A file written in a tracker's
    input convention (``--for boxmot``) gets the pixels converted first (:attr:`convention`); a
    file that records none (another exporter's) gets them as they are, with a note when loaded.
    `camids` are the images' camera ids (integers ``0..num_cameras-1``, one per image), checked
    before they reach the graph; models without SIE ignore them. A file whose batch axis is fixed
    runs the images in batches of that size. `runtime`: ``.pt2`` files run with "torch", ``.onnx``
    files with "onnxruntime" (default) or "openvino", on the CPU.

    :attr:`identity` is the weights identity the file records (``weights_sha256``, ``weights_file``:
    :mod:`reid.export.identity`), None for a file that records none; :attr:`precision` the
    arithmetic it records; :attr:`record` its whole ``circle_reid`` record ({} for none).

    A clip file (a video model exported with ``--clips``: :mod:`reid.export.clips`) takes clips
    ``[B, T, 3, H, W]`` and returns one feature per clip; it opens only with ``clips=True`` (or None:
    whichever the file takes; :attr:`clips` says which). With the default ``clips=False`` it is refused
    in one line naming it, so that no caller feeding images runs it; ``clips=True`` refuses an image file.
    """

    def __init__(self, path: PathLike, runtime: Optional[str] = None, clips: Optional[bool] = False) -> None:
        self.path = os.fspath(path)
        self.format = export_format(self.path)
        self.runtime = str(runtime or FORMAT_RUNTIMES[self.format][0]).lower()
        if self.runtime not in FORMAT_RUNTIMES[self.format]:
            raise ValueError(f"{self.path} is a .{self.format} file, which runs with "
                             f"{' or '.join(FORMAT_RUNTIMES[self.format])}, not {runtime}; choose one of those.")
        check_file(self.path, "Exported model", "name a .onnx or .pt2 file written by tools/export.py.",
                   missing_hint="run tools/export.py first.")
        self.batch: Optional[int] = None
        self.input_rank = 4
        if self.format == "onnx":
            self._load_onnx()
        else:
            self._load_pt2()
        self.clips = is_clip_file(self.metadata, self.input_rank)
        if clips is not None and bool(clips) != self.clips:
            raise ValueError(clip_file_refusal(self.path) if self.clips else image_file_refusal(self.path))
        if self.clips and self.runtime == "openvino":  # OpenVINOBatches fixes every axis but the batch
            raise ValueError(f"{self.path} takes clips (a video model's file); run it with onnxruntime, not openvino.")
        self.record: Dict[str, Any] = file_record(self.metadata)
        self.num_cameras = recorded_cameras(self.metadata)
        self.precision = recorded_precision(self.metadata)
        try:
            self.identity = recorded_identity(self.metadata)
        except ValueError as e:
            raise ValueError(f"{self.path}: {e}.") from None
        self.convention = input_convention(self.record)
        self._to_input = from_raw_pixels(self.convention)
        if self.convention is None:
            logger.warning("note: %s records no input convention (not written by tools/export.py); it gets raw RGB "
                           "pixels 0-255, as this toolkit's exports take them: features are wrong if it expects "
                           "normalised crops.", self.path)

    def _load_onnx(self) -> None:
        opened = OnnxFile(self.path, self.runtime)
        self.input_names = tuple(opened.input_names)
        dims = [str(d) for d in list(opened.input_shape)]
        self.input_rank = len(dims)
        if len(dims) == 5 and all(d.isdigit() for d in dims[2:]):  # clips [batch, frames, 3, H, W]
            dims = [dims[0]] + dims[2:]
        elif len(dims) != 4 or not all(d.isdigit() for d in dims[1:]):
            raise ValueError(f"{self.path} takes inputs of shape {dims}, not images [batch, 3, H, W] of a fixed size; "
                             "give a re-ID model file (tools/export.py writes them).")
        self.input_size = (int(dims[2]), int(dims[3]))
        self.batch = int(dims[0]) if dims[0].isdigit() and self.runtime == "onnxruntime" else None
        self.feature_dim = opened.feature_dim
        self.metadata: Optional[str] = opened.metadata
        self._run = opened.run

    def _load_pt2(self) -> None:
        extra = {f"{METADATA_KEY}.json": ""}
        try:
            program = torch.export.load(self.path, extra_files=extra)
        except Exception as e:  # a truncated or foreign file fails deep inside the loader
            raise unreadable(self.path, e, ".pt2 program") from None
        self.input_names = tuple(program.graph_signature.user_inputs)
        name = self.input_names[0]
        shape = next(n for n in program.graph.nodes if n.op == "placeholder" and n.name == name).meta["val"].shape
        self.input_rank = len(shape)
        self.input_size = (int(shape[-2]), int(shape[-1]))
        self.feature_dim = program_feature_dim(program)
        self.metadata = extra[f"{METADATA_KEY}.json"] or None
        module = program.module()

        def run(*args: torch.Tensor) -> np.ndarray:
            with torch.no_grad():
                return module(*args).numpy()

        self._run = run

    def check_input(self, images: ImageBatch) -> torch.Tensor:
        """`images` as float32 ``[B, 3, H, W]`` (a clip file's: clips ``[B, T, 3, H, W]``); a ValueError
        when H x W is not the export size, or images go to a clip file."""
        if self.clips:
            return as_clip_batch(images, self.path, self.input_size)
        x = _as_pixel_batch(images)
        h, w = int(x.shape[2]), int(x.shape[3])
        if (h, w) != self.input_size:
            eh, ew = self.input_size
            raise ValueError(
                f"{self.path} expects images of {eh}x{ew} (height x width, [B, 3, {eh}, {ew}]), got "
                f"{h}x{w}; resize the crops to {eh}x{ew}, or export again with --input-size {h} {w}."
            )
        return x

    def assume_convention(self, convention: str) -> None:
        """Feed a file that records no input convention (another exporter's) as `convention` ("raw" or
        "boxmot") says; a ValueError for a file that records one (its own is the truth)."""
        if self.convention is not None:
            raise ValueError(f"{self.path} records its input convention ({self.convention}); it needs none named.")
        if convention not in ("raw", "boxmot"):
            raise ValueError(f"input convention {convention!r}: choose raw or boxmot.")
        self.convention, self._to_input = convention, from_raw_pixels(convention)

    @property
    def needs_camids(self) -> bool:
        """Whether the file takes camera ids (``camids``) beside the images: a model with SIE."""
        return len(self.input_names) > 1

    def __call__(self, images: ImageBatch, camids: Optional[CamIds] = None) -> np.ndarray:
        x = self.check_input(images)
        if self._to_input is not None:
            x = self._to_input(x)
        args = (x,) if not self.needs_camids else (x, check_camids(camids, x.shape[0], self.num_cameras, self.path))
        if self.batch is None or self.batch == len(x):
            return self._run(*args)
        return self._in_fixed_batches(*args)

    def _in_fixed_batches(self, x: torch.Tensor, camids: Optional[torch.Tensor] = None) -> np.ndarray:
        """A file whose batch axis is fixed (another exporter's): the images in batches of its size,
        the last one padded with zeros whose rows are dropped."""
        b, n = int(self.batch), len(x)
        out = []
        for start in range(0, n, b):
            part = x[start:start + b]
            cams = None if camids is None else camids[start:start + b]
            pad = b - len(part)
            if pad:
                part = torch.cat([part, part.new_zeros((pad, *part.shape[1:]))])
                cams = None if cams is None else torch.cat([cams, cams.new_zeros(pad)])
            out.append(np.asarray(self._run(part) if cams is None else self._run(part, cams))[:b - pad])
        return np.concatenate(out)


def load_exported(path: PathLike, runtime: Optional[str] = None, clips: Optional[bool] = False) -> ExportedModel:
    """Load an exported model file once; returns an :class:`ExportedModel` (``run(images) -> [B, D]``,
    ``run(images, camids)`` for a model with SIE).

    ``.onnx`` needs onnxruntime (an ImportError says how to install it) or, with `runtime`
    "openvino", OpenVINO; ``.pt2`` needs only torch. `clips` True: a clip file (``run(clips [B, T, 3,
    H, W]) -> [B, D]``), which is refused otherwise; None: whichever the file takes.
    """
    return ExportedModel(path, runtime, clips)


def run_exported(path: PathLike, images: ImageBatch, camids: Optional[CamIds] = None) -> np.ndarray:
    """Run an exported model file on RGB pixels ``[B, 3, H, W]`` (and camera ids ``[B]`` where it
    takes them); returns ``[B, D]`` numpy.

    `images` may be a torch tensor or a numpy array, uint8 or float (see :class:`ExportedModel`).
    """
    return load_exported(path)(images, camids)


__all__ = ["ExportedModel", "FORMAT_RUNTIMES", "load_exported", "run_exported"]
