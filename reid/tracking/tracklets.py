"""One appearance feature per tracklet: several good crops spread over its time, weighted by quality.

A tracklet is the boxes of one track id in one camera (a tracker's, or the ground truth's). Its
feature is pooled from up to ``k`` crops (``--crops-per-tracklet``): the tracklet's boxes, in frame
order, are cut into ``k`` runs of (nearly) equal length, and from each run the box of highest
quality is taken, so the crops cover the tracklet's whole time (views change as a person walks)
and avoid its worst moments.

Quality of a box ``i`` (each factor in [0, 1]; :func:`crop_quality`)::

    q_i = c_i * b_i * v_i * s_i
    c_i = clip(conf_i, 0, 1), or 1 when conf_i < 0      detection confidence (-1: the file has none)
    b_i = area(box_i clipped to the image) / area(box_i) the part not cut off by the image border
    v_i = 1 - max_j area(box_i & box_j) / area(box_i)   j: the other boxes of the same frame; an
                                                         occlusion proxy (who is in front is unknown)
    s_i = min(1, clipped height_i / FULL_HEIGHT)         small people give blurry, upscaled crops

The tracklet's feature is the quality-weighted mean of its crops' L2-normalised features,
L2-normalised again (:func:`pool_features`): ``f = normalize(sum_i q_i f_i)``. A tracklet whose
chosen crops all have quality 0 (e.g. always fully covered) gets their plain mean instead, so every
tracklet has a feature. A model trained on tracklets pools the same crops itself instead (``pooling``
"model", its default: its features before the neck through its temporal module, then its neck).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Iterable, Optional

import numpy as np

from .appearance import AppearanceModel, Progress, embed_rows
from .mot_files import MOTRows
from .sequences import Sequence

#: Box height (pixels) from which a crop counts as full size (s_i = 1): about the height a re-ID
#: model's input is resized to from below without inventing detail.
FULL_HEIGHT = 128.0
#: Crops pooled per tracklet unless told otherwise.
DEFAULT_CROPS = 8
#: How a tracklet's crops are pooled: the hand-set quality weights, the model's own temporal
#: aggregation, or auto (the model's own for a model trained on tracklets).
POOLINGS = ("auto", "quality", "model")


@dataclass(frozen=True)
class Tracklets:
    """Tracklets of one or more sequences, as column arrays of length T (one row a tracklet)."""

    sequence: np.ndarray   # int64: index of the tracklet's sequence in the list it was read from
    camera: np.ndarray     # int64: the sequence's camera
    local_id: np.ndarray   # int64: the track id in its sequence's file
    first: np.ndarray      # int64: first frame
    last: np.ndarray       # int64: last frame
    start_s: np.ndarray    # float64: time of the first frame, seconds from frame 1 ((first - 1) / frame rate)
    end_s: np.ndarray      # float64: time of the last frame
    num_boxes: np.ndarray  # int64
    features: np.ndarray   # float32 [T, D], rows L2-normalised

    def __len__(self) -> int:
        return int(self.local_id.shape[0])

    def select(self, index: np.ndarray) -> "Tracklets":
        """The tracklets a mask or an index array picks."""
        return Tracklets(*(getattr(self, f.name)[index] for f in fields(self)))

    @staticmethod
    def concatenate(parts: Iterable["Tracklets"]) -> "Tracklets":
        """The tracklets of all `parts`, one after the other (features of one width)."""
        parts = list(parts)
        if not parts:
            raise ValueError("no tracklets to concatenate; give at least one sequence with tracks.")
        return Tracklets(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Tracklets)))


def _frame_pairs(frames: np.ndarray):
    """All ordered pairs (i, j), i != j, of rows that share a frame, as two index arrays: the
    pairs of each frame only (sum of n_f^2), never all N^2."""
    order = np.argsort(frames, kind="stable")
    f = frames[order]
    starts = np.flatnonzero(np.r_[True, f[1:] != f[:-1]]) if len(f) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(f)])
    row_size = np.repeat(sizes, sizes)      # the size of each (sorted) row's frame
    row_start = np.repeat(starts, sizes)    # where each (sorted) row's frame begins
    i = np.repeat(np.arange(len(f)), row_size)
    offset = np.arange(i.size) - np.repeat(np.cumsum(row_size) - row_size, row_size)
    j = np.repeat(row_start, row_size) + offset
    keep = i != j
    return order[i[keep]], order[j[keep]]


def crop_quality(rows: MOTRows, width: int, height: int, full_height: float = FULL_HEIGHT) -> np.ndarray:
    """Quality ``q_i`` in [0, 1] of each box of `rows` in a ``width`` x ``height`` image (module docstring)."""
    boxes = rows.boxes.astype(np.float64)
    area = boxes[:, 2] * boxes[:, 3]
    conf = np.where(rows.conf < 0, 1.0, np.clip(rows.conf, 0.0, 1.0))
    x0, y0 = np.clip(boxes[:, 0], 0, width), np.clip(boxes[:, 1], 0, height)
    x1, y1 = np.clip(boxes[:, 0] + boxes[:, 2], 0, width), np.clip(boxes[:, 1] + boxes[:, 3], 0, height)
    inside = (x1 - x0) * (y1 - y0) / area
    covered = np.zeros(len(rows))
    i, j = _frame_pairs(rows.frame)
    if i.size:
        lo = np.maximum(boxes[i, :2], boxes[j, :2])
        hi = np.minimum(boxes[i, :2] + boxes[i, 2:], boxes[j, :2] + boxes[j, 2:])
        ix, iy = np.clip(hi - lo, 0, None).T
        np.maximum.at(covered, i, ix * iy / area[i])
    visible = 1.0 - np.clip(covered, 0.0, 1.0)
    size = np.minimum(1.0, (y1 - y0) / float(full_height))
    return conf * inside * visible * size


def select_crops(track: np.ndarray, frames: np.ndarray, quality: np.ndarray, k: int) -> np.ndarray:
    """Row indices of the crops of each track (`track`: a tracklet index per row): its rows in
    frame order cut into ``min(k, n)`` runs of nearly equal length, the best `quality` of each run
    (the earliest on ties); sorted."""
    if k < 1:
        raise ValueError(f"crops per tracklet {k} must be >= 1.")
    order = np.lexsort((frames, track))
    t = track[order]
    starts = np.flatnonzero(np.r_[True, t[1:] != t[:-1]]) if len(t) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(t)])
    rank = np.arange(len(t)) - np.repeat(starts, sizes)
    run = rank * k // np.repeat(sizes, sizes)          # 0..min(k, n)-1, runs of n/k rows
    key = np.repeat(np.arange(len(starts)), sizes) * k + run
    best = np.lexsort((rank, -quality[order], key))    # per key: best quality first, then earliest
    first = np.r_[True, key[best][1:] != key[best][:-1]] if len(best) else np.zeros(0, bool)
    return np.sort(order[best[first]])


def pool_features(features: np.ndarray, weights: np.ndarray, group: np.ndarray, num_groups: int) -> np.ndarray:
    """``normalize(sum_i w_i f_i)`` over the rows of each group (``[num_groups, D]`` float32); a
    group whose weights are all 0 gets its plain mean (module docstring)."""
    weights = np.asarray(weights, np.float64)
    total = np.zeros(num_groups)
    np.add.at(total, group, weights)
    w = np.where(total[group] > 0, weights, 1.0)
    pooled = np.zeros((num_groups, features.shape[1]))
    np.add.at(pooled, group, features.astype(np.float64) * w[:, None])
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)


def check_pooling(pooling: str, model: AppearanceModel) -> str:
    """The pooling to use ("quality" or "model") for `pooling` ("auto", "quality", "model"): auto is
    the model's own for a model trained on tracklets, the hand-set weights otherwise. One line when
    "model" is asked of a model that cannot pool frames."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling {pooling!r}: valid: {', '.join(POOLINGS)}.")
    if pooling == "auto":
        return "model" if model.video else "quality"
    if pooling == "model" and model.frames is None:
        raise ValueError(f"--pooling model: {model.label} cannot pool frames itself (an exported file, or a model "
                         "without MODEL.VIDEO.TEMPORAL such as MGN); use --pooling quality.")
    return pooling


