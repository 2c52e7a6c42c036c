"""The approximate neighbour pass: an inverted file of k-means cells searched with matrix
products (reid.evaluation.neighbours picks it or the exact one; its docstring says what it
costs in quality).

faiss k-means cuts the items into cells of about `list_size` (two levels: ~sqrt(N / list_size)
coarse cells, each cut into cells of `list_size`), and the items of each cell are compared with
every item of `nprobe` cells: among the cells whose centroids are nearest to the cell's, those
nearest to any of its items (an item at the cell's edge pulls in the cells beyond it). The
distances are exact (the same :func:`pairwise_block` as the exact pass), one dense matrix
product per cell: O(N * nprobe * list_size * D), ~1.6% of the exact pass's products at
1,000,000 items. faiss's own IVF search would score the stored vectors one query at a time,
20-60x slower per distance than a matrix product on 2 cores (measured: 2-5 against 100-130
GMAC/s at 512-d), which would take the 1,000,000-item pass past an hour.

An item's largest distance is sought in the `far_probe` cells whose centroids are farthest
from its cell's (for cosine features: the opposite side of the sphere): a lower bound, 2% below
the true one on average (S4 divides by it; exact lists with these maxima gave clusters with an
ARI of 0.999 against those with the exact maxima). Query rows (re-ranking) get their exact
maximum and exact query x gallery distances: they are the output. The cell pass's
lists then get two rounds of second chances (reid.evaluation.neighbour_refine: reverse edges and
neighbours of neighbours, exact distances; at 100,000 items 87% -> 93% of the exact neighbours).
Lists are ordered by distance, equal distances by item index. Every pass measures the share of
the exact k nearest its lists hold on RECALL_SAMPLE items (``Neighbours.recall``).
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import torch

from reid.utils.stop_request import check_stop

from .distance import pairwise_block
from .exact_neighbours import Neighbours
from .neighbour_refine import REFINE_ROUNDS, refine_lists

#: Items per cell on average, cells probed per cell, cells searched for the maximum.
LIST_SIZE = 64
NPROBE = 256
FAR_PROBE = 32
# A cell's probes are chosen among this many times `nprobe` cells with the nearest centroids.
_PROBE_POOL = 4
# k-means: training items per centroid (faiss wants at least 39), iterations of the coarse and
# the fine level.
_TRAIN_PER_LIST = 64
_KMEANS_ITER = 20
_FINE_ITER = 10
#: Items whose approximate lists are checked against exact ones.
RECALL_SAMPLE = 256
# Distance-block elements (rows x candidates): 2**24 float32 = 64 MB.
_BLOCK_ELEMENTS = 1 << 24
FAISS_HINT = "pip install faiss-cpu (or pip install 'circle-reid[faiss]')"


def require_faiss():
    """The faiss module, or an ImportError saying how to install it (one line)."""
    try:
        import faiss
    except ImportError as e:
        raise ImportError(f"The 'ivf' neighbour backend needs the faiss package: {FAISS_HINT}, "
                          "or use the 'exact' backend.") from e
    return faiss


def _sub(x_sq: Optional[torch.Tensor], rows) -> Optional[torch.Tensor]:
    return None if x_sq is None else x_sq[rows]


def _norms(c: torch.Tensor, metric: str) -> Optional[torch.Tensor]:
    return torch.linalg.vector_norm(c, dim=1).square_() if metric == "euclidean" else None


def _nearest_centroid(x: torch.Tensor, x_sq: Optional[torch.Tensor], c: torch.Tensor, metric: str) -> np.ndarray:
    """Index of the nearest row of `c` for every row of `x` (blocked, the pass's own distance)."""
    c_sq = _norms(c, metric)
    out = np.empty(x.shape[0], dtype=np.int64)
    step = max(1, _BLOCK_ELEMENTS // max(1, c.shape[0]))
    for r0 in range(0, x.shape[0], step):
        r1 = min(r0 + step, x.shape[0])
        out[r0:r1] = pairwise_block(x[r0:r1], _sub(x_sq, slice(r0, r1)), c, c_sq, metric).argmin(dim=1).cpu().numpy()
    return out


def _kmeans(faiss, x: torch.Tensor, k: int, metric: str, niter: int, seed: int) -> torch.Tensor:
    """faiss k-means centroids of the rows of `x` (at most _TRAIN_PER_LIST rows per centroid
    are sampled; unit centroids for cosine), on `x`'s device."""
    n = x.shape[0]
    size = min(n, _TRAIN_PER_LIST * k)
    rows = np.sort(np.random.default_rng(seed).choice(n, size, replace=False)) if size < n else None
    sample = x if rows is None else x[torch.from_numpy(rows).to(x.device)]
    km = faiss.Kmeans(x.shape[1], k, niter=niter, seed=seed + 1, spherical=metric == "cosine",
                      gpu=bool(x.is_cuda and faiss.get_num_gpus() > 0), min_points_per_centroid=1,
                      max_points_per_centroid=size)
    km.train(np.ascontiguousarray(sample.cpu().numpy()))
    return torch.from_numpy(km.centroids).to(x.device)


def _cells(x: torch.Tensor, x_sq: Optional[torch.Tensor], metric: str, list_size: int,
           seed: int = 0) -> Tuple[torch.Tensor, np.ndarray]:
    """Small cells of about `list_size` items: k-means into about sqrt(N / list_size) coarse
    cells, then each coarse cell into cells of `list_size` (two levels: one k-means with N /
    list_size centroids would cost N^2 D / list_size). Returns the cell centroids ``[F, D]``
    and every item's cell."""
    faiss = require_faiss()
    n = x.shape[0]
    num_coarse = max(1, int(round(math.sqrt(n / list_size))))
    coarse = _nearest_centroid(x, x_sq, _kmeans(faiss, x, num_coarse, metric, _KMEANS_ITER, seed), metric)
    order = np.argsort(coarse, kind="stable")
    bounds = np.searchsorted(coarse[order], np.arange(num_coarse + 1))
    cell = np.empty(n, dtype=np.int64)
    cents = []
    first = 0
    for c in range(num_coarse):
        members = order[bounds[c]:bounds[c + 1]]
        if not len(members):
            continue
        rows = torch.from_numpy(members).to(x.device)
        xc = x[rows]
        num_fine = max(1, int(round(len(members) / list_size)))
        if num_fine == 1:
            cent = xc.mean(dim=0, keepdim=True)
            local = np.zeros(len(members), dtype=np.int64)
        else:
            cent = _kmeans(faiss, xc, num_fine, metric, _FINE_ITER, seed + 1 + c)
            local = _nearest_centroid(xc, _sub(x_sq, rows), cent, metric)
        used, local = np.unique(local, return_inverse=True)  # drop cells k-means left empty
        cell[members] = first + local
        cents.append(cent[torch.from_numpy(used).to(x.device)])
        first += len(used)
    return torch.cat(cents), cell


def _cell_candidates(cent: torch.Tensor, metric: str, num_near: int, num_far: int) -> Tuple[np.ndarray, np.ndarray]:
    """For every cell: the `num_near` cells with the nearest centroids (itself first) and the
    `num_far` cells with the farthest ones."""
    f = cent.shape[0]
    c_sq = _norms(cent, metric)
    near = np.empty((f, min(num_near, f)), dtype=np.int64)
    far = np.empty((f, min(num_far, f)), dtype=np.int64)
    step = max(1, _BLOCK_ELEMENTS // f)
    for r0 in range(0, f, step):
        r1 = min(r0 + step, f)
        d = pairwise_block(cent[r0:r1], _sub(c_sq, slice(r0, r1)), cent, c_sq, metric, blas=True)
        d[torch.arange(r1 - r0), torch.arange(r0, r1)] = -1.0  # a cell probes itself first
        near[r0:r1] = torch.topk(d, near.shape[1], dim=1, largest=False).indices.cpu().numpy()
        far[r0:r1] = torch.topk(d, far.shape[1], dim=1, largest=True).indices.cpu().numpy()
    return near, far


def _probe(q: torch.Tensor, q_sq: Optional[torch.Tensor], cent: torch.Tensor, near: np.ndarray, nprobe: int,
           metric: str) -> np.ndarray:
    """The `nprobe` cells a cell probes: of the cells with the nearest centroids (`near`, itself
    first), those nearest to any of its members `q` (a member at the cell's edge pulls in the
    cells beyond that edge; measured at 100,000 items: the cells of 95% of the items' true
    neighbours are probed this way, of 92% by the centroid's nearest cells)."""
    if len(near) <= nprobe:
        return near
    c = cent[torch.from_numpy(near).to(cent.device)]
    d = pairwise_block(q, q_sq, c, _norms(c, metric), metric, blas=True).min(dim=0).values
    d[0] = -1.0  # its own cell first
    return near[torch.topk(d, nprobe, largest=False).indices.cpu().numpy()]


def _columns(d: torch.Tensor, a: int, b: Optional[int], by_column: bool) -> torch.Tensor:
    """Candidates a..b of a block (``[rows, candidates]``, or ``[candidates, rows]`` `by_column`)."""
    return d[a:b] if by_column else d[:, a:b]


def _merge_top(best: Optional[Tuple[torch.Tensor, torch.Tensor]], d: torch.Tensor, cols: torch.Tensor,
               k: int, by_column: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """The `k` smallest of a running (distances, indices) pair and a new block's candidates
    (`by_column`: the block is ``[candidates, rows]``; topk down a contiguous block's columns is
    faster than along a transposed view's rows)."""
    if by_column:
        vd, vi = torch.topk(d, min(k, d.shape[0]), dim=0, largest=False)
        vd, vi = vd.t(), cols[vi.t()]
    else:
        vd, vi = torch.topk(d, min(k, d.shape[1]), dim=1, largest=False)
        vi = cols[vi]
    if best is not None:
        vd, vi = torch.cat([best[0], vd], dim=1), torch.cat([best[1], vi], dim=1)
        keep = torch.topk(vd, min(k, vd.shape[1]), dim=1, largest=False).indices
        vd, vi = torch.gather(vd, 1, keep), torch.gather(vi, 1, keep)
    return vd, vi


def _sort_by_distance_then_index(d: np.ndarray, i: np.ndarray, rows: int = 1 << 16) -> None:
    """Order each row by distance, equal distances by item index (a fixed order for ties), in
    place, a block of rows at a time (whole-array argsorts would hold several [N, k] int64
    copies: gigabytes at 1,000,000 items)."""
    for r0 in range(0, len(d), rows):
        bd, bi = d[r0:r0 + rows], i[r0:r0 + rows]
        by_index = np.argsort(bi, axis=1, kind="stable")
        bd[:], bi[:] = np.take_along_axis(bd, by_index, axis=1), np.take_along_axis(bi, by_index, axis=1)
        by_dist = np.argsort(bd, axis=1, kind="stable")
        bd[:], bi[:] = np.take_along_axis(bd, by_dist, axis=1), np.take_along_axis(bi, by_dist, axis=1)


def _query_rows(x: torch.Tensor, x_sq: Optional[torch.Tensor], num_q: int, metric: str,
                row_max: np.ndarray) -> np.ndarray:
    """The plain query x gallery distances, and the exact maximum of every query row (queries
    against all N items) into `row_max`."""
    n = x.shape[0]
    qg = np.empty((num_q, n - num_q), dtype=np.float32)
    step = max(1, _BLOCK_ELEMENTS // n)
    for r0 in range(0, num_q, step):
        r1 = min(r0 + step, num_q)
        d = pairwise_block(x[r0:r1], _sub(x_sq, slice(r0, r1)), x, x_sq, metric).cpu().numpy()
        row_max[r0:r1] = d.max(axis=1)
        qg[r0:r1] = d[:, num_q:]
    return qg


def ivf_pass(
    x: torch.Tensor, x_sq: Optional[torch.Tensor], num_q: int, metric: str, k: int, list_size: int = LIST_SIZE,
    nprobe: int = NPROBE, far_probe: int = FAR_PROBE, refine_rounds: int = REFINE_ROUNDS,
) -> Neighbours:
    """The `k` nearest items (``k <= N``) and largest distance of every row of prepared features
    `x`, queries first (`num_q` of them), and the plain query x gallery distances: approximately,
    in cells of about `list_size` items each probing `nprobe` cells, then `refine_rounds` of
    reverse edges and neighbours of neighbours (reid.evaluation.neighbour_refine; see the
    module docstring)."""
    n = x.shape[0]
    cosine = metric == "cosine"
    cent, cell = _cells(x, x_sq, metric, list_size)
    num_cells = cent.shape[0]
    near, far = _cell_candidates(cent, metric, _PROBE_POOL * nprobe, far_probe)
    order = np.argsort(cell, kind="stable")
    bounds = np.searchsorted(cell[order], np.arange(num_cells + 1))
    sizes = np.diff(bounds)
    members = [torch.from_numpy(order[bounds[c]:bounds[c + 1]]).to(x.device) for c in range(num_cells)]
    nbr_d = np.empty((n, k), dtype=np.float32)
    nbr_i = np.empty((n, k), dtype=np.int64)
    row_max = np.zeros(n, dtype=np.float32)
    everything = np.arange(num_cells)
    # Candidate rows are gathered into one reused buffer: a fresh allocation per cell costs
    # page faults that make the gather 3x slower.
    buf = torch.empty(0, x.shape[1], device=x.device)
    for c in range(num_cells):
        if c % 64 == 0:
            check_stop("the nearest-neighbour pass")  # a run asked to stop gives this up (stop_request.py)
        rows = members[c]
        q, q_sq = x[rows], _sub(x_sq, rows)
        probe = _probe(q, q_sq, cent, near[c], nprobe, metric)
        if sizes[probe].sum() < k:  # a set of few items: all of them
            probe = everything
        far_cells = np.setdiff1d(far[c], probe)
        cand = torch.cat([members[p] for p in probe] + [members[p] for p in far_cells])
        num_near = int(sizes[probe].sum())
        if buf.shape[0] < len(cand):
            buf = torch.empty(len(cand), x.shape[1], device=x.device)
        xc = torch.index_select(x, 0, cand, out=buf[:len(cand)])
        xc_sq = _sub(x_sq, cand)
        best = None
        # The largest distance of an item lies on the far side: it is sought in the far cells
        # (in the probed ones only when there are no others: then they are everything).
        top = torch.zeros(len(rows), device=x.device)
        step = max(1, _BLOCK_ELEMENTS // len(rows))
        for c0 in range(0, len(cand), step):
            c1 = min(c0 + step, len(cand))
            if cosine:
                # Candidates x cell members, not the transpose: MKL multiplies the tall-by-small way
                # 15% faster on the 2-core AMD EPYC of docs/benchmarks.md, and the top k are taken
                # down the columns at no extra cost (the product is 90% of the pass). Euclidean keeps
                # the exact pass's orientation: its |a|^2 + |b|^2 - 2ab would round otherwise, and
                # near-duplicates (distances of rounding errors) would change places with it.
                d = pairwise_block(xc[c0:c1], _sub(xc_sq, slice(c0, c1)), q, q_sq, metric, blas=True)
            else:
                d = pairwise_block(q, q_sq, xc[c0:c1], _sub(xc_sq, slice(c0, c1)), metric, blas=True)
            if c1 > num_near or not len(far_cells):
                far_part = _columns(d, max(0, num_near - c0) if len(far_cells) else 0, None, cosine)
                top = torch.maximum(top, far_part.max(dim=0 if cosine else 1).values)
            if c0 < num_near:
                best = _merge_top(best, _columns(d, 0, num_near - c0, cosine), cand[c0:min(c1, num_near)], k, cosine)
        idx = rows.cpu().numpy()
        nbr_d[idx], nbr_i[idx] = best[0].cpu().numpy(), best[1].cpu().numpy()
        row_max[idx] = top.cpu().numpy()
    if refine_rounds:
        nbr_d, nbr_i = refine_lists(x, x_sq, metric, nbr_d, nbr_i, refine_rounds)
    _sort_by_distance_then_index(nbr_d, nbr_i)
    qg = _query_rows(x, x_sq, num_q, metric, row_max)
    return Neighbours(nbr_i, nbr_d, row_max, qg, _sampled_recall(x, x_sq, metric, nbr_i))


def _sampled_recall(x: torch.Tensor, x_sq: Optional[torch.Tensor], metric: str, lists: np.ndarray) -> float:
    """The share of the exact k nearest items that `lists` hold, on RECALL_SAMPLE items (one
    pass of their rows against all items, a block of columns at a time)."""
    n, k = lists.shape
    rows = np.sort(np.random.default_rng(0).choice(n, min(RECALL_SAMPLE, n), replace=False))
    idx = torch.from_numpy(rows).to(x.device)
    q, q_sq = x[idx], _sub(x_sq, idx)
    best = None
    step = max(k, _BLOCK_ELEMENTS // len(rows))
    for c0 in range(0, n, step):
        c1 = min(c0 + step, n)
        d = pairwise_block(q, q_sq, x[c0:c1], _sub(x_sq, slice(c0, c1)), metric, blas=True)
        best = _merge_top(best, d, torch.arange(c0, c1, device=x.device), k)
    exact = best[1].cpu().numpy()
    return float((lists[rows][:, :, None] == exact[:, None, :]).any(axis=2).mean())


__all__ = ["FAISS_HINT", "FAR_PROBE", "LIST_SIZE", "NPROBE", "RECALL_SAMPLE", "ivf_pass", "require_faiss"]
