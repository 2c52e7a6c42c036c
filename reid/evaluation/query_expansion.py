"""Alpha query expansion (alpha-QE; Radenovic et al., TPAMI 2019, sec. 3.2) with gallery
neighbours found chunk-wise, so no N x N similarity matrix is built."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .distance import ArrayLike, as_query_gallery, rows_per_block


def aqe(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    k: int = 5,
    alpha: float = 3.0,
    chunk_size: Optional[int] = None,
) -> ArrayLike:
    """Expand each query with its k most similar gallery features.

    With features L2-normalised and s_i = cos(q, g_i) for the k gallery items most similar
    to q, the expanded query is

        q' = normalise(q + sum_i max(s_i, 0)^alpha * g_i)

    i.e. the query itself has weight 1 (= 1^alpha) and neighbours with negative similarity
    get weight 0 for alpha > 0 (a non-integer power of a negative cosine is undefined);
    alpha = 0 gives every neighbour weight 1 (plain average QE). Equal similarities at the
    k-th place are resolved by torch.topk. Only queries change; use the result with the
    original gallery.

    Args:
        q_feats: ``[Q, D]`` query features (numpy or torch).
        g_feats: ``[G, D]`` gallery features.
        k: gallery neighbours per query (clipped to G); 0 returns the normalised queries.
        alpha: exponent of the similarity weights (>= 0).
        chunk_size: queries per similarity block (default: ~16M similarities per block).

    Returns:
        Expanded, L2-normalised float32 query features: numpy if `q_feats` is numpy, else a
        torch tensor on q_feats' device.
    """
    if int(k) != k or k < 0:
        raise ValueError(f"k must be an integer >= 0, got {k}.")
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}.")
    q, g = as_query_gallery(q_feats, g_feats)
    q = torch.nn.functional.normalize(q, dim=1)
    g = torch.nn.functional.normalize(g, dim=1)
    kk = min(int(k), g.shape[0])
    out = torch.empty_like(q)
    step = rows_per_block(g.shape[0], chunk_size)
    for r0 in range(0, q.shape[0], step):
        qs = q[r0 : r0 + step]
        if kk == 0:
            out[r0 : r0 + step] = qs
            continue
        sim, idx = torch.topk(qs @ g.t(), kk, dim=1, largest=True, sorted=True)
        weight = sim.clamp_min(0.0).pow(float(alpha))
        expanded = qs + torch.bmm(weight.unsqueeze(1), g[idx]).squeeze(1)
        out[r0 : r0 + step] = torch.nn.functional.normalize(expanded, dim=1)
    if isinstance(q_feats, np.ndarray):
        return out.cpu().numpy()
    return out
