"""The k-reciprocal Jaccard distance of every item to every other, sparse (for clustering).

Learning without labels clusters the unlabelled images on the Jaccard distance of their
k-reciprocal encodings (Zhong et al., CVPR 2017, Sec. 3.3; used for pseudo-labels by SpCL and
Cluster Contrast): d_J(i, j) = 1 - s / (2 - s), s = sum_k min(V_ik, V_jk), with V the
k-reciprocal vectors of S1-S5 in ``reid.evaluation.rerank`` (the same function re-ranking
uses; lambda = 0: no original distance is mixed in).

Clustering only needs the pairs closer than its radius eps < 1, and s > 0 only where two items
share a non-zero column of V, so the result is a sparse ``[N, N]`` matrix holding exactly the
pairs with d_J <= eps: DBSCAN with a precomputed sparse distance then finds the same clusters
as on the dense matrix (it only asks which pairs are within eps). The dense N x N matrix of the
usual code is 40 GB at N = 100,000; this stays O(N * k1^2): the shared masses are accumulated
sparse, one chunk of rows at a time, each pair once (b >= a) and mirrored. The neighbour lists
V is built from come from the exact pass, or for very large N from the approximate one
(reid.evaluation.neighbours; then the graph is approximately this one).

One difference from Cluster Contrast's published code, which is not a re-ranking: that code
weights V by exp(-(2 - 2 cos)) without S1's division by each row's largest distance; here V is
exactly re-ranking's, so an eps tuned on their code may need retuning (docs/training.md).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np
import scipy.sparse as sp

from .distance import ArrayLike, as_feature_tensor, check_metric
from .neighbours import NeighbourSearch
from .rerank import _check_params, k_reciprocal_vectors, shared_mass_sparse


def jaccard_graph(
    feats: ArrayLike,
    k1: int = 30,
    k2: int = 6,
    max_distance: float = 0.6,
    metric: str = "cosine",
    block_size: Optional[int] = None,
    neighbours: Optional[NeighbourSearch] = None,
    cameras: Optional[np.ndarray] = None,
) -> sp.csr_matrix:
    """Sparse ``[N, N]`` float64 CSR of the k-reciprocal Jaccard distances d <= `max_distance`.

    Every pair (i, j) with d_J(i, j) <= `max_distance` is stored (the diagonal, d = 0, as
    explicit zeros); all others are absent (d_J > max_distance). Symmetric.

    Args:
        feats: ``[N, D]`` features (numpy or torch; CUDA tensors run the neighbour pass there).
        k1, k2: the k-reciprocal neighbourhood and local query expansion sizes.
        max_distance: the largest distance kept, in [0, 1) (DBSCAN's eps).
        metric: base distance, ``"cosine"`` or ``"euclidean"``.
        block_size: items per side of a distance block in the exact neighbour pass.
        neighbours: how the neighbour lists are made (default exact; an approximate pass for
            large N: reid.evaluation.neighbours.NeighbourSearch).
        cameras: optional camera id of every item (int ``[N]``): camera-balanced neighbour lists
            (reid.evaluation.camera_neighbours; always the exact pass), so that the distance
            relates items across cameras that look different.
    """
    k1, k2, _ = _check_params(k1, k2, 0.0)
    eps = float(max_distance)
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"max_distance must lie in [0, 1) (a Jaccard distance of 1 means nothing shared), "
                         f"got {max_distance}.")
    x = as_feature_tensor(feats, "feats").clone()
    n = x.shape[0]
    enc = k_reciprocal_vectors(x, 0, k1, k2, check_metric(metric), block_size, neighbours, cameras)
    del x
    # d <= eps  <=>  s >= 2 (1 - eps) / (2 - eps); a slightly lower bar only pre-selects, the
    # exact test is made on d below, as a DBSCAN on the dense matrix would make it.
    s_min = 2.0 * (1.0 - eps) / (2.0 - eps) * (1.0 - 1e-9)
    parts: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, columns, distances) of each chunk
    for r0, chunk in shared_mass_sparse(enc.v, s_min):
        r = np.repeat(np.arange(chunk.shape[0]), np.diff(chunk.indptr)) + r0
        s = chunk.data
        d = np.maximum(1.0 - s / (2.0 - s), 0.0)  # rounding can take s a hair over 1
        keep = d <= eps
        r, c, d = r[keep], chunk.indices[keep], d[keep]
        d[r == c] = 0.0  # s(i, i) is 1 up to V's float32 rounding
        parts.append((r, c.astype(np.int64), d))
    r, c, d = (np.concatenate(p) for p in zip(*parts))
    off = r != c  # each pair was computed once (b >= a): mirror it
    graph = sp.csr_matrix((np.concatenate([d, d[off]]), (np.concatenate([r, c[off]]), np.concatenate([c, r[off]]))),
                          shape=(n, n))
    graph.sort_indices()
    return graph


__all__ = ["jaccard_graph"]
