"""Approximate indexes that meet a recall target on the gallery they index, whatever its shape.

A fixed ``nprobe`` or ``ef_search`` reaches a given recall on one kind of gallery and misses it on
another: HNSW's defaults give recall@10 0.999 on 200,000 features of ~20 images per identity but
less on features made of tight clusters of near-duplicates (many crops of one track), whose
top ten are all but tied. So an approximate index measures its recall at build time against
exact search and raises its search-time parameter (IVF ``nprobe``, HNSW ``ef_search``) step by
step, doubling it, until the recall reaches the target. The parameter and the recall measured
with it are saved with the index.

The queries are a sample of the gallery's own rows, but a row in the index finds itself: its
own row would be a free hit in every top 10 and make the recall read higher than a new query
gets. So each sample query asks for its k + 1 best matches, and its own row is taken out of
both the exact and the approximate answer (:func:`without_own_rows`): the recall is that of
its k nearest *other* rows, as for a query the index has never seen. The sample (queries and
their exact answers, :class:`RecallSample`) is saved with the index, so that a loaded index's
recorded recall can be checked (:func:`verify_recall`).

recall@k of a query = the fraction of its exact top-k rows that the approximate top-k holds.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Optional, Tuple

import numpy as np
import torch

from reid.utils.value_checks import unit_rows

logger = logging.getLogger(__name__)

DEFAULT_TARGET_RECALL = 0.95
#: Gallery rows used as queries to measure recall (fewer: the whole gallery).
SAMPLE_QUERIES = 512
RECALL_K = 10
#: A loaded index whose re-measured recall differs from the recorded one by more than this warns.
RECALL_TOLERANCE = 0.05
# Score-matrix elements per chunk of the exact search: 2**26 float32 = 256 MiB.
_MAX_ELEMENTS = 1 << 26
# Stored rows per block when a loaded index's recall is re-measured from its own vectors: with
# 512 queries the score block is 16 MiB, whatever the index's size.
_VERIFY_BLOCK = 8192


@dataclass
class RecallSample:
    """What an approximate index's recall was measured on: gallery `rows` (int64 ``[S]``), their
    unit-length features `queries` (float32 ``[S, D]``) and the exact top-k *other* rows of each
    (`truth`, int64 ``[S, k]``, best first)."""

    rows: np.ndarray
    queries: np.ndarray
    truth: np.ndarray

    @property
    def k(self) -> int:
        return int(self.truth.shape[1])


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


def top_of_blocks(blocks: Iterable[Tuple[np.ndarray, np.ndarray]], queries: torch.Tensor, k: int) -> np.ndarray:
    """Row ids of each unit query's `k` most cosine-similar rows among `blocks` of ``(ids,
    unit rows)``, merging a running top-k block by block (memory: one block's scores)."""
    best_s = best_i = None
    for ids, rows in blocks:
        sims = queries @ torch.as_tensor(rows).T
        top = torch.topk(sims, min(k, sims.shape[1]), dim=1)
        s, i = top.values, torch.as_tensor(ids)[top.indices]
        if best_s is not None:
            s, i = torch.cat([best_s, s], dim=1), torch.cat([best_i, i], dim=1)
            keep = torch.topk(s, min(k, s.shape[1]), dim=1).indices
            s, i = torch.gather(s, 1, keep), torch.gather(i, 1, keep)
        best_s, best_i = s, i
    return best_i.numpy()


def exact_top(gallery: Any, queries: torch.Tensor, k: int) -> np.ndarray:
    """Indices of each unit query's `k` most cosine-similar rows of `gallery` (any row lengths).

    The gallery is normalised a block of rows at a time and the running top-k merged, so no
    normalised copy of the whole gallery is made.
    """
    block = max(k, _MAX_ELEMENTS // max(1, len(queries)))

    def blocks() -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        for start in range(0, len(gallery), block):
            g = unit_rows(torch.as_tensor(np.asarray(gallery[start:start + block])), "Gallery features")[0]
            yield np.arange(start, start + len(g)), g

    return top_of_blocks(blocks(), queries, k)


def without_own_rows(found: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    """The first `k` entries of each row of `found` (``[S, >= k + 1]``, best first) that are not
    the query's own gallery row ``rows[s]`` (when the own row is not there: the first k)."""
    other = found != rows[:, None]
    order = np.argsort(~other, axis=1, kind="stable")[:, :k]  # the others first, in their order
    return np.take_along_axis(found, order, axis=1)


def draw_recall_sample(gallery: Any, seed: int = 0) -> Optional[RecallSample]:
    """Up to SAMPLE_QUERIES gallery rows and their exact top RECALL_K other rows (None for a
    gallery of one row: there is nothing else to find)."""
    n = len(gallery)
    k = min(RECALL_K, n - 1)
    if k < 1:
        return None
    rows = np.sort(np.random.default_rng(seed).choice(n, min(SAMPLE_QUERIES, n), replace=False))
    queries = unit_rows(torch.as_tensor(np.asarray(gallery[rows])), "Gallery features")[0]
    truth = without_own_rows(exact_top(gallery, queries, k + 1), rows, k)
    return RecallSample(rows.astype(np.int64), queries.numpy(), truth.astype(np.int64))


def measure_recall(index: Any, sample: RecallSample) -> float:
    """`index`'s recall@k on `sample`: each query's own row left out of its answer."""
    found = index.search(sample.queries, sample.k + 1).indices
    return recall_at(without_own_rows(found, sample.rows, sample.k), sample.truth)


def tune_recall(index: Any, sample: Optional[RecallSample], target: float, tune: bool = True) -> float:
    """Measure `index`'s recall@k on `sample` (rows of the gallery it indexes,
    :func:`draw_recall_sample`) and, with `tune`, raise its search parameter (``index.TUNABLE``)
    by doubling until it reaches `target` (at most ``index.max_tunable()``). Returns the recall
    measured with the final setting (1.0 without a sample: a one-row gallery)."""
    if sample is None:
        return 1.0
    recall = measure_recall(index, sample)
    name = index.TUNABLE
    while tune and recall < target and getattr(index, name) < index.max_tunable():
        index.set_search_params(**{name: min(2 * getattr(index, name), index.max_tunable())})
        recall = measure_recall(index, sample)
    if recall < target:
        logger.warning("The %r index reaches recall@%d %.3f (target %.2f) with %s %d%s.", index.backend, sample.k,
                       recall, target, name, getattr(index, name), index.recall_hint() if tune else
                       f"; leave {name} unset to let it be tuned")
    return recall


def sample_from_stored_rows(index: Any, seed: int = 0) -> Optional[RecallSample]:
    """A recall sample drawn from an index's own stored vectors, for an index saved without one
    (by an older version): its exact answers come from a pass over the stored vectors, a block
    at a time. None when the stored vectors are not the gallery's (IVF-PQ keeps compressed
    codes: exact search over them is not exact search over the gallery)."""
    if not getattr(index, "stores_exact_rows", False):
        return None
    n = len(index)
    k = min(RECALL_K, n - 1)
    if k < 1:
        return None
    rows = np.sort(np.random.default_rng(seed).choice(n, min(SAMPLE_QUERIES, n), replace=False))
    queries = np.empty((len(rows), index.dim), dtype=np.float32)
    for ids, block in _small_blocks(index.stored_rows()):
        hit = np.isin(ids, rows)
        queries[np.searchsorted(rows, ids[hit])] = block[hit]
    q = torch.from_numpy(queries)
    truth = without_own_rows(top_of_blocks(_small_blocks(index.stored_rows()), q, k + 1), rows, k)
    return RecallSample(rows.astype(np.int64), queries, truth.astype(np.int64))


def _small_blocks(blocks: Iterable[Tuple[np.ndarray, np.ndarray]]) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
    for ids, rows in blocks:
        for start in range(0, len(ids), _VERIFY_BLOCK):
            yield ids[start:start + _VERIFY_BLOCK], rows[start:start + _VERIFY_BLOCK]


def verify_recall(index: Any, path: str = "") -> Optional[float]:
    """Re-measure a loaded approximate index's recall@k on its recorded sample (or, for an index
    saved without one, on a sample of its stored vectors) and warn when it differs from the
    recorded ``measured_recall`` by more than RECALL_TOLERANCE. Returns the re-measured recall,
    or None when it cannot be measured (an exact backend needs none; an IVF-PQ index saved
    without a sample has only compressed vectors: a warning says so). Memory: the sample and
    one block of scores (SAMPLE_QUERIES x _VERIFY_BLOCK), whatever the index's size."""
    if not getattr(index, "TUNABLE", ""):
        return None
    where = f"Index file {path}" if path else f"The {index.backend!r} index"
    sample = getattr(index, "recall_sample", None) or sample_from_stored_rows(index)
    if sample is None:
        logger.warning("%s: its recall cannot be re-measured: it was saved without a recall sample and holds only "
                       "compressed vectors; rebuild it with this version to record one.", where)
        return None
    recall = measure_recall(index, sample)
    recorded = index.measured_recall
    if recorded is None:
        logger.warning("%s records no recall; re-measured recall@%d: %.3f.", where, sample.k, recall)
    elif abs(recall - recorded) > RECALL_TOLERANCE:
        logger.warning("%s records recall@%d %.3f, but re-measured on %d sample queries it gives %.3f: the recorded "
                       "value is wrong; rebuild the index (tools/search.py --gallery FILE --save-index INDEX) for a "
                       "true figure%s.", where, sample.k, recorded, len(sample.rows), recall, index.recall_hint())
    return recall


def index_recall_fields(index: Any) -> dict:
    """The recall fields an index saves in its parameters (none when it was never measured)."""
    values = {key: getattr(index, key, None) for key in ("target_recall", "measured_recall")}
    return {key: float(value) for key, value in values.items() if value is not None}


__all__ = ["DEFAULT_TARGET_RECALL", "RECALL_K", "RECALL_TOLERANCE", "RecallSample", "SAMPLE_QUERIES",
           "check_target_recall", "draw_recall_sample", "exact_top", "index_recall_fields", "measure_recall",
           "recall_at", "sample_from_stored_rows", "top_of_blocks", "tune_recall", "verify_recall",
           "without_own_rows"]
