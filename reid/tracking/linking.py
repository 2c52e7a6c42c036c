"""Linking tracklets across cameras into identities: constrained average-linkage clustering.

Every tracklet starts as its own identity. The two identities at the smallest average cosine
distance (the mean over all pairs of their tracklets' features: average linkage) are merged, as
long as that distance is below the threshold and no constraint forbids it; then the next pair,
until no allowed pair is below the threshold. A person whom no other camera saw stays alone: open
set, decided by the threshold (a calibrated one: the model's ``thresholds.json``).

Constraints ("cannot link", :func:`cannot_link`), between tracklets and so between identities:
an identity never holds two tracklets that cannot link.

* Always: two tracklets of one camera whose time spans overlap (first..last frame) are two
  people (one person is one box per frame in a camera).
* ``max_gap`` (seconds): two tracklets of different cameras further apart in time than this
  (the end of the earlier to the start of the later) are not one person.
* ``transitions`` (:func:`load_transitions`): only the listed camera pairs are linked, each
  with its travel time in ``[min_seconds, max_seconds]`` (the gap as above; 0 when the two
  overlap in time, i.e. cameras that see the same place). Tracklets of one camera are not
  affected (a person may come back).

Frames are synchronised across the cameras of a scene (frame k is the same instant); times are
``(frame - 1) / frame rate`` of each camera.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from reid.utils.path_kinds import check_file

from .tracklets import Tracklets

TRANSITIONS_EXAMPLE = '{"transitions": [{"cameras": [1, 2], "min_seconds": 0, "max_seconds": 60}]}'


@dataclass(frozen=True)
class Transitions:
    """Allowed camera pairs (unordered) and their travel time range in seconds."""

    pairs: Dict[Tuple[int, int], Tuple[float, float]]

    def check_cameras(self, cameras: Sequence[int], path: str) -> "Transitions":
        """`self` when every camera it names is one of the scene's `cameras`; a one-line ValueError otherwise
        (a pair naming no camera of the scene would leave the pairs meant for it unlisted: never linked)."""
        unknown = sorted({c for pair in self.pairs for c in pair} - set(int(c) for c in cameras))
        if unknown:
            raise ValueError(f"{path}: camera {unknown[0]} is not a camera of these sequences (cameras "
                             f"{', '.join(map(str, sorted(set(cameras))))}: seqinfo.ini camera=, else their order); "
                             "correct the camera numbers.")
        return self

    def allowed(self, camera_a: int, camera_b: int) -> Optional[Tuple[float, float]]:
        """``(min_seconds, max_seconds)`` of the pair, or None when it is not listed."""
        return self.pairs.get((min(camera_a, camera_b), max(camera_a, camera_b)))


def load_transitions(path: str) -> Transitions:
    """Read a transitions file, JSON like :data:`TRANSITIONS_EXAMPLE` (one entry per camera pair;
    ``min_seconds`` default 0, ``max_seconds`` default no limit). One line naming the file and the
    entry when it is not that."""
    check_file(path, "Transitions file", f"name a JSON file like {TRANSITIONS_EXAMPLE}.")
    hint = f"write it like {TRANSITIONS_EXAMPLE}"
    try:
        with open(path, encoding="utf-8") as f:
            record = json.loads(f.read(1 << 20))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError(f"{path}: not JSON; {hint}.") from None
    entries = record.get("transitions") if isinstance(record, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{path}: no list 'transitions'; {hint}.")
    pairs: Dict[Tuple[int, int], Tuple[float, float]] = {}
    for n, entry in enumerate(entries):
        where = f"{path}: transitions[{n}]"
        cams = entry.get("cameras") if isinstance(entry, dict) else None
        if (not isinstance(cams, list) or len(cams) != 2 or not all(isinstance(c, int) and not isinstance(c, bool)
                                                                     for c in cams) or cams[0] == cams[1]):
            raise ValueError(f"{where}: 'cameras' must be two different camera numbers (seqinfo.ini camera=); {hint}.")
        low, high = entry.get("min_seconds", 0), entry.get("max_seconds", math.inf)
        for name, value in (("min_seconds", low), ("max_seconds", high)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or value < 0:
                raise ValueError(f"{where}: {name} {value!r} is not a number >= 0; {hint}.")
        if low > high:
            raise ValueError(f"{where}: min_seconds {low} is above max_seconds {high}; swap them.")
        key = (min(cams), max(cams))
        if key in pairs:
            raise ValueError(f"{where}: cameras {key[0]} and {key[1]} are listed twice; keep one entry per pair.")
        pairs[key] = (float(low), float(high))
    return Transitions(pairs)


def time_gaps(a: Tracklets, b: Optional[Tracklets] = None) -> np.ndarray:
    """``[A, B]`` seconds from the end of the earlier tracklet to the start of the later (`b`
    defaults to `a`); 0 when their time spans overlap."""
    b = a if b is None else b
    return np.maximum(0.0, np.maximum(a.start_s[:, None] - b.end_s[None, :], b.start_s[None, :] - a.end_s[:, None]))


def cannot_link_between(a: Tracklets, b: Tracklets, max_gap: Optional[float] = None,
                        transitions: Optional[Transitions] = None) -> np.ndarray:
    """``[A, B]`` bool: the pairs (one of `a`, one of `b`) that may not be one person (module
    docstring); a tracklet and itself are not told apart here."""
    same_cam = a.camera[:, None] == b.camera[None, :]
    overlap = (a.first[:, None] <= b.last[None, :]) & (b.first[None, :] <= a.last[:, None])
    cannot = same_cam & overlap
    gaps = time_gaps(a, b)
    if max_gap is not None:
        cannot |= ~same_cam & (gaps > max_gap)
    if transitions is not None:
        cameras = np.unique(np.concatenate([a.camera, b.camera]))
        # per camera pair, not per tracklet pair: a table of cameras x cameras
        low = np.full((len(cameras), len(cameras)), np.inf)
        high = np.full((len(cameras), len(cameras)), -np.inf)
        for i in range(len(cameras)):
            for j in range(len(cameras)):
                allowed = transitions.allowed(int(cameras[i]), int(cameras[j]))
                if allowed is not None:
                    low[i, j], high[i, j] = allowed
        ca, cb = np.searchsorted(cameras, a.camera)[:, None], np.searchsorted(cameras, b.camera)[None, :]
        cannot |= ~same_cam & ((gaps < low[ca, cb]) | (gaps > high[ca, cb]))
    return cannot


def cannot_link(tracklets: Tracklets, max_gap: Optional[float] = None,
                transitions: Optional[Transitions] = None) -> np.ndarray:
    """``[T, T]`` bool: the pairs of tracklets that may not be one person (module docstring)."""
    cannot = cannot_link_between(tracklets, tracklets, max_gap, transitions)
    np.fill_diagonal(cannot, False)
    return cannot


def cosine_distances(features: np.ndarray) -> np.ndarray:
    """``1 - f_i . f_j`` of L2-normalised rows, in [0, 2], float64."""
    f = np.asarray(features, np.float64)
    return np.clip(1.0 - f @ f.T, 0.0, 2.0)


def average_linkage(distances: np.ndarray, cannot: np.ndarray, threshold: float) -> np.ndarray:
    """Cluster labels ``[T]`` (each the index of a cluster's first member) of agglomerative
    average-linkage clustering: repeatedly merge the two clusters whose mean pairwise distance is
    smallest and below `threshold`, never two clusters with a cannot-link pair between them.

    Average linkage by the Lance-Williams update
    ``d(k, i+j) = (n_i d(k, i) + n_j d(k, j)) / (n_i + n_j)``; ties merge the lowest indices first."""
    n = len(distances)
    raw = np.array(distances, np.float64)
    blocked = np.array(cannot, bool)
    masked = np.where(blocked, np.inf, raw)
    np.fill_diagonal(masked, np.inf)
    size = np.ones(n)
    alive = np.ones(n, bool)
    label = np.arange(n)
    while n > 1:
        flat = int(np.argmin(masked))
        i, j = divmod(flat, n)
        if not masked[i, j] < threshold:
            break
        i, j = min(i, j), max(i, j)  # j joins i: the label stays the first member's
        raw[i] = (size[i] * raw[i] + size[j] * raw[j]) / (size[i] + size[j])
        raw[:, i] = raw[i]
        blocked[i] |= blocked[j]
        blocked[:, i] = blocked[i]
        alive[j] = False
        masked[i] = np.where(blocked[i] | ~alive, np.inf, raw[i])  # merged-away clusters stay out
        masked[:, i] = masked[i]
        masked[i, i] = np.inf
        masked[j], masked[:, j] = np.inf, np.inf
        size[i] += size[j]
        label[label == j] = i
    return label


def link_tracklets(tracklets: Tracklets, threshold: float, max_gap: Optional[float] = None,
                   transitions: Optional[Transitions] = None) -> np.ndarray:
    """Identity ``[T]`` of each tracklet, numbered 0, 1, ... in order of each identity's first
    tracklet: cosine distances of the tracklet features, the constraints, average linkage."""
    if not 0.0 < threshold <= 2.0:
        raise ValueError(f"threshold {threshold} must be a cosine distance in (0, 2].")
    if len(tracklets) == 0:
        return np.zeros(0, np.int64)
    labels = average_linkage(cosine_distances(tracklets.features), cannot_link(tracklets, max_gap, transitions),
                             threshold)
    # a label is its cluster's first member, so sorted labels number identities by first tracklet
    return np.unique(labels, return_inverse=True)[1].reshape(-1).astype(np.int64)


__all__ = ["TRANSITIONS_EXAMPLE", "Transitions", "average_linkage", "cannot_link", "cannot_link_between", "cosine_distances",
           "link_tracklets", "load_transitions", "time_gaps"]
