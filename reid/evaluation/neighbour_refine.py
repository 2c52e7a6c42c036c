"""Second chances for approximate nearest-neighbour lists: reverse edges, then neighbours of
neighbours (reid.evaluation.ivf_neighbours runs them after its cell pass).

An inverted file misses a neighbour j of item i when j's cell is not among those i's cell
probes. Two cheap passes find most of those misses again, with exact distances:

* Reverse edges: distances are symmetric, so when j's list holds i, i is a candidate for j's
  list (j's cell may have probed i's where i's did not probe j's). No distance is computed.
* Neighbours of neighbours (the join step of NN-descent, Dong et al., WWW 2011): the nearest
  `fan` of each of i's nearest `fan` neighbours are candidates for i's list; their distances
  are computed exactly (:func:`reid.evaluation.distance.pair_distances`).

Each candidate enters a list only if it is nearer than the list's k-th item, so an exact list
stays exact. Measured at 100,000 crop features (docs/benchmarks.md): the share of the exact 62
nearest found goes from 87% to 93% (two rounds) and the clusters' ARI against the exact pass's
from 0.81 to 0.97; with 512 probed cells, 95% -> 98% and ARI 0.995. At 1,000,000 items both
rounds take about 45 s on 2 cores (54% -> 68% of the exact neighbours): the reverse edges are
gathered by one sort per span of items, and the row merges sort with torch (every core).
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np
import torch

from reid.utils.stop_request import check_stop

from .distance import pair_distances

#: Rounds of reverse edges + neighbours of neighbours, and how many of each list take part.
REFINE_ROUNDS = 2
REFINE_FAN = 10
# Rows merged per step: bounds the [rows, k + candidates] work arrays (~40 MB at k 62, fan 10).
_ROWS = 1 << 15
# Reverse edges: blocks of items whose entries are gathered and sorted together (one pass over
# the lists per span: 16 at 1,000,000 items).
_SPAN_BLOCKS = 2
# Float32 rounding between two ways of computing one distance (a few ulps of values near 1).
_ROUNDING = 1e-6


def merge_candidates(d: np.ndarray, i: np.ndarray, cd: np.ndarray, ci: np.ndarray,
                     margin: float = 0.0) -> Tuple[np.ndarray, np.ndarray]:
    """The ``k`` nearest distinct items of each row of a list (`d`, `i` ``[R, k]``) and candidates
    (`cd`, `ci` ``[R, m]``; index -1 = none), by ascending distance, equal distances by index; a
    candidate enters only if nearer than the row's k-th item by more than `margin`."""
    # Candidate distances come from another summation order than the lists' (another matrix
    # product, or pair by pair): within that rounding of the k-th they are ties, and a tie must
    # never replace a right entry of an exact list.
    ci = np.where(cd < d[:, -1:] - margin, ci, -1)
    rows = np.flatnonzero((ci >= 0).any(axis=1))  # most rows gain nothing: only the others are sorted
    d, i = d.copy(), i.copy()
    if len(rows):
        d[rows], i[rows] = _merge_rows(d[rows], i[rows], cd[rows], ci[rows])
    return d, i


