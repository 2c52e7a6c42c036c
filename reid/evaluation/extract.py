"""Batched feature extraction (written by the lead; used by the evaluator and tools).

The model takes raw 0-255 pixels and normalises inside, so the flipped pass flips a *copy*
of the raw batch: it can never see normalised or mutated data.
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from reid.utils.logger import progress_bar
from reid.utils.stop_request import check_stop

AMP_MODES = ("off", "bf16", "fp16")


@dataclass
class Features:
    """L2-normalised features with their identities, cameras and image paths."""

    feats: torch.Tensor  # float32 [N, D], on CPU
    pids: np.ndarray  # int64 [N]
    camids: np.ndarray  # int64 [N]
    paths: List[str]

    def __len__(self) -> int:
        return self.feats.shape[0]

    def split(self, n: int) -> Tuple["Features", "Features"]:
        """The first `n` items (the query set, which loaders put first) and the rest."""
        return (
            Features(self.feats[:n], self.pids[:n], self.camids[:n], self.paths[:n]),
            Features(self.feats[n:], self.pids[n:], self.camids[n:], self.paths[n:]),
        )

    def without_pids(self, pids: Sequence[int]) -> "Features":
        """These features without the items whose pid is in `pids` (a gallery without its junk)."""
        if not len(pids):
            return self
        index = np.flatnonzero(~np.isin(self.pids, np.asarray(pids, dtype=np.int64)))
        return Features(self.feats[index], self.pids[index], self.camids[index], [self.paths[i] for i in index.tolist()])


class BadFeaturesError(ValueError):
    """The model produced NaN/inf or all-zero features; the message names an image and what to check."""


def check_feature_batch(f: torch.Tensor, paths: Optional[Sequence[str]] = None, amp: str = "off") -> None:
    """Refuse a batch of raw features ``[B, D]`` with a NaN/inf or all-zero row.

    Either would be normalised into a feature that matches nothing (zero) or poisons every
    distance (NaN); both come from broken weights or an overflow in reduced precision.
    """
    finite = torch.isfinite(f).all(dim=1)
    zero = (f == 0).all(dim=1) & finite
    bad = ~finite | zero
    if not bool(bad.any()):
        return
    row = int(torch.nonzero(bad).flatten()[0])
    image = f"image {paths[row]!r}" if paths is not None else f"image {row} of the batch"
    what = "NaN/inf" if not bool(finite[row]) else "an all-zero"
    hint = " or try amp 'off' (TEST.AMP off)" if amp != "off" else ""
    raise BadFeaturesError(
        f"The model produced {what} feature for {image} ({int(bad.sum())} of {len(f)} in its batch); check the "
        f"weights (MODEL.WEIGHTS / --weights){hint}."
    )


def autocast_context(device: torch.device, amp: str):
    """The autocast context for `amp` ("off", "bf16", "fp16") on `device`."""
    if amp not in AMP_MODES:
        raise ValueError(f"Unknown AMP mode {amp!r}. Valid: {', '.join(AMP_MODES)}.")
    if amp == "off":
        return contextlib.nullcontext()
    if amp == "fp16" and device.type != "cuda":
        raise ValueError("fp16 autocast needs a CUDA device; use amp 'bf16' (or 'off') on CPU.")
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """`model` in eval mode inside the block, its own mode restored after (also after an error)."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def eval_batches(loader: Iterable[dict], device: torch.device,
                 uses_camids: bool) -> Iterator[Tuple[dict, torch.Tensor, Optional[torch.Tensor]]]:
    """``(batch, images, camids)`` of each batch of `loader`, the pixels (and, for a model with a
    camera embedding, the camera ids; else None) on `device`, with a progress bar on a terminal and
    a stop request honoured."""
    total = len(loader) if hasattr(loader, "__len__") else None
    # A bar only when a person is watching a terminal (evaluation runs inside training logs).
    with progress_bar(total, "extract", enabled=sys.stderr.isatty(), leave=False) as bar:
        for batch in loader:
            # A run asked to stop (a scheduler's SIGTERM) gives the evaluation up rather than
            # finish it past the scheduler's grace period (reid/utils/stop_request.py).
            check_stop("feature extraction")
            images = batch["images"].to(device, non_blocking=True)
            camids = torch.as_tensor(batch["camids"]).to(device) if uses_camids else None
            yield batch, images, camids
            bar.update(1)


@torch.inference_mode()
def extract_features(
    model: torch.nn.Module,
    loader: Iterable[dict],
    device: torch.device,
    flip: bool = False,
    amp: str = "off",
) -> Features:
    """Run `model` in eval mode over `loader` and return L2-normalised float32 features.

    With `flip`, each feature is the mean of the features of the image and its horizontal
    mirror, taken before normalisation. The model's train/eval mode is restored afterwards.
    """
    device = torch.device(device)
    feats, pids, camids, paths = [], [], [], []
    # Imported here: reid.evaluation alone (feature files, plots) stays free of the models' imports.
    from reid.modeling import takes_camera_ids

    with eval_mode(model):
        for batch, images, cams in eval_batches(loader, device, takes_camera_ids(model)):
            # Models with a camera embedding (SIE) also take the camera ids.
            extra = {"camids": cams} if cams is not None else {}
            with autocast_context(device, amp):
                f = model(images, **extra).float()
                if flip:  # the last axis is the width, for images [B, 3, H, W] and clips [B, T, 3, H, W]
                    f = (f + model(torch.flip(images, dims=[-1]), **extra).float()) / 2
            check_feature_batch(f, batch["img_paths"], amp)
            feats.append(F.normalize(f, dim=1).cpu())
            pids.append(np.asarray(batch["targets"], dtype=np.int64))
            camids.append(np.asarray(batch["camids"], dtype=np.int64))
            paths.extend(batch["img_paths"])
    if not feats:
        raise ValueError("The loader yielded no images: nothing to extract.")
    return Features(torch.cat(feats), np.concatenate(pids), np.concatenate(camids), paths)
