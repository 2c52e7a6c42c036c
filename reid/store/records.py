"""What goes into a store: tracklets with their sightings, as plain data (no database types).

An ingest source (reid/store/ingest.py) turns track files, crop folders or galleries into these;
:meth:`reid.store.store.Store.add_tracklets` writes them in one transaction.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .schema import MAX_KEY


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
    """One person in one camera over a time span, with its sightings."""

    source: str                       # unique key of this tracklet in its input
    camera: int
    sightings: List[NewSighting] = field(default_factory=list)
    camera_name: str = ""

    def check(self) -> "NewTracklet":
        """Self, or one line naming what is wrong (an empty tracklet, a key too long, a bad time)."""
        if not self.sightings:
            raise ValueError(f"tracklet {self.source!r} has no sightings.")
        for key in [self.source] + [s.source for s in self.sightings]:
            if not key or len(key) > MAX_KEY:
                raise ValueError(f"source key {key[:80]!r} must have 1..{MAX_KEY} characters.")
        times = np.array([s.time for s in self.sightings], np.float64)
        if not np.all(np.isfinite(times)):
            raise ValueError(f"tracklet {self.source!r} has a sighting time that is not a number.")
        return self

    @property
    def start(self) -> float:
        return float(min(s.time for s in self.sightings))

    @property
    def end(self) -> float:
        return float(max(s.time for s in self.sightings))

    def pooled(self) -> np.ndarray:
        """The tracklet's feature: its sightings' L2-normalised features weighted by quality, normalised
        (reid/tracking/tracklets.py's pooling; the plain mean when every quality is 0)."""
        from reid.tracking.tracklets import pool_features

        feats = np.stack([np.asarray(s.feature, np.float32).reshape(-1) for s in self.sightings])
        feats = feats / np.maximum(np.linalg.norm(feats, axis=1, keepdims=True), 1e-12)
        weights = np.array([s.quality for s in self.sightings], np.float64)
        return pool_features(feats, weights, np.zeros(len(feats), np.int64), 1)[0]


__all__ = ["NewSighting", "NewTracklet", "NotInStore"]
