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


def identity_centres(num_ids: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    """``[num_ids, dim]`` unit identity centres around ~sqrt(num_ids) appearance groups (cos(identity,
    its group) ~ 0.6); an image is ``unit(centre + noise * N(0, 1) / sqrt(dim))`` (noise 1.0: cos ~0.7)."""
    num_groups = max(1, int(round(num_ids ** 0.5)))
    groups = _unit(rng.standard_normal((num_groups, dim), dtype=np.float32))
    ids = groups[rng.integers(0, num_groups, num_ids)]
    ids += rng.standard_normal(ids.shape, dtype=np.float32) * np.float32(1.33 / dim ** 0.5)
    return _unit(ids)


def clustered_features(num: int, dim: int, num_queries: int = 0, per_id: int = 20, seed: int = 0,
                       noise: float = 1.0) -> Tuple[np.ndarray, np.ndarray]:
    """(gallery ``[num, dim]``, queries ``[num_queries, dim]``), float32, L2-normalised rows.

    `noise` scales each image's offset from its identity (1.0: cos ~0.7; 0.1: near-duplicates).
    """
    rng = np.random.default_rng(seed)
    num_ids = max(1, num // per_id)
    ids = identity_centres(num_ids, dim, rng)
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


def tracklet_features(num: int, dim: int, per_id: int = 20, per_track: int = 5, num_cams: int = 6, seed: int = 0,
                      latent_dim: int = 48, track_noise: float = 0.5, crop_noise: float = 0.25, cam_shift: float = 0.5,
                      iso_noise: float = 0.3) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features ``[num, dim]`` float32 L2-normalised, pids ``[num]``, camids ``[num]``) shaped like
    the crops a tracker collects from a camera network, for clustering tests and benchmarks.

    Identities group by appearance as in :func:`clustered_features`. Each identity is seen in
    ``per_id // per_track`` tracklets, each in one camera: the tracklet's centre is the
    identity's plus that camera's offset (`cam_shift`) and its own offset (`track_noise`: pose,
    background), and its `per_track` crops are near-duplicates around it (`crop_noise`).
    All of that varies in a `latent_dim`-dimensional subspace, plus isotropic noise of norm
    `iso_noise` in all `dim` dimensions: a trained model's features are far from isotropic
    (the demo model's test features: participation ratio ~32, 79% of the variance in 32
    principal directions; these: ~35 and ~75%). Cosine similarities at the defaults: ~0.9
    between crops of one tracklet, ~0.5 between crops of one identity, ~0.6 to a crop's most
    similar other identity (demo model: 0.52 and 0.62). Rows come identity by identity,
    tracklet by tracklet, written block-wise (1,000,000 x 512 needs its 2 GB and a few MB more).
    """
    rng = np.random.default_rng(seed)
    per_track = max(1, min(per_track, per_id))
    tracks_per_id = max(1, per_id // per_track)
    rows_per_id = tracks_per_id * per_track
    num_ids = max(1, -(-num // rows_per_id))
    num_groups = max(1, int(round(num_ids ** 0.5)))
    r = min(latent_dim, dim)
    embed = np.linalg.qr(rng.standard_normal((dim, r)))[0].astype(np.float32).T  # [r, dim], orthonormal rows
    groups = _unit(rng.standard_normal((num_groups, r), dtype=np.float32))
    cams = _unit(rng.standard_normal((num_cams, r), dtype=np.float32)) * np.float32(cam_shift)
    feats = np.empty((num, dim), np.float32)
    pids = np.repeat(np.arange(num_ids, dtype=np.int64), rows_per_id)[:num]
    track_cam = rng.integers(0, num_cams, num_ids * tracks_per_id)
    camids = np.repeat(track_cam, per_track)[:num]
    ids_per_block = max(1, BLOCK // rows_per_id)
    scale = np.float32(1.0 / r ** 0.5)
    for i0 in range(0, num_ids, ids_per_block):
        i1 = min(num_ids, i0 + ids_per_block)
        ids = groups[rng.integers(0, num_groups, i1 - i0)]
        ids += rng.standard_normal(ids.shape, dtype=np.float32) * np.float32(1.33) * scale
        tracks = np.repeat(_unit(ids), tracks_per_id, axis=0)
        tracks += cams[track_cam[i0 * tracks_per_id:i1 * tracks_per_id]]
        tracks += rng.standard_normal(tracks.shape, dtype=np.float32) * np.float32(track_noise) * scale
        crops = np.repeat(_unit(tracks), per_track, axis=0)
        crops += rng.standard_normal(crops.shape, dtype=np.float32) * np.float32(crop_noise) * scale
        out = _unit(crops) @ embed
        out += rng.standard_normal(out.shape, dtype=np.float32) * np.float32(iso_noise / dim ** 0.5)
        r0 = i0 * rows_per_id
        r1 = min(num, i1 * rows_per_id)
        feats[r0:r1] = _unit(out)[:r1 - r0]
    return feats, pids, camids
