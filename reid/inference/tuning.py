"""Approximate indexes that meet a recall target on the gallery they index, whatever its shape.

A fixed ``nprobe`` or ``ef_search`` reaches a given recall on one kind of gallery and misses it on
another: HNSW's defaults give recall@10 0.999 on 200,000 features of ~20 images per identity but
0.889 on features made of tight clusters of ~50 near-duplicates (many crops of one track), whose
top ten are all but tied. So an approximate index measures its recall at build time against
exact search, on a sample of the gallery's own rows used as queries (their true neighbours are
the gallery's, as a real query's are), and raises its search-time parameter (IVF ``nprobe``,
HNSW ``ef_search``) step by step, doubling it, until the recall reaches the target. The
parameter and the recall measured with it are saved with the index.

recall@k of a query = the fraction of its exact top-k rows that the approximate top-k holds.
"""
from __future__ import annotations

import logging
from typing import Any, Optional

import numpy as np
import torch

from reid.utils.value_checks import unit_rows

logger = logging.getLogger(__name__)

DEFAULT_TARGET_RECALL = 0.95
#: Gallery rows used as queries to measure recall (fewer: the whole gallery).
SAMPLE_QUERIES = 512
RECALL_K = 10
# Score-matrix elements per chunk of the exact search: 2**26 float32 = 256 MiB.
_MAX_ELEMENTS = 1 << 26


def check_target_recall(value: Any) -> float:
    """`value` as a recall target in (0, 1]; a ValueError says what is wrong."""
    try:
        target = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"target_recall must be a number in (0, 1], got {value!r}.") from None
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target_recall must lie in (0, 1] (e.g. 0.95), got {value!r}.")
    return target


def recall_at(approx: np.ndarray, exact: np.ndarray) -> float:
    """Mean fraction of each query's exact top-k rows (``[Q, k]``) found in its approximate top-k."""
    k = exact.shape[1]
    a = np.sort(approx[:, :k], axis=1)
    e = np.sort(exact, axis=1)
    hits = (a[:, :, None] == e[:, None, :]).any(axis=2).sum(axis=1)
    return float(hits.mean() / k)


def exact_top(gallery: Any, queries: torch.Tensor, k: int) -> np.ndarray:
    """Indices of each unit query's `k` most cosine-similar rows of `gallery` (any row lengths).

    The gallery is normalised a block of rows at a time and the running top-k merged, so no
    normalised copy of the whole gallery is made.
    """
    block = max(k, _MAX_ELEMENTS // max(1, len(queries)))
    best_s = best_i = None
    for start in range(0, len(gallery), block):
        g = unit_rows(torch.as_tensor(np.asarray(gallery[start:start + block])), "Gallery features")[0]
        top = torch.topk(queries @ g.T, min(k, len(g)), dim=1)
        s, i = top.values, top.indices + start
        if best_s is not None:
            s, i = torch.cat([best_s, s], dim=1), torch.cat([best_i, i], dim=1)
            keep = torch.topk(s, min(k, s.shape[1]), dim=1).indices
            s, i = torch.gather(s, 1, keep), torch.gather(i, 1, keep)
        best_s, best_i = s, i
    return best_i.numpy()


def tune_recall(index: Any, gallery: Any, target: float, tune: bool = True, seed: int = 0) -> float:
    """Measure `index`'s recall@10 on sample rows of `gallery` (the features it indexes) and, with
    `tune`, raise its search parameter (``index.TUNABLE``) by doubling until it reaches `target`
    (at most ``index.max_tunable()``). Returns the recall measured with the final setting."""
    n = len(gallery)
    k = min(RECALL_K, n)
    rows = np.sort(np.random.default_rng(seed).choice(n, min(SAMPLE_QUERIES, n), replace=False))
    queries = unit_rows(torch.as_tensor(np.asarray(gallery[rows])), "Gallery features")[0]
    exact = exact_top(gallery, queries, k)
    recall = recall_at(index.search(queries, k).indices, exact)
    name = index.TUNABLE
    while tune and recall < target and getattr(index, name) < index.max_tunable():
        index.set_search_params(**{name: min(2 * getattr(index, name), index.max_tunable())})
        recall = recall_at(index.search(queries, k).indices, exact)
    if recall < target:
        logger.warning("The %r index reaches recall@%d %.3f (target %.2f) with %s %d%s.", index.backend, k, recall,
                       target, name, getattr(index, name), index.recall_hint() if tune else
                       f"; leave {name} unset to let it be tuned")
    return recall


def index_recall_fields(index: Any) -> dict:
    """The recall fields an index saves in its parameters (none when it was never measured)."""
    out = {}
    for key in ("target_recall", "measured_recall"):
        value: Optional[float] = getattr(index, key, None)
        if value is not None:
            out[key] = float(value)
    return out


__all__ = ["DEFAULT_TARGET_RECALL", "RECALL_K", "SAMPLE_QUERIES", "check_target_recall", "exact_top",
           "index_recall_fields", "recall_at", "tune_recall"]
