"""Verification ("same person or not?") from a query x gallery distance matrix: ROC, TAR@FAR, EER.

Which pairs count (the Market-1501 protocol of ``rank.py``): every query x gallery pair except
those of the same identity seen by the same camera (junk). A *genuine* pair has the same
identity (a cross-camera match); an *impostor* pair has different identities (any cameras;
distractors, pid 0, are impostors of every query but pid 0).

A pair is **accepted at threshold t when its distance is below t** (``d < t``). Then

* ``FAR(t)`` = impostor pairs with ``d < t`` / impostor pairs (false accept rate),
* ``TAR(t)`` = genuine pairs with ``d < t`` / genuine pairs (true accept rate),
  ``FRR(t) = 1 - TAR(t)``;
* the threshold at a target FAR ``f`` is the ``(k + 1)``-th smallest impostor distance with
  ``k = floor(f * impostors)``: the largest threshold whose FAR does not exceed ``f``
  (ties at the threshold are rejected, so the FAR reached is at most ``f``; it is reported);
* the equal error rate is ``EER = min_t max(FAR(t), FRR(t))``, the error where the two curves
  cross: with t1 the smallest distance at which FAR >= FRR and t0 the distance before it,
  ``EER = min(FRR(t0), FAR(t1))`` and its threshold is t1 when ``FAR(t1) <= FRR(t0)``, else t0.

Everything is exact: no binning error, whatever the number of pairs. The k-th smallest of
the impostor distances (958 million at MSMT17 size) is found by a radix selection instead of
a sort: each float32 distance maps to an unsigned 32-bit key in the same order; a first pass
over the matrix counts the impostor keys by their top 16 bits (65,536 bins) and collects the
genuine distances (a few per query, sorted afterwards); the bins that hold a wanted threshold
(each target FAR, the points of the ROC curve, the EER crossing) are known from the counts,
and a second pass counts their keys by the low 16 bits, which gives the exact count below
every distance in those bins. Memory: the matrix (or, from features, one block of it) plus a
few chunk-sized buffers and the genuine distances. Distances are compared as float32.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from .distance import ArrayLike
from .from_features import (Distances, FeatureDistances, MatrixDistances, check_finite_rows, group_gallery,
                            same_pid_entries)

DEFAULT_FARS = (1e-2, 1e-3, 1e-4)
# Points of the returned ROC curve: FARs spaced evenly on a log axis down to one impostor.
ROC_POINTS = 60
_BINS = 1 << 16


def float_keys(x: np.ndarray) -> np.ndarray:
    """uint32 keys of float32 values, ordered as the values are (-0.0 just below +0.0)."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return np.where(bits >> 31, ~bits, bits | np.uint32(1 << 31)).astype(np.uint32, copy=False)


def key_values(keys: np.ndarray) -> np.ndarray:
    """float64 values of int64 `keys` (the inverse of :func:`float_keys`); keys of NaN patterns and
    keys past the last give -inf below the numbers and +inf above them."""
    keys = np.asarray(keys, dtype=np.int64)
    clipped = np.minimum(keys, (1 << 32) - 1).astype(np.uint32)
    bits = np.where(clipped >> 31, clipped & np.uint32(0x7FFFFFFF), ~clipped).astype(np.uint32)
    with np.errstate(invalid="ignore"):
        values = bits.view(np.float32).astype(np.float64)
    # Keys of NaN bit patterns lie below -inf's key or above +inf's: as thresholds they act as -inf / +inf.
    values = np.where(np.isnan(values), np.where(keys < 1 << 31, -np.inf, np.inf), values)
    return np.where(keys >= 1 << 32, np.inf, values)


def check_fars(fars: Sequence[float]) -> List[float]:
    """`fars` as floats, each in the open interval (0, 1); a ValueError names a bad one."""
    out = []
    for f in fars:
        try:
            value = float(f)
        except (TypeError, ValueError):
            raise ValueError(f"A false accept rate must be a number in (0, 1), got {f!r}.") from None
        if not 0.0 < value < 1.0:
            raise ValueError(f"A false accept rate must lie in (0, 1) (e.g. 1e-3 = one in a thousand), got {f!r}.")
        out.append(value)
    if not out:
        raise ValueError("No false accept rate given; pass at least one, e.g. fars=(1e-2, 1e-3).")
    return out


