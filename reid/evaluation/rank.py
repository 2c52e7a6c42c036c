"""CMC, mAP and mINP under the Market-1501 protocol, exact, vectorised and chunked.

Protocol (one query at a time, see docs/evaluation.md):
  * gallery items with the query's pid AND the query's camera are removed ("junk");
  * the remaining items with the query's pid are the matches; a query without any
    remaining match is skipped and counted out of ``num_valid_queries``;
  * the remaining gallery is ranked by ascending distance; equal distances are ordered by
    gallery index (a stable sort), so results never depend on the sort algorithm.

With ``r_1 < ... < r_m`` the 1-based ranks of the m matches:
  * AP   = (1/m) * sum_k k / r_k       (precision at each hit; not the trapezoid variant)
  * INP  = m / r_m                     (Ye et al., TPAMI 2021, where mINP is introduced)
  * CMC@k = fraction of valid queries with r_1 <= k.

How it is computed without sorting indices: the rank of a match p is one plus the number
of remaining gallery items that come before it, i.e. items with a smaller distance plus
items with the same distance and a smaller gallery index. Per chunk of queries the rows
are sorted as *values* (numpy's SIMD sort, much cheaper than an argsort) with junk moved
to the end as +inf; a batched binary search of each match's distance in its sorted row
then counts the items strictly below it, and equal-distance items are counted exactly on
the rare rows where a match's distance occurs more than once. Matches of a query are found
from the gallery grouped by pid, so no [Q, G] mask is ever built. Memory beyond the input
is a few chunk-sized buffers, whatever the gallery size.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from .distance import ArrayLike, rows_per_block
from .from_features import (Blocks, Distances, FeatureDistances, GalleryGroups, MatrixDistances, group_gallery,
                            not_finite_error)

# Entries of the distance matrix ranked per task. ~2M float32 (8 MB) keeps a task's sort
# buffer cache-friendly and leaves enough tasks to spread over the threads.
_TASK_ELEMENTS = 1 << 21
# Entries per distance block computed from features (evaluate_rank_from_features): 32M
# float32 = 128 MB, large enough for an efficient matrix product.
_BLOCK_ELEMENTS = 1 << 25
# Rows x gallery entries compared at once when resolving equal distances.
_TIE_ELEMENTS = 1 << 22


def _sort_rows(d: torch.Tensor, junk_rows: torch.Tensor, junk_cols: torch.Tensor) -> torch.Tensor:
    """Copy of `d` [c, G] with junk entries set to +inf, each row sorted ascending (values).

    On CPU numpy's vectorised sort is several times faster than torch.sort and releases the
    GIL, so chunks sort in parallel threads; on CUDA torch.sort runs on the device.
    """
    if d.device.type == "cpu":
        s = d.numpy().copy()
        s[junk_rows.numpy(), junk_cols.numpy()] = np.inf
        s.sort(axis=1)
        return torch.from_numpy(s)
    s = d.clone()
    s[junk_rows, junk_cols] = float("inf")
    return torch.sort(s, dim=1).values


def _rank_chunk(
    d: torch.Tensor,
    q_camids: np.ndarray,
    g_camids: np.ndarray,
    groups: GalleryGroups,
    r0: int,
    g_index: torch.Tensor,
) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-query AP, INP and first-hit rank (0 = skipped) for query rows ``r0 : r0 + len(d)``.

    `d` holds those rows of the distance matrix (any float dtype, on CPU or CUDA).
    """
    dev = d.device
    c, num_g = d.shape
    start = groups.start[r0 : r0 + c]
    count = groups.count[r0 : r0 + c]
    m = int(count.max()) if c else 0
    ap = np.full(c, np.nan)
    inp = np.full(c, np.nan)
    first = np.zeros(c, dtype=np.int64)
    if m == 0:
        # No query of this chunk has its pid in the gallery; still reject bad values.
        if not bool(torch.isfinite(d).all()):
            raise not_finite_error(int((~torch.isfinite(d)).any(dim=1).nonzero()[0, 0]) + r0)
        return ap, inp, first

    # Same-pid gallery items of each query, padded to m columns ([c, m]).
    slot = np.arange(m)
    member = slot[None, :] < count[:, None]
    gidx_np = groups.order[np.where(member, start[:, None] + slot[None, :], 0)]
    junk_np = member & (g_camids[gidx_np] == q_camids[r0 : r0 + c, None])
    pos_np = member & ~junk_np
    n_pos = pos_np.sum(axis=1)

    gidx = torch.from_numpy(gidx_np).to(dev)
    pos = torch.from_numpy(pos_np).to(dev)
    jr, jc = np.nonzero(junk_np)
    junk_rows = torch.from_numpy(jr).to(dev)
    junk_cols = gidx[junk_rows, torch.from_numpy(jc).to(dev)]

    vals = torch.gather(d, 1, gidx)
    s = _sort_rows(d, junk_rows, junk_cols)
    _check_finite(s, vals, junk_np, num_g - junk_np.sum(axis=1), r0)

    # Items strictly closer than each match, and items at exactly its distance.
    v = vals.contiguous()
    left = torch.searchsorted(s, v, right=False)
    right = torch.searchsorted(s, v, right=True)
    rank = left + 1
    tied = pos & (right - left > 1)
    if bool(tied.any()):
        rank += _ties_before(d, vals, gidx, torch.from_numpy(junk_np).to(dev), tied, g_index)

    # Sorted match ranks r_1 < ... < r_m per query (non-matches pushed past the end).
    big = torch.iinfo(torch.int64).max
    r_sorted = torch.sort(torch.where(pos, rank, torch.full_like(rank, big)), dim=1).values.cpu().numpy()
    valid = n_pos > 0
    k = np.arange(1, m + 1, dtype=np.float64)
    hit = slot[None, :] < n_pos[:, None]
    precision = np.where(hit, k[None, :] / np.where(hit, r_sorted, 1), 0.0)
    ap[valid] = precision.sum(axis=1)[valid] / n_pos[valid]
    last = r_sorted[np.arange(c), np.maximum(n_pos - 1, 0)]
    inp[valid] = n_pos[valid] / last[valid]
    first[valid] = r_sorted[valid, 0]
    return ap, inp, first


