"""One feature per tracklet: frames through the model a batch at a time, pooled in chunks, merged.

A test tracklet may have hundreds of frames (MARS: up to 920), so a test batch of whole tracklets
has no memory bound. Here the frames of all tracklets are one flat, ordered list read
``TEST.IMS_PER_BATCH`` frames at a time; each batch holds consecutive pieces ("chunks") of one or
more tracklets. A chunk's frame features (the model's ``frame_features``, before the neck) are
reduced at once by the model's temporal pooling to a :class:`~reid.modeling.temporal.ChunkSummary`,
and at the end every tracklet's chunk summaries are merged to exactly what pooling all its frames
at once gives (reid/modeling/temporal.py), then through the model's neck (``embed_pooled``).
Memory is bounded by one batch of frames plus one summary per chunk.

Which frames: ``DATALOADER.VIDEO.TEST_SAMPLER`` "all" (every frame) or "evenly"
(``DATALOADER.VIDEO.SEQ_LEN`` frames spread over the tracklet; reid/data/frame_sampling.py).
"""
from __future__ import annotations

from typing import Callable, Iterable, List, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from .extract import Features, autocast_context, check_feature_batch, eval_batches, eval_mode

#: A tracklet: (frame image paths in temporal order, pid, camid).
Tracklet = Tuple[Tuple[str, ...], int, int]
#: Test-time frame choices: every frame, or SEQ_LEN frames spread evenly.
TEST_SAMPLERS = ("all", "evenly")


def check_video_model(model: torch.nn.Module) -> torch.nn.Module:
    """`model` (unwrapped from DistributedDataParallel) when it pools frames (``frame_features``,
    ``temporal``, ``embed_pooled``); a one-line ValueError naming its class otherwise."""
    inner = getattr(model, "module", model)
    if not all(hasattr(inner, a) for a in ("frame_features", "temporal", "embed_pooled")):
        raise ValueError(f"{type(inner).__name__} does not pool a tracklet's frames: video datasets need "
                         "MODEL.META_ARCHITECTURE Baseline (its MODEL.VIDEO.TEMPORAL pooling).")
    return inner


def tracklet_frames(tracklets: Sequence[Tracklet], sampler: str = "all",
                    seq_len: int = 4) -> List[Tuple[str, int, int]]:
    """The frames a test of `tracklets` reads, in order, as image items ``(path, tracklet index,
    camid)``: every frame (`sampler` "all") or `seq_len` spread evenly ("evenly")."""
    from reid.data.frame_sampling import sample_frames  # data comes before evaluation; imported when used

    if str(sampler).lower() not in TEST_SAMPLERS:
        raise ValueError(f"DATALOADER.VIDEO.TEST_SAMPLER {sampler!r}: a test takes every frame or spread frames; "
                         f"valid: {', '.join(TEST_SAMPLERS)}.")
    items = []
    for index, (frames, _, camid) in enumerate(tracklets):
        chosen = sample_frames(len(frames), sampler, seq_len)
        items.extend((frames[i], index, camid) for i in chosen.tolist())
    return items


def pad_runs(feats: torch.Tensor, owner: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The frames of one batch (`owner`: each frame's tracklet, non-decreasing) as padded chunks:
    ``(x [S, L, D], mask [S, L], tracklet of each chunk [S])``, one chunk per run of equal owners."""
    starts = torch.ones_like(owner, dtype=torch.bool)
    starts[1:] = owner[1:] != owner[:-1]
    chunk = torch.cumsum(starts.long(), 0) - 1
    first = torch.nonzero(starts).flatten()
    position = torch.arange(len(owner), device=owner.device) - first[chunk]
    num, longest = len(first), int(position.max()) + 1
    x = feats.new_zeros((num, longest, feats.shape[1]))
    mask = torch.zeros((num, longest), dtype=torch.bool, device=feats.device)
    x[chunk, position] = feats
    mask[chunk, position] = True
    return x, mask, owner[first]


@torch.inference_mode()
def extract_tracklet_features(
    model: torch.nn.Module,
    tracklets: Sequence[Tracklet],
    make_loader: Callable[[List[Tuple[str, int, int]]], Iterable[dict]],
    device: torch.device,
    flip: bool = False,
    amp: str = "off",
    sampler: str = "all",
    seq_len: int = 4,
) -> Features:
    """L2-normalised float32 features of `tracklets`, one per tracklet (see the module docstring).

    `make_loader` turns the frame items of :func:`tracklet_frames` into an ordered loader of
    image batches (``reid.data.build_test_loader``). With `flip`, a tracklet's feature is the mean
    of the features of its frames and of their mirrors, each pooled, taken before normalisation
    (as for images). ``paths`` holds each tracklet's first frame (what pictures of results show).
    """
    from reid.modeling import takes_camera_ids  # models' imports stay out of reid.evaluation's import

    if not tracklets:
        raise ValueError("No tracklet to extract.")
    device = torch.device(device)
    inner = check_video_model(model)
    uses_camids = takes_camera_ids(inner)
    loader = make_loader(tracklet_frames(tracklets, sampler, seq_len))
    passes = (False, True) if flip else (False,)
    parts: List[List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = [[] for _ in passes]
    with eval_mode(model):
        for batch, images, camids in eval_batches(loader, device, uses_camids):
            owner = torch.as_tensor(batch["targets"]).to(device)
            for k, mirrored in enumerate(passes):
                with autocast_context(device, amp):
                    f = inner.frame_features(torch.flip(images, dims=[-1]) if mirrored else images, camids).float()
                x, mask, chunk_owner = pad_runs(f, owner)
                summary = inner.temporal.summarize(x, mask)
                parts[k].append((summary.value.float(), summary.log_mass.float(), chunk_owner))
        feats = None
        for chunks in parts:
            pooled = _merge(inner, chunks, len(tracklets))
            with autocast_context(device, amp):
                f = inner.embed_pooled(pooled).float()
            feats = f if feats is None else (feats + f) / 2
    firsts = [t[0][0] for t in tracklets]
    check_feature_batch(feats, firsts, amp)
    return Features(F.normalize(feats, dim=1).cpu(), np.asarray([t[1] for t in tracklets], dtype=np.int64),
                    np.asarray([t[2] for t in tracklets], dtype=np.int64), firsts)


def _merge(inner: torch.nn.Module, chunks: List[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
           num: int) -> torch.Tensor:
    """Every tracklet's chunk summaries merged by the model's temporal pooling: ``[num, D]``."""
    from reid.modeling.temporal import ChunkSummary

    values, masses, owners = (torch.cat(c) for c in zip(*chunks))
    return inner.temporal.merge_grouped(ChunkSummary(values, masses), owners, num)


__all__ = ["TEST_SAMPLERS", "check_video_model", "extract_tracklet_features", "pad_runs", "tracklet_frames"]
