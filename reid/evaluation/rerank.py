"""k-reciprocal re-ranking (Zhong et al., "Re-ranking Person Re-identification with
k-reciprocal Encoding", CVPR 2017), exact and sparse.

The output equals the published algorithm (see docs/evaluation.md for the step list);
what differs is only how it is computed. The original keeps several dense N x N matrices
(N = query + gallery): 1.5 GB each at Market-1501 size, 35 GB at MSMT17 size. Every
step, however, only looks at the top-(k1 + 1) neighbours of each item and at the
non-zero entries of V, which has O(k1^2) entries per row. So here:

  1. one pass over the N x N distances in symmetric blocks (each block is computed once
     and used for its rows and, transposed, for its columns) keeps the sorted top-K
     neighbour list of every item, every row's maximum distance and the query x gallery
     block that the output needs;
  2. k-reciprocal sets, the half-k1 expansion and the Gaussian-kernel weights are computed
     from the neighbour lists for all items at once (padded index arrays, no Python loop
     over items) and stored as sparse CSR rows of V;
  3. local query expansion is a sparse product, and the Jaccard distance of each query to
     each gallery item is a min-sum over shared non-zero columns, accumulated from the
     inverted index (columns of V) into one chunk of output rows at a time.

Memory: O(N * K + nnz(V) + Q * G); no N x N matrix is ever formed.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import scipy.sparse as sp
import torch

from .distance import (
    as_feature_tensor,
    check_metric,
    check_same_dim,
    feature_center,
    pair_distances,
    pairwise_block,
    prepare_features,
)

ArrayLike = Union[np.ndarray, torch.Tensor]

# Items per side of a distance block in the neighbour pass (2048^2 float32 = 16 MB): large
# enough for an efficient matrix product, small enough to stay in cache-sized pieces.
_BLOCK = 2048
# Items per chunk when building reciprocal sets and V rows.
_ROW_CHUNK = 4096
# (query, gallery, column) triples materialised at once in the Jaccard min-sum.
_TRIPLES = 1 << 22
# Output entries (query x gallery) combined at once in the final mix (16 MB as float64).
_OUT_ELEMENTS = 1 << 21
# Feature pairs gathered at once when a member is not on an item's neighbour list.
_PAIR_CHUNK = 8192


def _check_params(k1: int, k2: int, lambda_value: float) -> Tuple[int, int, float]:
    if int(k1) != k1 or k1 < 1:
        raise ValueError(f"k1 must be an integer >= 1, got {k1}.")
    if int(k2) != k2 or k2 < 1:
        raise ValueError(f"k2 must be an integer >= 1, got {k2}.")
    lam = float(lambda_value)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda_value must lie in [0, 1], got {lambda_value}.")
    return int(k1), int(k2), lam


class _NeighbourLists:
    """The sorted k nearest items (distances `d`, indices `i`, numpy [N, k]) of every item,
    updated one distance block at a time.

    Bookkeeping is numpy on the CPU: it is a few light passes per block next to the block's
    matrix product, and single-threaded numpy avoids the synchronisation cost of many small
    multi-threaded torch operations.
    """

    def __init__(self, n: int, k: int) -> None:
        self.k = k
        self.d = np.full((n, k), np.inf, dtype=np.float32)
        self.i = np.full((n, k), -1, dtype=np.int64)

    def fold(self, block: np.ndarray, a0: int, b0: int, columns: bool) -> None:
        """Fold block[r, c] = d(a0 + r, b0 + c) into the lists of the row items, or with
        ``columns=True`` into those of the column items (the block read transposed)."""
        t0, o0, n_t = (b0, a0, block.shape[1]) if columns else (a0, b0, block.shape[0])
        tau = self.d[t0 : t0 + n_t, -1]
        if np.isinf(tau).any():
            # Lists not yet full (first block seen by these items): select from every entry.
            self._fill(block.T if columns else block, t0, o0)
            return
        # Only entries at or below a list's current k-th distance can enter it; "<=" keeps
        # exact ties as candidates (the merge decides). The mask keeps the block's layout.
        flat = np.flatnonzero(block <= (tau[None, :] if columns else tau[:, None]))
        if flat.size == 0:
            return
        r, c = np.divmod(flat, block.shape[1])
        target, other = (c + t0, r + o0) if columns else (r + t0, c + o0)
        self._merge(target, other, block.ravel()[flat])

    def _fill(self, rows: np.ndarray, t0: int, o0: int) -> None:
        kk = min(self.k, rows.shape[1])
        vd, vi = torch.topk(torch.from_numpy(np.ascontiguousarray(rows)), kk, dim=1, largest=False)
        cat_d = np.concatenate([self.d[t0 : t0 + rows.shape[0]], vd.numpy()], axis=1)
        cat_i = np.concatenate([self.i[t0 : t0 + rows.shape[0]], vi.numpy() + o0], axis=1)
        order = np.argsort(cat_d, axis=1, kind="stable")[:, : self.k]
        self.d[t0 : t0 + rows.shape[0]] = np.take_along_axis(cat_d, order, axis=1)
        self.i[t0 : t0 + rows.shape[0]] = np.take_along_axis(cat_i, order, axis=1)

    def _merge(self, target: np.ndarray, other: np.ndarray, vals: np.ndarray) -> None:
        """Merge candidates (target item, neighbour, distance) into full lists: one sort of
        the affected lists plus candidates by (item, distance), then the first k per item."""
        k = self.k
        uniq = np.unique(target)
        t = np.concatenate([np.repeat(uniq, k), target])
        d = np.concatenate([self.d[uniq].ravel(), vals])
        i = np.concatenate([self.i[uniq].ravel(), other])
        # One int64 key orders by (item, distance) exactly: the bit pattern of a float32
        # >= 0 read as int32 increases with its value (-0.0 reads as the smallest).
        key = ((t - uniq[0]) << 32) + d.view(np.int32).astype(np.int64)
        order = np.argsort(key)
        d, i = d[order], i[order]
        first = np.searchsorted(t[order], uniq)
        pos = np.arange(t.size) - np.repeat(first, np.diff(np.append(first, t.size)))
        keep = pos < k  # every item has >= k entries: its full old list
        self.d[uniq] = d[keep].reshape(-1, k)
        self.i[uniq] = i[keep].reshape(-1, k)


def _neighbour_pass(
    x: torch.Tensor, x_sq: Optional[torch.Tensor], num_q: int, metric: str, k: int, block: int
) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Step 1: sorted top-k neighbours (indices, distances) and maximum distance of every
    item, plus the plain query x gallery distances, from one pass over symmetric blocks."""
    n = x.shape[0]
    lists = _NeighbourLists(n, k)
    row_max = np.zeros(n, dtype=np.float32)
    qg = np.empty((num_q, n - num_q), dtype=np.float32)
    starts = list(range(0, n, block))
    # Column block b first meets its own diagonal block, so every list is first filled
    # from a contiguous row-direction block; then the blocks (a, b), a < b, above it.
    for bi, b0 in enumerate(starts):
        b1 = min(b0 + block, n)
        for a0 in [b0] + starts[:bi]:
            a1 = min(a0 + block, n)
            sa, sb = (x_sq[a0:a1], x_sq[b0:b1]) if x_sq is not None else (None, None)
            d = pairwise_block(x[a0:a1], sa, x[b0:b1], sb, metric).cpu().numpy()
            np.maximum(row_max[a0:a1], d.max(axis=1), out=row_max[a0:a1])
            lists.fold(d, a0, b0, columns=False)
            if b0 != a0:
                # The mirrored block (b, a) is the transpose: d(i, j) = d(j, i).
                np.maximum(row_max[b0:b1], d.max(axis=0), out=row_max[b0:b1])
                lists.fold(d, a0, b0, columns=True)
            # Queries come first, so every (query, gallery) pair lies in a block with a <= b.
            if a0 < num_q and b1 > num_q:
                r1, c0 = min(a1, num_q), max(b0, num_q)
                qg[a0:r1, c0 - num_q : b1 - num_q] = d[: r1 - a0, c0 - b0 :]
    return lists.i, lists.d, row_max, qg


