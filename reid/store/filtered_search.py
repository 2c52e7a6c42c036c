"""Search a model's rows (reid/store/vectors.py) for a query, with a camera and time filter.

A filter that keeps few rows (at most EXACT_FILTER_ROWS) is searched exactly over them. One that
keeps many asks the index for more than k (as many more as the filter leaves out, twice over), then
for four times as many while too few pass it: a person is seen by a few cameras, so near the query
the share that passes is not the share overall. Past MAX_FETCH, or when the index has no more to
give, the filter's rows are scored exactly. Rows not yet in the index are always scored exactly.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Optional, Sequence

import numpy as np

#: A filter keeping at most this many rows is answered by exact search over them.
EXACT_FILTER_ROWS = 5000
#: A filtered search asks the index for at most this many rows before scoring the filter's rows exactly.
MAX_FETCH = 4096
#: Camera numbers up to this are filtered through a lookup table (larger ones through np.isin).
CAMERA_TABLE_SIZE = 1 << 20


@dataclass
class Hits:
    """Search results for one query: sighting ids and cosine similarities, best first."""

    sighting_ids: np.ndarray
    scores: np.ndarray


def filter_mask(rows: Any, n: int, cameras: Optional[Sequence[int]], start: Optional[float],
                end: Optional[float]) -> Optional[np.ndarray]:
    """Which of the first `n` rows the filters keep (None: no filter). Cameras through a lookup table
    over the camera numbers held (np.isin sorts: 20 times slower on a million rows), unless they are
    too far apart for one."""
    if cameras is None and start is None and end is None:
        return None
    mask = None
    if cameras is not None:
        wanted = np.asarray(list(cameras), np.int64)
        column, top = rows.camera[:n], rows.camera_max
        if rows.camera_min >= 0 and top < CAMERA_TABLE_SIZE:
            table = np.zeros(top + 1, bool)
            table[wanted[(wanted >= 0) & (wanted <= top)]] = True
            mask = table[column]
        else:
            mask = np.isin(column, wanted)
    for bound, keeps in ((start, np.greater_equal), (end, np.less_equal)):
        if bound is not None:
            inside = keeps(rows.time[:n], bound)
            mask = inside if mask is None else np.logical_and(mask, inside, out=mask)
    return mask


def search(rows: Any, n: int, index: Any, indexed: int, q: np.ndarray, k: int, mask: Optional[np.ndarray],
           reading: Callable[[], ContextManager[Any]]) -> Hits:
    """The `k` best of the first `n` rows for the unit query `q` among those `mask` keeps: through
    `index` (None: exactly), which holds the first `indexed` rows; `reading()` is held around each
    index search (module docstring)."""
    kept = n if mask is None else int(np.count_nonzero(mask))
    if index is None or (mask is not None and kept <= EXACT_FILTER_ROWS):
        return exact(rows, q, k, mask, n, kept)
    kept_indexed = indexed if mask is None else int(np.count_nonzero(mask[:indexed]))
    need = min(k, kept_indexed)
    fetch = min(indexed, max(k, int(np.ceil(k * indexed / max(kept_indexed, 1) * 2))))
    while True:
        with reading():
            found = index.search(q[None], fetch)
        rows_, scores = found.indices[0], found.scores[0]
        valid = (rows_ >= 0) & (rows_ < indexed)  # rows added after the count was read come from the tail
        given = int(np.count_nonzero(rows_ >= 0))
        rows_, scores = rows_[valid], scores[valid]
        if mask is None:
            break
        keep = mask[rows_]
        rows_, scores = rows_[keep], scores[keep]
        if len(rows_) >= need:
            break
        if fetch >= min(indexed, MAX_FETCH) or given < fetch:
            return exact(rows, q, k, mask, n, kept)
        fetch = min(indexed, MAX_FETCH, 4 * fetch)
    tail = np.arange(indexed, n) if mask is None else indexed + np.flatnonzero(mask[indexed:])
    if len(tail):
        tail_scores = rows.feats[tail] @ q
        rows_, scores = np.concatenate([rows_, tail]), np.concatenate([scores, tail_scores])
    best = top(scores, k)
    return Hits(rows.sighting_id[rows_[best]], scores[best])


def exact(rows: Any, q: np.ndarray, k: int, mask: Optional[np.ndarray], n: int, kept: int) -> Hits:
    """Exact search over the first `n` rows (the `kept` ones `mask` keeps). A small selection is gathered;
    a large one is scored in place, the rows it leaves out set to -inf (no copy of a large part of the
    matrix)."""
    if mask is not None and kept <= EXACT_FILTER_ROWS:
        picked = np.flatnonzero(mask)
        scores = rows.feats[picked] @ q
        best = top(scores, k)
        return Hits(rows.sighting_id[picked[best]], scores[best])
    scores = rows.feats[:n] @ q
    if mask is not None:
        scores[~mask] = -np.inf
        k = min(k, kept)
    best = top(scores, k)
    return Hits(rows.sighting_id[best], scores[best])


def top(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the `k` largest scores, largest first (ties: lower index first)."""
    k = min(k, len(scores))
    if k <= 0:
        return np.zeros(0, np.int64)
    part = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    return part[np.lexsort((part, -scores[part]))]


__all__ = ["CAMERA_TABLE_SIZE", "EXACT_FILTER_ROWS", "Hits", "MAX_FETCH", "exact", "filter_mask", "search", "top"]
