"""Open-set identification: "who is this, or is it nobody we know?" (DIR at FAR).

A deployed system answers a query with its best gallery match only when that match is close
enough; queries of people the gallery does not hold should be answered "no match". With
queries of both kinds:

* a *known* query has at least one match under the protocol (same identity, another camera);
* an *unknown* query's identity has no image at all in the gallery;
* a query whose identity appears only in its own camera is neither and is not counted.

For each query the best gallery item is the one at the smallest distance among the items the
protocol keeps (same-identity, same-camera junk removed; equal distances: the lowest gallery
index, as in ``rank.py``). A query is *accepted* when that distance is below the threshold t:

* ``FAR(t)`` = unknown queries accepted / unknown queries (someone new taken for a known person);
* ``DIR(t)`` = known queries accepted *and* whose best match has their identity / known queries
  (detection and identification rate);
* the threshold at a target FAR f is the ``(k + 1)``-th smallest best-match distance of the
  unknown queries, ``k = floor(f * unknown)`` (ties rejected: the FAR reached is at most f).
  With U unknown queries FARs below 1/U cannot be told apart; ``far_resolution`` says so.

Test sets hold every query's identity in the gallery, so :func:`holdout_gallery` makes unknown
queries by removing every gallery image of some query identities (chosen with a seed).
"""
from __future__ import annotations

import math
from typing import Any, Dict, Sequence

import numpy as np

from .distance import ArrayLike
from .from_features import (Distances, FeatureDistances, MatrixDistances, check_finite_rows, group_gallery,
                            same_pid_entries)
from .verification import DEFAULT_FARS, check_fars


def holdout_gallery(q_pids: ArrayLike, g_pids: ArrayLike, num_ids: int, seed: int = 0) -> np.ndarray:
    """Gallery keep-mask (bool ``[G]``) that removes every image of `num_ids` query identities.

    The identities are drawn (with `seed`) from those that have images among both the queries
    and the gallery; distractors (pid 0) and junk (pid < 0) are never drawn. Raises ValueError
    when fewer such identities exist than asked for.
    """
    q = np.asarray(q_pids).reshape(-1)
    g = np.asarray(g_pids).reshape(-1)
    both = np.intersect1d(q[q > 0], g[g > 0])
    num_ids = int(num_ids)
    if num_ids < 1 or num_ids >= len(both):
        raise ValueError(f"Cannot hold out {num_ids} identities from the gallery: the query and gallery share "
                         f"{len(both)} (pid > 0); hold out at least 1 and fewer than {len(both)} (TEST.OPEN_SET.HOLDOUT_IDS).")
    chosen = np.random.default_rng(seed).choice(both, size=num_ids, replace=False)
    return ~np.isin(g, chosen)


def _open_set(source: Distances, fars: Sequence[float]) -> Dict[str, Any]:
    fars = check_fars(fars)
    q_pids, g_pids, q_cams, g_cams = source.q_pids, source.g_pids, source.q_cams, source.g_cams
    num_q = len(q_pids)
    groups = group_gallery(q_pids, g_pids)
    best = np.empty(num_q, dtype=np.float64)
    best_index = np.empty(num_q, dtype=np.int64)
    genuine_count = np.zeros(num_q, dtype=np.int64)
    blocks = source.numpy_blocks()
    for r0, block in blocks():
        check_finite_rows(block, r0)
        block = block.copy()  # junk is overwritten; the caller's matrix stays as it was
        rows, cols, genuine = same_pid_entries(groups, r0, block.shape[0], q_cams, g_cams)
        block[rows[~genuine], cols[~genuine]] = np.inf  # same identity, same camera: not counted
        np.add.at(genuine_count, r0 + rows[genuine], 1)
        top = np.argmin(block, axis=1)
        best_index[r0:r0 + len(block)] = top
        best[r0:r0 + len(block)] = block[np.arange(len(block)), top]
    known = genuine_count > 0
    unknown = groups.count == 0
    if not known.any():
        raise ValueError("No known query (none has a cross-camera match in the gallery): open-set metrics need "
                         "queries of both kinds.")
    if not unknown.any():
        raise ValueError("No unknown query: every query's identity has images in the gallery. Hold some identities "
                         "out of the gallery (reid.evaluation.holdout_gallery, TEST.OPEN_SET.HOLDOUT_IDS).")
    correct = g_pids[best_index] == q_pids
    impostor = np.sort(best[unknown])
    out: Dict[str, Any] = {"dir": {}, "threshold": {}, "far_reached": {}}
    for f in fars:
        t = float(impostor[min(int(math.floor(f * len(impostor))), len(impostor) - 1)])
        out["threshold"][f] = t
        out["far_reached"][f] = float(np.mean(impostor < t))
        out["dir"][f] = float(np.mean(correct[known] & (best[known] < t)))
    out.update(rank1=float(np.mean(correct[known])), num_known=int(known.sum()), num_unknown=int(unknown.sum()),
               far_resolution=1.0 / int(unknown.sum()))
    return out


def open_set_metrics(
    distmat: ArrayLike,
    q_pids: ArrayLike,
    g_pids: ArrayLike,
    q_camids: ArrayLike,
    g_camids: ArrayLike,
    fars: Sequence[float] = DEFAULT_FARS,
) -> Dict[str, Any]:
    """DIR at each FAR of `fars` for a gallery that lacks some query identities.

    Returns a dict with ``dir``, ``threshold`` and ``far_reached`` ({far: value}),
    ``rank1`` (DIR without a threshold: the closed-set rank-1 rate of the known queries),
    ``num_known``, ``num_unknown`` and ``far_resolution`` (1 / unknown queries). Raises
    ValueError when there is no known or no unknown query (make unknown ones with
    :func:`holdout_gallery`), or for a FAR outside (0, 1).
    """
    return _open_set(MatrixDistances(distmat, q_pids, g_pids, q_camids, g_camids), fars)


def open_set_metrics_from_features(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    q_pids: ArrayLike,
    g_pids: ArrayLike,
    q_camids: ArrayLike,
    g_camids: ArrayLike,
    metric: str = "cosine",
    fars: Sequence[float] = DEFAULT_FARS,
) -> Dict[str, Any]:
    """:func:`open_set_metrics` of ``compute_distance(q_feats, g_feats, metric)``, a block at a time."""
    return _open_set(FeatureDistances(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids, metric), fars)


__all__ = ["holdout_gallery", "open_set_metrics", "open_set_metrics_from_features"]