def _reciprocal(nbr: torch.Tensor, k: int) -> torch.Tensor:
    """mask[i, p] = True iff nbr[i, p] (p < k) is a k-reciprocal neighbour of i, i.e. i is
    among the first k entries of nbr[nbr[i, p]] (paper eq. 3, with k = k1 + 1 entries
    including the item itself, as in the published code)."""
    f = nbr[:, :k]
    out = torch.empty(f.shape, dtype=torch.bool, device=nbr.device)
    for r0 in range(0, f.shape[0], _ROW_CHUNK):
        r1 = min(r0 + _ROW_CHUNK, f.shape[0])
        me = torch.arange(r0, r1, device=nbr.device).view(-1, 1, 1)
        out[r0:r1] = (f[f[r0:r1]] == me).any(dim=2)
    return out


def _expanded_sets(nbr: torch.Tensor, k1: int) -> Tuple[np.ndarray, np.ndarray]:
    """Step 2a: R*(i), the k-reciprocal set of i expanded with the half-k1 reciprocal sets
    R(c, round(k1/2)) of its members c that share more than 2/3 of their items with R(i)
    (paper eq. 4). Returns (row, col) index arrays of all members, sorted and unique per row."""
    n = nbr.shape[0]
    kf = min(k1 + 1, n)
    # Half of k1 rounded like the published code (numpy.around: halves to even).
    kh = min(int(np.around(k1 / 2.0)) + 1, n)
    fwd, fwd_ok = nbr[:, :kf], _reciprocal(nbr, kf)
    half, half_ok = nbr[:, :kh], _reciprocal(nbr, kh)
    rows_out, cols_out = [], []
    for r0 in range(0, n, _ROW_CHUNK):
        r1 = min(r0 + _ROW_CHUNK, n)
        f, ok = fwd[r0:r1], fwd_ok[r0:r1]
        cand, cand_ok = half[f], half_ok[f]  # [c, kf, kh]: R(c, kh) of each forward neighbour
        in_r = ((cand.unsqueeze(3) == f.view(-1, 1, 1, kf)) & ok.view(-1, 1, 1, kf)).any(dim=3)
        inter = (in_r & cand_ok).sum(dim=2)
        size = cand_ok.sum(dim=2)
        # Same comparison as the published code: |R(c) & R(i)| > 2/3 * |R(c)| in float64.
        accept = ok & (inter.double() > (2.0 / 3.0) * size.double())
        members = torch.cat([f.masked_fill(~ok, n), cand.masked_fill(~(accept.unsqueeze(2) & cand_ok), n).flatten(1)], 1)
        members = torch.sort(members, dim=1).values
        keep = members < n
        keep[:, 1:] &= members[:, 1:] != members[:, :-1]
        r, c = keep.nonzero(as_tuple=True)
        rows_out.append((r + r0).cpu().numpy())
        cols_out.append(members[r, c].cpu().numpy())
    return np.concatenate(rows_out), np.concatenate(cols_out)