class _Counts:
    """Impostor keys counted by their top 16 bits (pass 1), then refined in chosen bins (pass 2)."""

    def __init__(self, source: Distances) -> None:
        self.blocks, self.q_cams, self.g_cams = source.numpy_blocks(), source.q_cams, source.g_cams
        self.groups = groups = group_gallery(source.q_pids, source.g_pids)
        top = np.zeros(_BINS, dtype=np.int64)
        genuine: List[np.ndarray] = []
        for r0, d in self.blocks():
            check_finite_rows(d, r0)
            rows, cols, is_gen = same_pid_entries(groups, r0, d.shape[0], self.q_cams, self.g_cams)
            same = d[rows, cols]
            top += np.bincount((float_keys(d).ravel() >> 16).astype(np.int64), minlength=_BINS)
            top -= np.bincount((float_keys(same) >> 16).astype(np.int64), minlength=_BINS)
            genuine.append(same[is_gen])
        self.top = top
        self.below_bin = np.concatenate([[0], np.cumsum(top)])  # impostors below each bin's first key
        self.impostors = int(self.below_bin[-1])
        self.genuine = np.sort(np.concatenate(genuine)) if genuine else np.zeros(0, np.float32)
        self.fine: Dict[int, np.ndarray] = {}

    def refine(self, bins: Sequence[int]) -> None:
        """Pass 2: exact counts of every key inside `bins` (cumulative, per bin)."""
        bins = sorted(set(int(b) for b in bins if 0 <= b < _BINS) - set(self.fine))
        if not bins:
            return
        slot = np.full(_BINS, -1, dtype=np.int64)
        slot[bins] = np.arange(len(bins))
        counts = np.zeros(len(bins) * _BINS, dtype=np.int64)

        def add(keys: np.ndarray, sign: int) -> None:
            s = slot[(keys >> 16).astype(np.int64)]
            keep = s >= 0
            idx = s[keep] * _BINS + (keys[keep] & 0xFFFF).astype(np.int64)
            counts[:] += sign * np.bincount(idx, minlength=len(counts))

        for r0, d in self.blocks():
            rows, cols, _ = same_pid_entries(self.groups, r0, d.shape[0], self.q_cams, self.g_cams)
            add(float_keys(d).ravel(), 1)
            add(float_keys(d[rows, cols]), -1)
        for i, b in enumerate(bins):
            self.fine[b] = np.cumsum(counts[i * _BINS:(i + 1) * _BINS])

    def impostors_below(self, keys: np.ndarray) -> np.ndarray:
        """Impostor pairs below each key of `keys` (int64; all in one refined bin, or at bin starts, or 2**32)."""
        keys = np.asarray(keys, dtype=np.int64)
        b, low = np.minimum(keys >> 16, _BINS), keys & 0xFFFF
        out = self.below_bin[b].copy()
        inside = (low > 0) & (b < _BINS)
        for bin_ in np.unique(b[inside]):
            if not self.top[int(bin_)]:
                continue  # a bin without impostors (a genuine distance's key, say): none inside to count
            sel = inside & (b == bin_)
            out[sel] += self.fine[int(bin_)][low[sel] - 1]
        return out

    def genuine_below(self, values: np.ndarray) -> np.ndarray:
        return np.searchsorted(self.genuine, np.asarray(values, dtype=np.float64), side="left")

    def kth_bin(self, k: int) -> int:
        """The bin holding the (k + 1)-th smallest impostor key."""
        return int(np.searchsorted(self.below_bin[1:], k + 1, side="left"))

    def kth_key(self, k: int) -> int:
        b = self.kth_bin(k)
        within = k + 1 - int(self.below_bin[b])
        return (b << 16) | int(np.searchsorted(self.fine[b], within, side="left"))


