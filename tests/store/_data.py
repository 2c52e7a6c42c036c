"""Small, deterministic inputs for the sightings-store tests (tests/store/), and independent
readings of what a store wrote (raw rows, brute-force rankings) to check it against."""
from __future__ import annotations

import hashlib
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from reid.store.crops import encode_crop
from reid.store.records import NewSighting, NewTracklet

#: A weights identity as the toolkit records it (the hash is what register_model compares).
WEIGHTS = {"weights_sha256": "ab" * 32, "backend": "torch", "arch": "resnet50"}
OTHER_WEIGHTS = {"weights_sha256": "cd" * 32, "backend": "torch", "arch": "resnet50"}
#: Seconds since 1970 of the tests' first frame (any fixed day will do).
T0 = 1_700_000_000.0


def crop_bytes(seed: int) -> bytes:
    """JPEG bytes of a small seeded random crop (distinct seeds: distinct bytes)."""
    rng = np.random.default_rng(seed)
    return encode_crop(rng.integers(0, 256, (12, 6, 3), dtype=np.uint8))


def unit(v: np.ndarray) -> np.ndarray:
    """Rows (or one vector) L2-normalised in float64, then float32: an independent formula."""
    v = np.asarray(v, np.float64)
    return (v / np.linalg.norm(v, axis=-1, keepdims=True)).astype(np.float32)


def tracklet(source: str, camera: int, times: Sequence[float], feats: np.ndarray,
             boxes: Optional[Sequence[Tuple[float, float, float, float]]] = None,
             frames: Optional[Sequence[Optional[int]]] = None, qualities: Optional[Sequence[float]] = None,
             seed: int = 0, camera_name: str = "") -> NewTracklet:
    """A tracklet of ``len(times)`` sightings, keys ``<source>/<k>``, one feature row each."""
    feats = np.asarray(feats, np.float32).reshape(len(times), -1)
    sightings = []
    for k, t in enumerate(times):
        sightings.append(NewSighting(
            source=f"{source}/{k}", time=float(t),
            box=tuple(boxes[k]) if boxes is not None else (10.0 + k, 20.0 + 2 * k, 30.0, 60.0 + k),
            crop=crop_bytes(crop_seed(source, k, seed)), feature=feats[k],
            frame=frames[k] if frames is not None else k + 1,
            quality=qualities[k] if qualities is not None else 1.0))
    return NewTracklet(source=source, camera=camera, sightings=sightings, camera_name=camera_name)


def crop_seed(source: str, k: int, seed: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{source}/{k}/{seed}".encode()).digest()[:4], "little")


def random_tracklets(rng: np.random.Generator, count: int, dim: int, cameras: Sequence[int] = (1, 2, 3),
                     per: Tuple[int, int] = (1, 4), prefix: str = "r", t0: float = T0,
                     centers: Optional[np.ndarray] = None) -> List[NewTracklet]:
    """`count` tracklets on the `cameras` (round robin), 1..3 sightings each a second apart, random
    times over an hour, Gaussian features (around `centers` when given: clustered, as real ones)."""
    out = []
    for i in range(count):
        n = int(rng.integers(per[0], per[1]))
        start = t0 + float(rng.uniform(0, 3600))
        if centers is None:
            feats = rng.normal(size=(n, dim))
        else:
            feats = centers[rng.integers(0, len(centers))] + 0.25 * rng.normal(size=(n, dim))
        out.append(tracklet(f"{prefix}{i}", int(cameras[i % len(cameras)]), [start + k for k in range(n)],
                            feats, seed=i))
    return out


def flat(tracklets: Iterable[NewTracklet]) -> List[NewSighting]:
    return [s for t in tracklets for s in t.sightings]


def brute_force(feats: np.ndarray, ids: np.ndarray, query: np.ndarray, k: int,
                keep: Optional[np.ndarray] = None) -> Tuple[List[int], np.ndarray]:
    """Ids and cosine similarities of the `k` rows most like `query` (float64; ties: lower row
    first), among the rows `keep` selects."""
    f = np.asarray(feats, np.float64)
    f = f / np.linalg.norm(f, axis=1, keepdims=True)
    q = np.asarray(query, np.float64)
    scores = f @ (q / np.linalg.norm(q))
    rows = np.arange(len(f)) if keep is None else np.flatnonzero(keep)
    order = rows[np.lexsort((rows, -scores[rows]))][:k]
    return [int(ids[r]) for r in order], scores[order]


def stored_features(engine, model_id: int) -> Dict[str, np.ndarray]:
    """Per stored feature row (id order): feature id, sighting id, camera, time and vector, read
    with plain SQL."""
    from sqlalchemy import text

    with engine.connect() as c:
        rows = c.execute(text(
            "SELECT f.id, f.sighting_id, s.camera_id, s.time, f.vector FROM features f "
            "JOIN sightings s ON s.id = f.sighting_id WHERE f.model_id = :m ORDER BY f.id"), {"m": model_id}).all()
    return {"feature_id": np.array([r[0] for r in rows], np.int64),
            "sighting_id": np.array([r[1] for r in rows], np.int64),
            "camera": np.array([r[2] for r in rows], np.int64),
            "time": np.array([r[3] for r in rows], np.float64),
            "feats": np.stack([np.frombuffer(bytes(r[4]), np.float32) for r in rows]) if rows
            else np.zeros((0, 0), np.float32)}


def table_rows(engine, sql: str, **params) -> list:
    """Rows of a plain SQL query, as tuples."""
    from sqlalchemy import text

    with engine.connect() as c:
        return [tuple(r) for r in c.execute(text(sql), params).all()]


def execute(engine, sql: str, **params) -> None:
    """Run one plain SQL statement and commit it (a change made behind the store's back)."""
    from sqlalchemy import text

    with engine.begin() as c:
        c.execute(text(sql), params)
