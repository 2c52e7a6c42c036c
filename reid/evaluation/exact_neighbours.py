"""The exact neighbour pass: the k nearest items and the largest distance of every item, from
one pass over all N x N distances (reid.evaluation.neighbours picks it or the approximate one).

One pass over the N x N distances in symmetric blocks: each block is computed once and folded
into sorted lists of its rows and, transposed, of its columns; only entries at or below a
list's current k-th distance are merged into it. O(N^2 D): 100 s at 100,000 x 2048 on 2 cores,
hours at 1,000,000 x 512 (docs/benchmarks.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from reid.utils.stop_request import check_stop

from .distance import matmul_operand, pairwise_block

# Items per side of a distance block (2048^2 float32 = 16 MB): large enough for an efficient
# matrix product, small enough to stay in cache-sized pieces.
EXACT_BLOCK = 2048


@dataclass
class Neighbours:
    """The `k` nearest items of every item and its largest distance.

    ``indices`` int64 ``[N, k]`` and ``distances`` float32 ``[N, k]`` (plain distances), nearest
    first, the item itself included; ``row_max`` float32 ``[N]``: the largest plain distance of
    every item (approximate routes: a lower bound, exact for query rows); ``qg`` the plain query
    x gallery distances ``[Q, N - Q]`` (empty for Q = 0); ``recall``: for an approximate pass,
    the share of the exact k nearest its lists hold, measured on RECALL_SAMPLE items (None
    for the exact pass).
    """

    indices: np.ndarray
    distances: np.ndarray
    row_max: np.ndarray
    qg: np.ndarray
    recall: Optional[float] = None


class _SortedLists:
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


def exact_pass(
    x: torch.Tensor, x_sq: Optional[torch.Tensor], num_q: int, metric: str, k: int, block: int = EXACT_BLOCK
) -> Neighbours:
    """The `k` nearest items (``k <= N``) and largest distance of every row of prepared features
    `x`, queries first (`num_q` of them), and the plain query x gallery distances: exactly, in
    blocks of `block` items per side (see the module docstring)."""
    n = x.shape[0]
    lists = _SortedLists(n, k)
    row_max = np.zeros(n, dtype=np.float32)
    qg = np.empty((num_q, n - num_q), dtype=np.float32)
    starts = list(range(0, n, block))
    # Every block of items takes part in many products: convert each once.
    ops = [matmul_operand(x[s : s + block], block) for s in starts]
    # Column block b first meets its own diagonal block, so every list is first filled
    # from a contiguous row-direction block; then the blocks (a, b), a < b, above it.
    for bi, b0 in enumerate(starts):
        check_stop("the nearest-neighbour pass")  # a run asked to stop gives this up (stop_request.py)
        b1 = min(b0 + block, n)
        for ai in [bi] + list(range(bi)):
            a0, a1 = starts[ai], min(starts[ai] + block, n)
            sa, sb = (x_sq[a0:a1], x_sq[b0:b1]) if x_sq is not None else (None, None)
            d = pairwise_block(x[a0:a1], sa, x[b0:b1], sb, metric, a_op=ops[ai], b_op=ops[bi]).cpu().numpy()
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
    return Neighbours(lists.i, lists.d, row_max, qg)


__all__ = ["EXACT_BLOCK", "Neighbours", "exact_pass"]