def _member_distances(
    rows: np.ndarray,
    cols: np.ndarray,
    nbr_i: torch.Tensor,
    nbr_d: torch.Tensor,
    x: torch.Tensor,
    x_sq: Optional[torch.Tensor],
    metric: str,
) -> np.ndarray:
    """d(i, j) for every member pair: read from i's neighbour list when j is on it (most
    pairs), computed from the features otherwise (members reached through a neighbour)."""
    out = np.empty(rows.shape[0], dtype=np.float32)
    step = 1 << 20
    dev = x.device
    for a in range(0, rows.shape[0], step):
        r = torch.from_numpy(rows[a : a + step])
        c = torch.from_numpy(cols[a : a + step])
        hit = nbr_i[r] == c.unsqueeze(1)
        found = hit.any(dim=1)
        d = torch.gather(nbr_d[r], 1, hit.to(torch.uint8).argmax(dim=1, keepdim=True)).squeeze(1)
        miss = (~found).nonzero(as_tuple=True)[0]
        # Misses are computed from gathered feature rows; small slices bound that memory.
        for m0 in range(0, miss.numel(), _PAIR_CHUNK):
            mm = miss[m0 : m0 + _PAIR_CHUNK]
            d[mm] = pair_distances(x, x_sq, r[mm].to(dev), c[mm].to(dev), metric).cpu()
        out[a : a + step] = d.numpy()
    return out


