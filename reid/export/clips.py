"""Clip files: a video model exported with its frame encoder, temporal pooling and neck in one graph
(``tools/export.py --clips``).

The graph takes ``images`` float32 ``[batch, frames, 3, H, W]`` (raw RGB 0-255; batch and frames
both dynamic and named so in the file) and returns one L2-normalised feature per clip ``[batch, D]``:
exactly ``model(clips)`` in eval mode (every frame's feature before the neck, pooled over the frames by
``MODEL.VIDEO.TEMPORAL``: avg, max or attention, a softmax over the frames; then the neck). Every frame
of a clip is a real frame: the file has no frame mask (pad nothing; run clips of different lengths in
separate calls). A model with SIE also takes ``camids`` int64 ``[batch]``, one camera per clip.

The file records ``"clips": true`` (and ``"frames_axis": 1``, ``"temporal"``) in its ``circle_reid``
metadata, so that loaders know: :class:`reid.export.exported.ExportedModel` runs clip files only when
asked for clips (``load_exported(path, clips=True)``) and refuses them, in one line naming the file,
wherever images are fed (:func:`clip_file_refusal`).
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from reid.modeling import camera_count
from reid.modeling.temporal import TEMPORAL_REGISTRY

from .files import file_record

FRAMES_AXIS = "frames"
#: The export example (batch, frames): neither is 1, so that export specialises neither axis.
CLIP_EXAMPLE: Tuple[int, int] = (2, 3)
#: (batch, frames) of the clips the parity check runs: one and several frames at one and several clips,
#: and a full batch of 32 (where a wrong batch axis goes wrong).
CLIP_CHECK_SHAPES: Tuple[Tuple[int, int], ...] = ((1, 1), (7, 1), (1, 5), (7, 5), (32, 2))
ClipBatch = Union[torch.Tensor, np.ndarray]


def check_clip_model(model: nn.Module) -> nn.Module:
    """`model` (unwrapped) when it pools a clip's frames itself (``frame_features``, ``temporal``,
    ``embed_pooled``: the Baseline); a one-line ValueError naming its class otherwise."""
    inner = getattr(model, "module", model)
    if not all(hasattr(inner, a) for a in ("frame_features", "temporal", "embed_pooled")):
        raise ValueError(f"--clips exports a model that pools a clip's frames itself; {type(inner).__name__} does not "
                         "(MODEL.META_ARCHITECTURE Baseline has MODEL.VIDEO.TEMPORAL pooling); export it without --clips.")
    return inner


def temporal_name(model: nn.Module) -> str:
    """The ``MODEL.VIDEO.TEMPORAL`` name of `model`'s temporal pooling ("avg", "max", "attention")."""
    pooling = type(check_clip_model(model).temporal)
    return next((n for n in TEMPORAL_REGISTRY.names() if TEMPORAL_REGISTRY.get(n) is pooling), pooling.__name__)