def _merge_rows(d: np.ndarray, i: np.ndarray, cd: np.ndarray, ci: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    # torch's row sorts use every core (numpy's run on one): the merges are half of the refinement.
    k = d.shape[1]
    dd = torch.from_numpy(np.concatenate([d, cd.astype(d.dtype, copy=False)], axis=1))
    ii, by_index = torch.sort(torch.from_numpy(np.concatenate([i, ci.astype(i.dtype, copy=False)], axis=1)),
                              dim=1, stable=True)
    dd = torch.gather(dd, 1, by_index)
    repeat = torch.zeros(ii.shape, dtype=torch.bool)
    repeat[:, 1:] = ii[:, 1:] == ii[:, :-1]
    dd[repeat | (ii < 0)] = float("inf")  # one entry per item (the distances of one pair agree)
    keep = torch.sort(dd, dim=1, stable=True).indices[:, :k]  # stable: equal distances stay in index order
    return torch.gather(dd, 1, keep).numpy(), torch.gather(ii, 1, keep).numpy()


def _slices(a: np.ndarray, size: int = 1 << 23):
    """``(offset, a[offset:offset + size])`` over a flat array: element-wise tests without N x k
    temporaries."""
    for c0 in range(0, len(a), size):
        yield c0, a[c0:c0 + size]


def reverse_blocks(d: np.ndarray, i: np.ndarray, cap: int, rows: int = _ROWS):
    """For every item j, up to `cap` items whose lists hold j, nearest first (equal distances by
    source), a block of `rows` items at a time: yields ``(r0, r1, distances [r1 - r0, cap],
    indices)`` (inf and -1 where there are fewer). Reads a copy of the lists made when the
    generator starts (int32 items), so the caller may change the lists block by block."""
    n, k = i.shape
    snap_d, snap_i = d.astype(np.float32, copy=True).reshape(-1), i.astype(np.int32).reshape(-1)
    span = rows * _SPAN_BLOCKS
    for s0 in range(0, n, span):
        s1 = min(s0 + span, n)
        # The entries naming an item of this span, ordered by item, distance (a non-negative
        # float32's bits order as the float does), then source: one sort per span, not per block.
        hit = np.concatenate([np.flatnonzero((part >= s0) & (part < s1)) + c0 for c0, part in _slices(snap_i)])
        local = snap_i[hit] - s0
        key = torch.from_numpy(local.astype(np.int64) << 31 | snap_d[hit].view(np.int32))
        order = torch.sort(key, stable=True).indices.numpy()
        hit, local = hit[order], local[order]
        first = np.searchsorted(local, np.arange(s1 - s0 + 1))
        for r0 in range(s0, s1, rows):
            r1 = min(r0 + rows, s1)
            a, b = first[r0 - s0], first[r1 - s0]
            dst = local[a:b] - (r0 - s0)
            rank = np.arange(a, b) - first[local[a:b]]
            kept = rank < cap
            out_i = np.full((r1 - r0, cap), -1, dtype=np.int64)
            out_d = np.full((r1 - r0, cap), np.inf, dtype=np.float32)
            out_i[dst[kept], rank[kept]] = hit[a:b][kept] // k
            out_d[dst[kept], rank[kept]] = snap_d[hit[a:b][kept]]
            yield r0, r1, out_d, out_i


def reverse_lists(d: np.ndarray, i: np.ndarray, cap: int, targets: Optional[slice] = None) -> Tuple[np.ndarray, np.ndarray]:
    """For every item j of `targets` (default all), up to `cap` items whose lists hold j, nearest
    first (``[len(targets), cap]``; distance inf and index -1 where there are fewer)."""
    blocks = list(reverse_blocks(d, i, cap))
    rd = np.concatenate([b[2] for b in blocks])
    ri = np.concatenate([b[3] for b in blocks])
    return (rd, ri) if targets is None else (rd[targets], ri[targets])


def _new_candidates(lists: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """Which candidates ``[R, m]`` are new to their row's list ``[R, k]`` and to the candidates
    before them (neighbours of neighbours repeat each other and the list: tracklet mates)."""
    k = lists.shape[1]
    ranked, order = torch.sort(torch.from_numpy(np.concatenate([lists, cand], axis=1)), dim=1, stable=True)
    seen = torch.zeros(ranked.shape, dtype=torch.bool)  # the list's entries come first among equal items
    seen[:, 1:] = ranked[:, 1:] == ranked[:, :-1]
    new = torch.empty_like(seen)
    new.scatter_(1, order, ~seen)
    return new[:, k:].numpy()


def _neighbours_of_neighbours(x: torch.Tensor, x_sq: Optional[torch.Tensor], metric: str, d: np.ndarray,
                              i: np.ndarray, fan: int) -> None:
    """Merge the nearest `fan` of each row's nearest `fan` into its list (in place)."""
    n, k = i.shape
    f = min(fan, k)
    for r0 in range(0, n, _ROWS):
        r1 = min(r0 + _ROWS, n)
        cand = i[i[r0:r1, :f], :f].reshape(r1 - r0, f * f)
        new = _new_candidates(i[r0:r1], cand)  # only those are measured: the distances are the expensive part
        rows, cols = np.nonzero(new)
        cd = np.full(cand.shape, np.inf, dtype=np.float32)
        cd[rows, cols] = pair_distances(x, x_sq, rows + r0, cand[rows, cols], metric)
        cand = np.where(new, cand, -1)
        d[r0:r1], i[r0:r1] = merge_candidates(d[r0:r1], i[r0:r1], cd, cand, _ROUNDING)


def refine_lists(x: torch.Tensor, x_sq: Optional[torch.Tensor], metric: str, d: np.ndarray, i: np.ndarray,
                 rounds: int = REFINE_ROUNDS, fan: int = REFINE_FAN) -> Tuple[np.ndarray, np.ndarray]:
    """Approximate lists (`d`, `i` ``[N, k]``, each holding its item) improved by `rounds` of
    reverse edges and neighbours of neighbours (see the module docstring); returns new arrays."""
    d, i = d.copy(), i.copy()
    for _ in range(int(rounds)):
        check_stop("the nearest-neighbour pass")
        # The reverse edges of the lists as they are at the round's start (read once, then merged
        # a block of items at a time).
        for r0, r1, rd, ri in reverse_blocks(d, i, i.shape[1]):
            d[r0:r1], i[r0:r1] = merge_candidates(d[r0:r1], i[r0:r1], rd, ri, _ROUNDING)
        _neighbours_of_neighbours(x, x_sq, metric, d, i, fan)
    return d, i


__all__ = ["REFINE_FAN", "REFINE_ROUNDS", "merge_candidates", "refine_lists", "reverse_blocks", "reverse_lists"]