def tracklet_features(sequence: Sequence, rows: MOTRows, model: AppearanceModel, sequence_index: int = 0,
                      crops_per_tracklet: int = DEFAULT_CROPS, progress: Optional[Progress] = None,
                      pooling: str = "quality") -> Tracklets:
    """The tracklets (one per track id) of `rows`, boxes of `sequence`, each with its pooled feature
    from `model` (module docstring); the crops of one frame are embedded in one batch. `pooling`
    "model" pools the same crops with the model's own temporal aggregation instead of the quality
    weights (reid/inference/tracklet_pooling.py)."""
    ids, track = np.unique(rows.track_id, return_inverse=True)
    track = track.reshape(-1)
    quality = crop_quality(rows, sequence.width, sequence.height)
    chosen = select_crops(track, rows.frame, quality, crops_per_tracklet)
    own = check_pooling(pooling, model) == "model"
    feats = embed_rows(sequence, rows.select(chosen), model, progress, frames=own)
    first = np.full(len(ids), np.iinfo(np.int64).max)
    last = np.zeros(len(ids), np.int64)
    np.minimum.at(first, track, rows.frame)
    np.maximum.at(last, track, rows.frame)
    n = len(ids)
    return Tracklets(
        sequence=np.full(n, sequence_index, np.int64), camera=np.full(n, sequence.camera, np.int64),
        local_id=ids.astype(np.int64), first=first, last=last,
        start_s=(first - 1) / float(sequence.frame_rate), end_s=(last - 1) / float(sequence.frame_rate),
        num_boxes=np.bincount(track, minlength=n).astype(np.int64),
        features=model.frames.pool(feats, track[chosen], n) if own else
        pool_features(feats, quality[chosen], track[chosen], n))


__all__ = ["DEFAULT_CROPS", "FULL_HEIGHT", "POOLINGS", "check_pooling", "Tracklets", "crop_quality", "pool_features", "select_crops",
           "tracklet_features"]