class ClipFeatureModel(nn.Module):
    """Wrap a video model: clips ``[B, T, 3, H, W]`` (0-255) -> L2-normalised ``[B, D]`` (``model(clips)``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.model(images), dim=1)


class CameraClipFeatureModel(ClipFeatureModel):
    """The same for a model with SIE: ``(clips [B, T, 3, H, W], camids int64 [B]) -> [B, D]``."""

    def forward(self, images: torch.Tensor, camids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        # model(images, camids=camids) with each clip's camera given to its frames by expand, not by the
        # model's repeat_interleave, which ONNX Runtime cannot run over a dynamic frames axis (a bad Expand).
        num, frames = images.shape[:2]
        per_frame = camids.unsqueeze(1).expand(num, frames).reshape(-1)
        before = self.model.frame_features(images.flatten(0, 1), per_frame)
        return F.normalize(self.model.embed_pooled(self.model.temporal(before.view(num, frames, -1))), dim=1)


class CameraClipReference(ClipFeatureModel):
    """What :class:`CameraClipFeatureModel` must compute, as the model computes it: ``model(clips, camids=...)``
    (the reference of the parity check)."""

    def forward(self, images: torch.Tensor, camids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.normalize(self.model(images, camids=camids), dim=1)


def wrap_clips(model: nn.Module, reference: bool = False) -> ClipFeatureModel:
    """A CPU eval-mode copy of `model` wrapped for clips (the caller's model keeps its device and mode):
    the graph to export, or with `reference` the plain ``model(clips[, camids=...])`` it is checked against."""
    import copy

    check_clip_model(model)
    if camera_count(model):
        wrapper = CameraClipReference if reference else CameraClipFeatureModel
    else:
        wrapper = ClipFeatureModel
    return wrapper(copy.deepcopy(model)).to("cpu").eval()


def example_clips(input_size: Sequence[int], batch: int, frames: int, cameras: int = 0,
                  seed: int = 0) -> Tuple[torch.Tensor, ...]:
    """Random integer-valued clips ``[batch, frames, 3, H, W]`` (and camera ids ``[batch]`` for SIE)."""
    h, w = int(input_size[0]), int(input_size[1])
    gen = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (batch, frames, 3, h, w), generator=gen).float()
    return (pixels, torch.randint(0, cameras, (batch,), generator=gen)) if cameras else (pixels,)


def clip_record(model: nn.Module, input_size: Sequence[int], pixels: str) -> Dict[str, Any]:
    """What a clip file records beyond an image file's: its input, that it takes clips, and its pooling."""
    h, w = int(input_size[0]), int(input_size[1])
    return {"input": f"images: float32 [batch, frames, 3, {h}, {w}], {pixels}; every frame a real one (no frame mask)",
            "clips": True, "frames_axis": 1, "temporal": temporal_name(model)}


def is_clip_file(metadata: Optional[str], input_rank: int) -> bool:
    """Whether an exported file takes clips: its record says so, or its first input has 5 axes."""
    return file_record(metadata).get("clips") is True or int(input_rank) == 5


def clip_file_refusal(path: str, where: str = "") -> str:
    """The one line refusing to feed images to the clip file `path` (`where`: who would have fed them)."""
    by = f" {where}" if where else ""
    return (f"{path} takes clips [batch, frames, 3, H, W] (a video model exported with --clips: frame encoder and "
            f"temporal pooling), not images{by}; run it with reid.export.load_exported({path!r}, clips=True), "
            "or export the model without --clips for a file of single images.")


def image_file_refusal(path: str) -> str:
    """The one line refusing to treat the image file `path` as a clip file."""
    return (f"{path} takes images [batch, 3, H, W], not clips; export the video model with tools/export.py --clips "
            "for a file that pools a clip's frames.")


def as_clip_batch(clips: ClipBatch, path: str, input_size: Tuple[int, int]) -> torch.Tensor:
    """`clips` (torch or numpy, uint8 or float) as float32 CPU ``[B, T, 3, H, W]``; a one-line ValueError
    naming `path` for another shape (an image batch included) or another H x W than `input_size`."""
    if isinstance(clips, np.ndarray):
        if not (clips.dtype == np.uint8 or np.issubdtype(clips.dtype, np.floating)):
            raise TypeError(f"{path}: clips are uint8 or float pixels 0-255, got a numpy array of dtype {clips.dtype}.")
        clips = torch.from_numpy(np.array(clips, dtype=np.float32))
    elif not isinstance(clips, torch.Tensor):
        raise TypeError(f"{path}: clips must be a torch tensor or a numpy array [B, T, 3, H, W], "
                        f"got {type(clips).__name__}.")
    h, w = input_size
    if clips.ndim != 5 or clips.shape[2] != 3 or min(clips.shape[:2]) < 1:
        hint = " One image is a clip of one frame: x[:, None]." if clips.ndim == 4 else ""
        raise ValueError(f"{path} takes clips [batch, frames, 3, {h}, {w}] (RGB 0-255, frames >= 1), got shape "
                         f"{tuple(clips.shape)}.{hint}")
    if tuple(int(s) for s in clips.shape[3:]) != (h, w):
        raise ValueError(f"{path} expects frames of {h}x{w} (height x width), got {clips.shape[3]}x{clips.shape[4]}; "
                         f"resize the crops to {h}x{w}, or export again with --input-size "
                         f"{clips.shape[3]} {clips.shape[4]}.")
    return clips.detach().to("cpu", torch.float32).contiguous()


__all__ = ["CLIP_CHECK_SHAPES", "CLIP_EXAMPLE", "CameraClipFeatureModel", "CameraClipReference", "ClipFeatureModel",
           "FRAMES_AXIS", "as_clip_batch", "check_clip_model", "clip_file_refusal", "clip_record", "example_clips",
           "image_file_refusal", "is_clip_file", "temporal_name", "wrap_clips"]
