"""What goes into a store: tracklets with their sightings, as plain data (no database types).

An ingest source (reid/store/ingest.py) turns track files, crop folders or galleries into these;
:meth:`reid.store.store.Store.add_tracklets` writes them in one transaction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .schema import MAX_KEY, MAX_NAME

#: What PostgreSQL's INTEGER (the cameras' ids, the sightings' frames) holds; SQLite would take more,
#: so a store that moves to PostgreSQL (reid/store/export.py) would find rows it cannot hold.
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1


class NotInStore(KeyError, ValueError):
    """A model, sighting, identity, link, ... that the store does not hold (a ValueError too, so that the
    tools print it as one line)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


@dataclass
class NewSighting:
    """One box of a new tracklet."""

    source: str                       # unique key of this box in its input (idempotent ingest)
    time: float                       # seconds since 1970-01-01 UTC
    box: Tuple[float, float, float, float]  # x, y, w, h in the frame (0, 0, w, h for a crop)
    crop: bytes                       # JPEG bytes of the crop
    feature: np.ndarray               # [D] the model's feature of the crop
    frame: Optional[int] = None       # frame number in its sequence or video
    quality: float = 1.0              # weight of this sighting in the tracklet's pooled feature


@dataclass
class NewTracklet:
    """One person in one camera over a time span, with its sightings.

    The span is ``start_time``..``end_time`` when given, else its sightings' first and last time. A
    source that keeps only some boxes as sightings (reid/store/ingest_tracks.py: a few crops spread
    over the track) gives the whole track's span: online linking's same-camera overlap rule and
    ``max_gap`` compare spans, and a span cut to the chosen crops would let two overlapping tracks of
    one camera be one person."""

    source: str                       # unique key of this tracklet in its input
    camera: int
    sightings: List[NewSighting] = field(default_factory=list)
    camera_name: str = ""
    start_time: Optional[float] = None  # seconds since 1970 UTC; None: the first sighting's time
    end_time: Optional[float] = None    # None: the last sighting's time

    def check(self) -> "NewTracklet":
        """Self, or one line naming what is wrong (an empty tracklet, a key too long, a bad time or span,
        a camera, camera name or frame the store's databases cannot all hold)."""
        if not self.sightings:
            raise ValueError(f"tracklet {self.source!r} has no sightings.")
        for key in [self.source] + [s.source for s in self.sightings]:
            if not key or len(key) > MAX_KEY:
                raise ValueError(f"source key {key[:80]!r} must have 1..{MAX_KEY} characters.")
        # SQLite stores any of these; PostgreSQL refuses them (after the batches before were written)
        if not 0 <= int(self.camera) <= INT32_MAX:
            raise ValueError(f"tracklet {self.source!r}: camera {self.camera} is not in 0..{INT32_MAX}; number the "
                             "cameras within that range.")
        if len(self.camera_name) > MAX_NAME:
            raise ValueError(f"tracklet {self.source!r}: camera name {self.camera_name[:40]!r}... has "
                             f"{len(self.camera_name)} characters; give the camera (sequence) a name of at most "
                             f"{MAX_NAME}.")
        for s in self.sightings:
            if s.frame is not None and not INT32_MIN <= int(s.frame) <= INT32_MAX:
                raise ValueError(f"tracklet {self.source!r}: sighting {s.source[:80]!r} has frame {s.frame}, not in "
                                 f"{INT32_MIN}..{INT32_MAX}; number the frames within that range.")
        times = np.array([s.time for s in self.sightings], np.float64)
        if not np.all(np.isfinite(times)):
            raise ValueError(f"tracklet {self.source!r} has a sighting time that is not a number.")
        for name, value, ok in (("start_time", self.start_time, lambda v: v <= times.min()),
                                ("end_time", self.end_time, lambda v: v >= times.max())):
            if value is not None and not (np.isfinite(value) and ok(float(value))):
                raise ValueError(f"tracklet {self.source!r}: {name} {value} is not a time that contains every "
                                 f"sighting ({times.min()}..{times.max()}); give the span of the whole track, or "
                                 "leave it out.")
        return self

    @property
    def start(self) -> float:
        if self.start_time is not None:
            return float(self.start_time)
        return float(min(s.time for s in self.sightings))

    @property
    def end(self) -> float:
        if self.end_time is not None:
            return float(self.end_time)
        return float(max(s.time for s in self.sightings))

    def pooled(self) -> np.ndarray:
        """The tracklet's feature: its sightings' L2-normalised features weighted by quality, normalised
        (reid/tracking/tracklets.py's pooling; the plain mean when every quality is 0)."""
        from reid.tracking.tracklets import pool_features

        feats = np.stack([np.asarray(s.feature, np.float32).reshape(-1) for s in self.sightings])
        feats = feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
        weights = np.array([s.quality for s in self.sightings], np.float64)
        return pool_features(feats, weights, np.zeros(len(feats), np.int64), 1)[0]


__all__ = ["INT32_MAX", "INT32_MIN", "NewSighting", "NewTracklet", "NotInStore"]
