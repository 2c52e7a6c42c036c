"""Online linking: each new tracklet joins the identity it is most like, or starts its own.

The offline linker (reid/tracking/linking.py, ``tools/link_cameras.py``) sees a whole recording
at once; here tracklets arrive over time. Each new tracklet, in order of its start time, is
compared with every identity of the store that holds tracklets of the model: the identity's score
is the mean cosine similarity between the new tracklet's feature and its tracklets' features
(average linkage, as offline). It joins the best-scoring identity whose score reaches the
threshold (the model's calibrated one unless the rules give one) and that no constraint forbids,
and the link (made by the linker, with its score, proposed) is recorded for review; otherwise it
keeps the identity of its own it was given on insert.

Constraints are the offline linker's (:func:`reid.tracking.linking.cannot_link_between`): two
time-overlapping tracklets of one camera are two people, ``max_gap`` seconds between cameras, the
allowed camera transitions; and a tracklet a person rejected from an identity never joins it again.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from reid.tracking.linking import Transitions, cannot_link_between
from reid.tracking.tracklets import Tracklets

from .schema import Identity, Link, Tracklet, TrackletFeature


@dataclass(frozen=True)
class LinkRules:
    """How new tracklets are linked."""

    threshold: Optional[float] = None          # cosine similarity; None: the model's calibrated threshold
    max_gap: Optional[float] = None            # seconds; tracklets of two cameras further apart never link
    transitions: Optional[Transitions] = None  # allowed camera pairs and travel times

    def check(self) -> "LinkRules":
        """Self, or one line naming the rule that cannot work."""
        if self.threshold is not None and not -1.0 <= self.threshold <= 1.0:
            raise ValueError(f"link threshold {self.threshold} must be a cosine similarity in [-1, 1] (e.g. 0.5).")
        if self.max_gap is not None and not self.max_gap >= 0:
            raise ValueError(f"max gap {self.max_gap} must be a number of seconds >= 0.")
        return self


def as_tracklets(camera: np.ndarray, start: np.ndarray, end: np.ndarray, features: np.ndarray) -> Tracklets:
    """Store tracklets as the offline linker's :class:`Tracklets` (frames: milliseconds, so that the
    same-camera overlap test compares times)."""
    n = len(camera)
    first = np.round(np.asarray(start, np.float64) * 1000).astype(np.int64)
    last = np.round(np.asarray(end, np.float64) * 1000).astype(np.int64)
    zeros = np.zeros(n, np.int64)
    return Tracklets(sequence=zeros, camera=np.asarray(camera, np.int64), local_id=np.arange(n, dtype=np.int64),
                     first=first, last=last, start_s=np.asarray(start, np.float64), end_s=np.asarray(end, np.float64),
                     num_boxes=zeros, features=np.asarray(features, np.float32))


def _held(s: Session, model_id: int, exclude: Sequence[int]):
    rows = s.execute(select(Tracklet.id, Tracklet.camera_id, Tracklet.start, Tracklet.end, Tracklet.identity_id,
                            TrackletFeature.vector)
                     .join(TrackletFeature, TrackletFeature.tracklet_id == Tracklet.id)
                     .where(TrackletFeature.model_id == model_id)
                     .order_by(Tracklet.id)).all()
    skip = set(exclude)
    return [r for r in rows if r[0] not in skip]


def choose_identity(feature: np.ndarray, new: Tracklets, held: Tracklets, held_identity: np.ndarray,
                    threshold: float, rules: LinkRules, rejected: Sequence[int] = ()) -> Optional[tuple]:
    """``(identity, score)`` the new tracklet (one row of `new`) joins among the `held` tracklets'
    identities, or None (module docstring)."""
    if len(held) == 0:
        return None
    ids, group = np.unique(held_identity, return_inverse=True)
    sims = (held.features @ np.asarray(feature, np.float32)).astype(np.float64)  # float32 product: no [T, D] copy
    score = np.bincount(group, sims, len(ids)) / np.bincount(group, minlength=len(ids))
    blocked = np.bincount(group, cannot_link_between(new, held, rules.max_gap, rules.transitions)[0],
                          len(ids)) > 0
    blocked |= np.isin(ids, np.asarray(list(rejected), np.int64))
    allowed = np.flatnonzero(~blocked & (score >= threshold))
    if not len(allowed):
        return None
    best = allowed[np.lexsort((ids[allowed], -score[allowed]))[0]]  # ties: the older identity
    return int(ids[best]), float(score[best])


def link_new_tracklets(s: Session, model: Any, tracklet_ids: Sequence[int], rules: LinkRules, now: float) -> int:
    """Link the new tracklets (inserted in this transaction, each with an identity of its own) to the
    store's identities; returns how many joined an existing identity. Nothing is linked without a
    threshold (the rules' or the model's)."""
    threshold = rules.threshold if rules.threshold is not None else model.threshold
    if threshold is None or not tracklet_ids:
        return 0
    rows = _held(s, model.id, tracklet_ids)
    new_rows = s.execute(select(Tracklet, TrackletFeature.vector)
                         .join(TrackletFeature, TrackletFeature.tracklet_id == Tracklet.id)
                         .where(Tracklet.id.in_(list(tracklet_ids)), TrackletFeature.model_id == model.id)
                         .order_by(Tracklet.start, Tracklet.id)).all()
    # columns of the held tracklets with room for the new ones, which join them one by one
    n, total = len(rows), len(rows) + len(new_rows)
    cam, ident = np.zeros(total, np.int64), np.zeros(total, np.int64)
    start, end = np.zeros(total), np.zeros(total)
    feats = np.zeros((total, model.dim), np.float32)
    if rows:
        cam[:n], start[:n], end[:n], ident[:n] = (np.array([r[k] for r in rows]) for k in (1, 2, 3, 4))
        feats[:n] = np.frombuffer(b"".join(r[5] for r in rows), np.float32).reshape(n, model.dim)
    joined = 0
    for t, blob in new_rows:
        f = np.frombuffer(blob, np.float32)
        held = as_tracklets(cam[:n], start[:n], end[:n], feats[:n])
        new = as_tracklets(np.array([t.camera_id]), np.array([t.start]), np.array([t.end]), f[None])
        choice = choose_identity(f, new, held, ident[:n], threshold, rules)
        if choice is not None:
            own = t.identity_id
            t.identity_id = choice[0]
            s.flush()
            s.execute(delete(Identity).where(Identity.id == own))
            s.add(Link(tracklet_id=t.id, identity_id=choice[0], score=choice[1], made_by="linker", by_whom="",
                       status="proposed", created=now))
            joined += 1
        cam[n], start[n], end[n], ident[n], feats[n] = t.camera_id, t.start, t.end, t.identity_id, f
        n += 1
    s.flush()
    return joined


__all__ = ["LinkRules", "as_tracklets", "choose_identity", "link_new_tracklets"]
