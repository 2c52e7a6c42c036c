"""Camera-balanced neighbour lists: the nearest items of every camera in turn.

On images from cameras that look different, an image's plain nearest neighbours all come from
its own camera (the camera's light, background and viewpoint dominate the features), so its
k-reciprocal set, the Jaccard distance built on it and the clusters on that distance stay
within one camera: the pseudo-labels teach the camera, not the person. Camera-aware
neighbourhoods (CA-Jaccard, Chen et al., CVPR 2024: intra- and inter-camera k-reciprocal
neighbours; also the cross-camera balancing of CAP-style methods) make room for the other
cameras: here an item's list is ordered by its rank *within each camera* first and by distance
second, so it holds the item itself, then the nearest item of every camera, then the second
nearest of every camera, and so on. The k-reciprocal sets, S1's weights and the local query
expansion then run unchanged on these lists (:func:`reid.evaluation.rerank.k_reciprocal_vectors`).

The pass is exact (every pair is measured), in row chunks, so its cost is that of the plain
exact pass; the approximate (ivf) pass has no per-camera form here.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from reid.utils.stop_request import check_stop

from .distance import pairwise_block
from .exact_neighbours import Neighbours

#: Distance entries per row chunk (64 MB of float32): bounds the pass's working memory.
_CHUNK_ENTRIES = 1 << 24


def check_cameras(cameras: np.ndarray, n: int) -> np.ndarray:
    """`cameras` as int64 ``[n]``; a ValueError naming the problem otherwise."""
    cams = np.asarray(cameras)
    if cams.shape != (n,):
        raise ValueError(f"camera ids must be one per item, shape ({n},), got {cams.shape}.")
    if not np.issubdtype(cams.dtype, np.integer):
        raise ValueError(f"camera ids must be integers, got dtype {cams.dtype}.")
    return cams.astype(np.int64)


def camera_balanced_pass(
    x: torch.Tensor, x_sq: Optional[torch.Tensor], metric: str, k: int, cameras: np.ndarray
) -> Neighbours:
    """The `k` first items (``k <= N``) of every item's camera-balanced list (see the module
    docstring) for prepared features `x` ``[N, D]`` (``reid.evaluation.distance.prepare_features``)
    and their camera ids ``[N]``; ``row_max`` is each item's largest distance to any item.

    Within one rank, nearer items come first (the item itself, at distance 0, leads its list).
    """
    n = x.shape[0]
    cams = check_cameras(cameras, n)
    k = int(k)
    if not 1 <= k <= n:
        raise ValueError(f"k must lie in [1, {n}], got {k}.")
    members = [torch.from_numpy(np.flatnonzero(cams == c)).to(x.device) for c in np.unique(cams)]
    indices = np.empty((n, k), np.int64)
    distances = np.empty((n, k), np.float32)
    row_max = np.empty(n, np.float32)
    chunk = max(1, _CHUNK_ENTRIES // max(n, 1))
    for r0 in range(0, n, chunk):
        check_stop("the camera-balanced neighbour pass")
        r1 = min(r0 + chunk, n)
        d = pairwise_block(x[r0:r1], x_sq[r0:r1] if x_sq is not None else None, x, x_sq, metric)
        row_max[r0:r1] = d.max(dim=1).values.cpu().numpy()
        cand_i, cand_d, cand_rank = [], [], []
        for idx in members:
            m = min(k, idx.numel())  # up to k of every camera: enough for any mix of camera sizes
            dc, pos = torch.topk(d[:, idx], m, dim=1, largest=False, sorted=True)
            cand_i.append(idx[pos])
            cand_d.append(dc)
            cand_rank.append(torch.arange(m, device=d.device).expand(r1 - r0, m))
        ci, cd, cr = (torch.cat(t, dim=1).cpu().numpy() for t in (cand_i, cand_d, cand_rank))
        # rank within camera first, distance second, index last (ties broken the same every run)
        order = np.lexsort((ci, cd, cr), axis=1)[:, :k]
        indices[r0:r1] = np.take_along_axis(ci, order, axis=1)
        distances[r0:r1] = np.take_along_axis(cd, order, axis=1)
    return Neighbours(indices, distances, row_max, np.empty((0, n), np.float32))


__all__ = ["camera_balanced_pass", "check_cameras"]