def _rates(counts: _Counts, keys: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FAR, FRR, threshold value) at thresholds given as keys (accept ``d < threshold``)."""
    values = key_values(keys)
    far = counts.impostors_below(keys) / counts.impostors
    frr = 1.0 - counts.genuine_below(values) / len(counts.genuine)
    return far, frr, values


def _eer_bin(counts: _Counts) -> int:
    """The bin in which FAR(t) - FRR(t) turns non-negative (from the counts at bin edges)."""
    far, frr, _ = _rates(counts, np.arange(_BINS + 1, dtype=np.int64) << 16)
    first = int(np.argmax(far - frr >= 0))  # the edge at +inf always qualifies
    return max(first - 1, 0)


def _next_impostor_bin(counts: _Counts, b: int) -> int:
    """The first bin after `b` holding an impostor key (``_BINS`` when none)."""
    later = np.flatnonzero(counts.top[b + 1:])
    return b + 1 + int(later[0]) if len(later) else _BINS


def _eer(counts: _Counts, b: int) -> Tuple[float, float]:
    """``min_t max(FAR, FRR)`` and the distance threshold reaching it.

    Both rates change only at distances. With t1 the first distance at which FAR >= FRR and t0
    the distance before it, max(FAR, FRR) falls until t0 (it is FRR there) and rises from t1 (it
    is FAR): the EER is ``min(FRR(t0), FAR(t1))``, at t1 when that is not larger, else at t0.
    The crossing lies in bin `b` or at its upper edge, so t0 is a distance of the bin and t1 one
    of the bin or the first distance after it. Bin `b` and the next impostor bin are refined.
    """
    start = b << 16
    imp = start + np.flatnonzero(np.diff(np.concatenate([[0], counts.fine[b]])))
    lo, hi = key_values(np.array([start, start + _BINS]))
    gen = counts.genuine[(counts.genuine >= lo) & (counts.genuine < hi)]
    after = [1 << 32]
    nb = _next_impostor_bin(counts, b)
    if nb < _BINS:
        after.append((nb << 16) + int(np.argmax(counts.fine[nb] > 0)))
    later_gen = counts.genuine[counts.genuine >= hi]
    if len(later_gen):
        after.append(int(float_keys(later_gen[:1])[0]))
    keys = np.unique(np.concatenate([imp, float_keys(gen).astype(np.int64), [min(after)]]))
    far, frr, values = _rates(counts, keys)
    i1 = int(np.argmax(far >= frr))  # the last key (+inf or a distance after the bin) always qualifies
    i0 = max(i1 - 1, 0)
    if far[i1] <= frr[i0]:
        return float(far[i1]), float(values[i1])
    return float(frr[i0]), float(values[i0])


def _verification(source: Distances, fars: Sequence[float], roc_points: int) -> Dict[str, Any]:
    fars = check_fars(fars)  # before the passes over the distances
    counts = _Counts(source)
    if counts.impostors == 0:
        raise ValueError("No impostor pair (different identities): verification needs at least two identities.")
    if len(counts.genuine) == 0:
        raise ValueError("No genuine pair (same identity, different camera): check that the query and gallery share "
                         "identities and that camera ids are read correctly.")
    lowest = max(1.0 / counts.impostors, 1e-7)
    grid = np.unique(np.concatenate([np.logspace(np.log10(lowest), 0, roc_points)[:-1], fars]))
    ks = [min(int(math.floor(f * counts.impostors)), counts.impostors - 1) for f in grid]
    eer_bin = _eer_bin(counts)
    counts.refine([counts.kth_bin(k) for k in ks] + [eer_bin, _next_impostor_bin(counts, eer_bin)])
    reached, frr, thresholds = _rates(counts, np.array([counts.kth_key(k) for k in ks], dtype=np.int64))
    tars = 1.0 - frr
    at = {float(f): i for i, f in enumerate(grid)}
    eer, eer_threshold = _eer(counts, eer_bin)
    return {
        "tar": {f: float(tars[at[f]]) for f in fars},
        "threshold": {f: float(thresholds[at[f]]) for f in fars},
        "far_reached": {f: float(reached[at[f]]) for f in fars},
        "eer": float(eer),
        "eer_threshold": float(eer_threshold),
        "num_genuine": int(len(counts.genuine)),
        "num_impostor": int(counts.impostors),
        "roc": {"far": reached, "tar": tars, "threshold": thresholds},
    }


def verification_metrics(
    distmat: ArrayLike,
    q_pids: ArrayLike,
    g_pids: ArrayLike,
    q_camids: ArrayLike,
    g_camids: ArrayLike,
    fars: Sequence[float] = DEFAULT_FARS,
    roc_points: int = ROC_POINTS,
) -> Dict[str, Any]:
    """TAR at each FAR in `fars`, the thresholds, the EER and the ROC of ``[Q, G]`` distances.

    `distmat` and the ids are as :func:`reid.evaluation.evaluate_rank` takes them (lower
    distance = more alike). Returns a dict with ``tar`` and ``threshold`` ({far: value}),
    ``far_reached`` ({far: the FAR the threshold gives, at most far}), ``eer`` and
    ``eer_threshold``, ``num_genuine``, ``num_impostor`` and ``roc`` (``far``, ``tar``,
    ``threshold`` arrays at `roc_points` FARs down to one impostor pair). Definitions in the
    module docstring; exact, with memory beyond `distmat` bounded by a few chunk buffers.

    Raises ValueError for a FAR outside (0, 1), NaN/inf distances, or a protocol without
    genuine or impostor pairs.
    """
    return _verification(MatrixDistances(distmat, q_pids, g_pids, q_camids, g_camids), fars, roc_points)


def verification_metrics_from_features(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    q_pids: ArrayLike,
    g_pids: ArrayLike,
    q_camids: ArrayLike,
    g_camids: ArrayLike,
    metric: str = "cosine",
    fars: Sequence[float] = DEFAULT_FARS,
    roc_points: int = ROC_POINTS,
) -> Dict[str, Any]:
    """:func:`verification_metrics` of ``compute_distance(q_feats, g_feats, metric)``, computing the
    distances a block at a time (twice) so that the query x gallery matrix never exists."""
    source = FeatureDistances(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids, metric)
    return _verification(source, fars, roc_points)


__all__ = ["DEFAULT_FARS", "check_fars", "float_keys", "key_values", "verification_metrics",
           "verification_metrics_from_features"]
