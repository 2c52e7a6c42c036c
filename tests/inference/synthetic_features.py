"""Deterministic clustered feature sets shaped like a re-ID gallery, for search tests and benchmarks.

Real re-ID features are not uniform on the sphere: images of one person sit close to their
identity's centre, and identities group by appearance (clothing colour, pose, camera). The
generator mirrors that with two levels: `num_groups` unit "appearance" centres, identity
centres around them, and images around their identity (about `per_id` images each). Cosine
similarities come out like a trained model's: ~0.5 between images of one identity, ~0.18
between images of two identities of one group, ~0 otherwise. Queries are further images of
gallery identities, drawn after the gallery from the same stream.

The rows are written block-wise into one preallocated float32 array (1,000,000 x 256 needs
1 GB and only a few MB more), and the same arguments give the same arrays on every run.
"""
from __future__ import annotations

from typing import Tuple

import numpy as np

BLOCK = 65536


def _unit(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def clustered_features(num: int, dim: int, num_queries: int = 0, per_id: int = 20, seed: int = 0,
                       noise: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
    """(gallery ``[num, dim]``, queries ``[num_queries, dim]``), float32, L2-normalised rows.

    `noise` scales each image's offset from its identity (1.0: cos ~0.7; 0.1: near-duplicates).
    """
    rng = np.random.default_rng(seed)
    num_ids = max(1, num // per_id)
    num_groups = max(1, int(round(num_ids ** 0.5)))
    groups = _unit(rng.standard_normal((num_groups, dim), dtype=np.float32))
    # cos(identity, its group) ~ 0.6; cos(image, its identity) ~ 0.7.
    ids = groups[rng.integers(0, num_groups, num_ids)]
    ids += rng.standard_normal(ids.shape, dtype=np.float32) * np.float32(1.33 / dim ** 0.5)
    ids = _unit(ids)
    out = []
    for rows in (num, num_queries):
        feats = np.empty((rows, dim), np.float32)
        for start in range(0, rows, BLOCK):
            stop = min(rows, start + BLOCK)
            block = ids[rng.integers(0, num_ids, stop - start)]
            block += rng.standard_normal(block.shape, dtype=np.float32) * np.float32(noise / dim ** 0.5)
            feats[start:stop] = _unit(block)
        out.append(feats)
    return out[0], out[1]