def _jaccard_into(
    out: np.ndarray, v: sp.csr_matrix, num_q: int, lam: float, row_max: np.ndarray
) -> None:
    """Step 3b + final mix, in place on `out` (which holds the plain q x g distances):
    out = (1 - lam) * (1 - s / (2 - s)) + lam * d^2 / max_d^2, with s = sum_k min(V_qk, V_gk)
    (paper eqs. 10-11 and 12; the published code's 1 - min / (2 - min) form).

    s is non-zero only where a query and a gallery item share a non-zero column of V, so
    the dense part (s = 0, Jaccard distance 1) is written with float32 array operations
    and s is accumulated from the inverted index (gallery rows of each column of V) over
    (query entry, gallery entry) triples sharing a column.
    """
    num_g = out.shape[1]
    vq = v[:num_q]
    vg_t = v[num_q:].T.tocsr()
    col_ptr, col_rows, col_vals = vg_t.indptr, vg_t.indices, vg_t.data
    per_entry = np.diff(col_ptr)[vq.indices].astype(np.int64)
    cum_entry = np.concatenate([[0], np.cumsum(per_entry)])
    cum_row = cum_entry[vq.indptr]
    scale = (lam / row_max[:num_q].astype(np.float64) ** 2).astype(np.float32)
    rows_cap = max(1, _OUT_ELEMENTS // max(1, num_g))
    r0 = 0
    while r0 < num_q:
        # As many query rows as fit both the output and the triple budget (at least one).
        r1 = min(num_q, r0 + rows_cap, int(np.searchsorted(cum_row, cum_row[r0] + _TRIPLES, side="right")) - 1)
        r1 = max(r1, r0 + 1)
        blk = out[r0:r1]
        blk *= blk
        blk *= scale[r0:r1, None]
        blk += np.float32(1.0 - lam)
        e0, e1 = vq.indptr[r0], vq.indptr[r1]
        cnt = per_entry[e0:e1]
        total = int(cnt.sum())
        if total:
            k, a = vq.indices[e0:e1], vq.data[e0:e1]
            row = np.repeat(np.arange(r1 - r0), np.diff(vq.indptr[r0 : r1 + 1]))
            # Ragged gather: entry e expands to positions col_ptr[k_e] ... col_ptr[k_e + 1] - 1.
            offs = np.repeat(col_ptr[k] - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)
            mins = np.minimum(np.repeat(a, cnt), col_vals[offs])
            flat = np.repeat(row, cnt) * num_g + col_rows[offs]
            ssum = np.bincount(flat, weights=mins, minlength=blk.size).reshape(blk.shape)
            del offs, mins, flat
            # (1 - lam) * jaccard = (1 - lam) * (1 - s / (2 - s)); the 1 is already added.
            # In place: this chunk's float64 buffers are the largest temporaries here.
            ssum /= 2.0 - ssum
            ssum *= 1.0 - lam
            blk -= ssum
        r0 = r1


def re_ranking(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    metric: str = "cosine",
    block_size: Optional[int] = None,
) -> np.ndarray:
    """k-reciprocal re-ranked query x gallery distances, numpy float32 ``[Q, G]``.

    Equal (up to float rounding) to the published algorithm on inputs without tied
    distances: the base distance d over all N = Q + G items is ``metric``'s plain distance
    (cosine: 1 - cos; euclidean: not squared) *squared once*, and each row is divided by
    its maximum; V rows are exp(-d) over the expanded k-reciprocal set, normalised to sum 1;
    local query expansion averages V over the k2 nearest items (itself included; skipped
    for k2 = 1); the result is ``(1 - lambda) * jaccard + lambda * d`` on the query x
    gallery block.

    Args:
        q_feats, g_feats: ``[Q, D]`` and ``[G, D]`` features (numpy or torch; CUDA tensors
            run the neighbour pass on the GPU).
        k1: size of the k-reciprocal neighbourhood (the paper's k1).
        k2: neighbours averaged in local query expansion.
        lambda_value: weight of the original distance in the final distance, in [0, 1].
        metric: ``"cosine"`` or ``"euclidean"``.
        block_size: items per side of a distance block in the neighbour pass.

    Memory is O(N * k1 + nnz(V) + Q * G); no N x N matrix is built.

    Raises:
        ValueError: bad parameters, unknown metric, empty inputs, mismatched dimensions,
            NaN/inf features.
    """
    k1, k2, lam = _check_params(k1, k2, lambda_value)
    metric = check_metric(metric)
    q = as_feature_tensor(q_feats, "q_feats")
    g = as_feature_tensor(g_feats, "g_feats").to(q.device)
    check_same_dim(q, g, "q_feats", "g_feats")
    num_q = q.shape[0]
    x = torch.cat([q, g], dim=0)
    del q, g
    n = x.shape[0]
    x, x_sq = prepare_features(x, metric, feature_center(x) if metric == "euclidean" else None)
    k = min(max(k1 + 1, k2), n)
    block = int(block_size) if block_size is not None else _BLOCK
    if block < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}.")

    nbr_np, nbr_d_np, row_max, out = _neighbour_pass(x, x_sq, num_q, metric, k, block)
    nbr_i, nbr_d = torch.from_numpy(nbr_np), torch.from_numpy(nbr_d_np)
    # A row whose items are all identical has maximum 0; its normalised distances are 0/0
    # in the original. Dividing by 1 instead keeps them 0 (and the output finite).
    row_max = np.where(row_max > 0, row_max, 1.0).astype(np.float32)

    rows, cols = _expanded_sets(nbr_i, k1)
    dist = _member_distances(rows, cols, nbr_i, nbr_d, x, x_sq, metric).astype(np.float64)
    weight = np.exp(-(dist * dist) / row_max[rows].astype(np.float64) ** 2)
    weight /= np.bincount(rows, weights=weight, minlength=n)[rows]
    v = sp.csr_matrix((weight.astype(np.float32), (rows, cols)), shape=(n, n))
    del rows, cols, dist, weight

    kq = min(k2, n)
    if k2 != 1:
        # Local query expansion: V_i <- mean of V over i's k2 nearest items (itself first).
        avg = sp.csr_matrix(
            (np.full(n * kq, 1.0 / kq, dtype=np.float32),
             nbr_np[:, :kq].ravel(),
             np.arange(0, n * kq + 1, kq)),
            shape=(n, n),
        )
        v = (avg @ v).tocsr()
    v.sort_indices()
    del nbr_i, nbr_d, nbr_np, nbr_d_np, x, x_sq

    _jaccard_into(out, v, num_q, lam, row_max)
    return out
