"""Cut a tracker's tracklet where its crops stop looking like one person (an identity switch).

Learning without labels keeps every tracklet in one cluster (UDA.TRACKLET_REGEX), because a
tracklet is one person far more reliably than a radius in feature space says. Not always: when two
people cross, a tracker may hand one person's track to the other (an identity switch), and the
tracklet then holds two people; kept whole, it becomes a must-link between them and teaches the
model that they are one.

The cut (binary segmentation, the classic change-point search): with the tracklet's crops in
order x_1..x_n (unit features f_i) and S_k = f_1 + ... + f_k, the cut after crop k separates the
parts' sums L = S_k and R = S_n - S_k; their cosine L.R / (|L| |R|) equals the cosine of the two
parts' mean features. The cut with the lowest cosine is the best separation; it is made when that
cosine is below UDA.TRACKLET_SPLIT and both parts hold at least :data:`MIN_PART` crops (a single
odd crop, e.g. an occluded one, is no second person). Each part is then searched again, for up to
:data:`MAX_ROUNDS` rounds (a tracklet with several switches). All tracklets are searched at once
from one cumulative sum over the crops sorted by tracklet and position: no loop over tracklets.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

#: Crops each part of a cut must keep.
MIN_PART = 3
#: Rounds of cutting (each round cuts every part at most once).
MAX_ROUNDS = 4


@dataclass(frozen=True)
class TrackletSplit:
    """``tracklets`` int ``[N]``: the parts, numbered 0..T'-1 (a tracklet never cut keeps one id);
    ``cut``: how many of the original tracklets were cut; ``parts``: how many parts they became."""

    tracklets: np.ndarray
    cut: int
    parts: int


def _best_cuts(feats: np.ndarray, segment: np.ndarray, order: np.ndarray, min_part: int):
    """For every segment: the position (into `order`) of the last crop before its best cut and
    that cut's cosine; segments too short to cut are absent. `order` sorts crops by (segment, position)."""
    f = feats[order]
    s = segment[order]
    n = len(s)
    start = np.r_[True, s[1:] != s[:-1]]
    first = np.flatnonzero(start)
    group = np.cumsum(start) - 1
    size = np.diff(np.r_[first, n])
    cum = np.cumsum(f, axis=0, dtype=np.float64)
    before = np.zeros_like(cum)
    before[1:] = cum[:-1]
    base = before[first][group]  # sum of the crops of earlier segments
    total = cum[first + size - 1][group] - base
    left = cum - base
    right = total - left
    k = np.arange(n) - first[group] + 1  # crops on the left of a cut after this crop
    valid = (k >= min_part) & (size[group] - k >= min_part)
    if not valid.any():
        return np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64)
    idx = np.flatnonzero(valid)
    norms = np.linalg.norm(left[idx], axis=1) * np.linalg.norm(right[idx], axis=1)
    cosine = np.einsum("ij,ij->i", left[idx], right[idx]) / np.maximum(norms, 1e-12)
    # lowest cosine per segment (ties: the earlier cut)
    pick = np.lexsort((idx, cosine, group[idx]))
    g = group[idx][pick]
    lead = np.r_[True, g[1:] != g[:-1]]
    return idx[pick][lead], cosine[pick][lead], s[first[g[lead]]]


def split_tracklets(feats: torch.Tensor, tracklets: np.ndarray, positions: Optional[np.ndarray],
                    min_similarity: float, min_part: int = MIN_PART, rounds: int = MAX_ROUNDS) -> TrackletSplit:
    """Cut the tracklets whose crops disagree (see the module docstring).

    Args:
        feats: ``[N, D]`` features (normalised here).
        tracklets: int ``[N]``, the tracklet of each crop.
        positions: int ``[N]``, any key that orders a tracklet's crops in time (e.g. the frame, or the
            rank of the file names); None = the crops' order.
        min_similarity: cut when the parts' mean features have a cosine below this; 0 = never cut.
        min_part: crops each part must keep.
        rounds: most rounds of cutting.
    """
    tracklets = np.asarray(tracklets, np.int64)
    n = len(tracklets)
    if feats.shape[0] != n or (positions is not None and len(positions) != n):
        raise ValueError(f"split_tracklets needs one feature and one position per crop ({n}), got "
                         f"{feats.shape[0]} and {n if positions is None else len(positions)}.")
    segment = np.unique(tracklets, return_inverse=True)[1].reshape(-1).astype(np.int64)
    if min_similarity <= 0 or n == 0:
        return TrackletSplit(segment, 0, 0)
    f = feats.detach().cpu().double()
    f = (f / f.norm(dim=1, keepdim=True).clamp_min(1e-12)).numpy()
    pos = np.arange(n) if positions is None else np.asarray(positions, np.int64)
    original = segment.copy()
    for _ in range(rounds):
        order = np.lexsort((pos, segment))
        last, cosine, which = _best_cuts(f, segment, order, min_part)
        cut = cosine < min_similarity
        if not cut.any():
            break
        # the crops after each cut (up to the segment's end) get a new segment id
        marks = np.zeros(n, np.int64)
        after = last[cut] + 1
        marks[after] = 1
        fresh = np.cumsum(marks)  # cuts passed so far along `order`
        seg_sorted = segment[order]
        new_id = np.where(np.isin(seg_sorted, which[cut]), fresh, 0)
        # number the new parts past the current ids; a segment's part before its cut keeps its id
        first_of_seg = np.r_[True, seg_sorted[1:] != seg_sorted[:-1]]
        seg_start_fresh = fresh[np.flatnonzero(first_of_seg)][np.cumsum(first_of_seg) - 1]
        moved = new_id > seg_start_fresh
        updated = seg_sorted.copy()
        updated[moved] = segment.max() + new_id[moved]
        segment = np.empty_like(segment)
        segment[order] = updated
        segment = np.unique(segment, return_inverse=True)[1].reshape(-1).astype(np.int64)
    parts_per = np.unique(np.stack([original, segment]), axis=1)[0]
    per_tracklet = np.bincount(parts_per, minlength=int(original.max()) + 1)
    was_cut = per_tracklet > 1
    return TrackletSplit(segment, int(was_cut.sum()), int(per_tracklet[was_cut].sum()))


__all__ = ["MAX_ROUNDS", "MIN_PART", "TrackletSplit", "split_tracklets"]