def _ties_before(
    d: torch.Tensor,
    vals: torch.Tensor,
    gidx: torch.Tensor,
    junk: torch.Tensor,
    tied: torch.Tensor,
    g_index: torch.Tensor,
) -> torch.Tensor:
    """For tied matches: count non-junk items with the same distance and a smaller index.

    Exact equality is rare with real features, so this only touches the affected rows.
    """
    extra = torch.zeros_like(gidx)
    rows, slots = tied.nonzero(as_tuple=True)
    step = max(1, _TIE_ELEMENTS // d.shape[1])
    for a in range(0, rows.numel(), step):
        r, k = rows[a : a + step], slots[a : a + step]
        t = vals[r, k].unsqueeze(1)
        p = gidx[r, k].unsqueeze(1)
        before = ((d[r] == t) & (g_index.unsqueeze(0) < p)).sum(dim=1)
        junk_before = (junk[r] & (vals[r] == t) & (gidx[r] < p)).sum(dim=1)
        extra[r, k] = before - junk_before
    return extra


def _check_finite(
    s: torch.Tensor, vals: torch.Tensor, junk_np: np.ndarray, n_keep: np.ndarray, r0: int
) -> None:
    """Reject NaN/inf without another pass over the chunk.

    In each sorted row the finite values come first, then +inf (junk and bad), then NaN.
    So the row's kept (non-junk) entries are all finite iff the entry at position
    n_keep - 1 is finite and the smallest is not -inf; junk entries were overwritten,
    so their original values are checked separately.
    """
    keep_last = s.gather(1, torch.from_numpy(np.maximum(n_keep - 1, 0)).to(s.device).unsqueeze(1))
    ok = torch.isfinite(keep_last.squeeze(1)) | torch.from_numpy(n_keep == 0).to(s.device)
    ok &= s[:, 0] > float("-inf")
    ok &= (torch.isfinite(vals) | ~torch.from_numpy(junk_np).to(s.device)).all(dim=1)
    if not bool(ok.all()):
        raise not_finite_error(int((~ok).nonzero()[0, 0]) + r0)


def _num_threads(num_threads: Optional[int]) -> int:
    if num_threads is not None:
        return max(1, int(num_threads))
    return max(1, min(torch.get_num_threads(), os.cpu_count() or 1))


def _rank_block(
    d: torch.Tensor,
    r0: int,
    q_camids: np.ndarray,
    g_camids: np.ndarray,
    groups: GalleryGroups,
    rows_per_task: int,
    pool: Optional[ThreadPoolExecutor],
) -> List[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Rank the query rows ``r0 : r0 + len(d)`` of block `d`, split into tasks over `pool`."""
    g_index = torch.arange(d.shape[1], device=d.device)
    starts = range(0, d.shape[0], rows_per_task)

    def task(a: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = d[a : a + rows_per_task]
        if rows.dtype not in (torch.float32, torch.float64):
            rows = rows.float()
        return _rank_chunk(rows, q_camids, g_camids, groups, r0 + a, g_index)

    if pool is None or d.device.type != "cpu" or len(starts) == 1:
        return [task(a) for a in starts]
    return list(pool.map(task, starts))


def _summarise(
    parts: List[Tuple[np.ndarray, np.ndarray, np.ndarray]], max_rank: int
) -> Dict[str, Any]:
    all_ap = np.concatenate([p[0] for p in parts])
    all_inp = np.concatenate([p[1] for p in parts])
    first = np.concatenate([p[2] for p in parts])
    valid = first > 0
    n_valid = int(valid.sum())
    if n_valid == 0:
        raise ValueError(
            "No query has a valid match in the gallery (same pid, different camera). Check that "
            "the query and gallery share identities and that camera ids are read correctly."
        )
    # First-hit ranks beyond max_rank are clipped into one overflow bin, so cmc[k-1] counts
    # queries with r_1 <= k; for k past the gallery size every valid query is counted, so
    # the curve stays at its final value (1.0) when the gallery is smaller than max_rank.
    hist = np.bincount(np.minimum(first[valid], max_rank + 1), minlength=max_rank + 2)
    cmc = np.cumsum(hist[1 : max_rank + 1]) / n_valid
    return {
        "cmc": cmc.astype(np.float64),
        "mAP": float(np.nanmean(all_ap)),
        "mINP": float(np.nanmean(all_inp)),
        "num_valid_queries": n_valid,
        "all_AP": all_ap,
        "all_INP": all_inp,
    }


def _check_max_rank(max_rank: int) -> int:
    if int(max_rank) < 1:
        raise ValueError(f"max_rank must be >= 1, got {max_rank}.")
    return int(max_rank)


def evaluate_rank(
    distmat: ArrayLike,
    q_pids: ArrayLike,
    g_pids: ArrayLike,
    q_camids: ArrayLike,
    g_camids: ArrayLike,
    max_rank: int = 50,
    chunk_size: Optional[int] = None,
    num_threads: Optional[int] = None,
) -> Dict[str, Any]:
    """CMC / mAP / mINP of a query x gallery distance matrix (Market-1501 protocol).

    Args:
        distmat: ``[Q, G]`` distances, smaller = more similar (numpy or torch; a CUDA
            tensor is ranked on its device).
        q_pids, g_pids: identity of each query / gallery item (1-D, integer).
        q_camids, g_camids: camera of each query / gallery item (1-D, integer).
        max_rank: length of the returned CMC curve; may exceed the gallery size (the curve
            then ends at 1.0, its final value).
        chunk_size: query rows ranked per task (default: ~2M distances per task).
        num_threads: CPU threads ranking tasks in parallel (default: torch's thread count).

    Returns:
        dict with ``cmc`` (float64 [max_rank], fractions), ``mAP`` and ``mINP`` (floats in
        [0, 1], means over valid queries), ``num_valid_queries`` (int) and ``all_AP``,
        ``all_INP`` (float64 [Q], NaN for skipped queries).

    Ties: equal distances are ordered by gallery index (stable), see the module docstring.

    Raises:
        ValueError: empty query/gallery, length mismatches, NaN/inf distances, or no query
            with any valid match.
    """
    max_rank = _check_max_rank(max_rank)
    source = MatrixDistances(distmat, q_pids, g_pids, q_camids, g_camids)
    step = rows_per_block(source.num_g, chunk_size, _TASK_ELEMENTS)
    return _rank(source, source.blocks(source.num_q), step, num_threads, max_rank)


def evaluate_rank_from_features(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    q_pids: ArrayLike,
    g_pids: ArrayLike,
    q_camids: ArrayLike,
    g_camids: ArrayLike,
    metric: str = "cosine",
    max_rank: int = 50,
    chunk_size: Optional[int] = None,
    num_threads: Optional[int] = None,
) -> Dict[str, Any]:
    """`evaluate_rank` of ``compute_distance(q_feats, g_feats, metric)`` without the full matrix.

    Distances are computed for a block of queries at a time (``chunk_size`` rows, default
    ~32M distances = 128 MB per block) and ranked immediately, so the query x gallery
    matrix (3.8 GB as float32 at MSMT17 size) never exists. Results equal `evaluate_rank`
    on ``compute_distance(q_feats, g_feats, metric)``. Arguments and errors as in
    `evaluate_rank` and `compute_distance`.
    """
    max_rank = _check_max_rank(max_rank)
    source = FeatureDistances(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids, metric)
    num_g = source.num_g
    block_rows = rows_per_block(num_g, chunk_size, _BLOCK_ELEMENTS)
    task_rows = min(block_rows, rows_per_block(num_g, None, _TASK_ELEMENTS))
    return _rank(source, source.blocks(block_rows), task_rows, num_threads, max_rank)


def _rank(source: Distances, blocks: Blocks, task_rows: int, num_threads: Optional[int], max_rank: int
          ) -> Dict[str, Any]:
    """Rank every block of `blocks` (tasks of `task_rows` query rows over a thread pool) and summarise."""
    groups = group_gallery(source.q_pids, source.g_pids)
    threads = _num_threads(num_threads)
    parts: List[Tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    with ThreadPoolExecutor(threads) if threads > 1 else nullcontext() as pool:
        for r0, block in blocks():
            parts.extend(_rank_block(block, r0, source.q_cams, source.g_cams, groups, task_rows, pool))
    return _summarise(parts, max_rank)


def cross_camera_matches(q_pids: ArrayLike, g_pids: ArrayLike, q_camids: ArrayLike, g_camids: ArrayLike) -> np.ndarray:
    """Number of gallery images each query can match under the protocol: same pid, another camera.

    A query with 0 is skipped by `evaluate_rank` (no valid match). Vectorised: the count of the
    query's pid in the gallery minus the count of its (pid, camera) pair. int64 ``[Q]``.
    """
    q_pids, g_pids, q_cams, g_cams = (np.asarray(a).reshape(-1) for a in (q_pids, g_pids, q_camids, g_camids))
    if len(q_pids) != len(q_cams) or len(g_pids) != len(g_cams):
        raise ValueError(
            f"{len(q_pids)} query pids but {len(q_cams)} query camids, or {len(g_pids)} gallery pids but "
            f"{len(g_cams)} gallery camids; each image needs one pid and one camid."
        )
    num_g = len(g_pids)
    _, pid_inv = np.unique(np.concatenate([g_pids, q_pids]), return_inverse=True)
    pairs = np.stack([np.concatenate([g_pids, q_pids]), np.concatenate([g_cams, q_cams])], 1)
    _, pair_inv = np.unique(pairs, axis=0, return_inverse=True)
    pid_inv, pair_inv = pid_inv.reshape(-1), pair_inv.reshape(-1)
    same_pid = np.bincount(pid_inv[:num_g], minlength=pid_inv.max() + 1)[pid_inv[num_g:]]
    same_pair = np.bincount(pair_inv[:num_g], minlength=pair_inv.max() + 1)[pair_inv[num_g:]]
    return (same_pid - same_pair).astype(np.int64)
