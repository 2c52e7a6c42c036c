"""The top-K gallery list of one query, ordered and filtered exactly as the metric sees it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RankedRow:
    """The gallery entries shown for one query, in rank order.

    ``rank`` is the 1-based rank among the entries the metric counts (so it agrees with CMC);
    entries the metric ignores (same identity and camera as the query, or pid -1 junk) have
    rank 0 and ``ignored`` True. They appear only when asked (``show_junk``).
    """

    gallery_index: np.ndarray  # int64 [n]
    distance: np.ndarray  # float64 [n]
    rank: np.ndarray  # int64 [n], 0 for ignored entries
    match: np.ndarray  # bool [n], same identity as the query (never True when ignored)
    ignored: np.ndarray  # bool [n]

    def __len__(self) -> int:
        return len(self.gallery_index)


def rank_gallery(
    dist_row: np.ndarray,
    q_pid: int,
    q_camid: int,
    g_pids: np.ndarray,
    g_camids: np.ndarray,
    topk: int,
    show_junk: bool = False,
) -> RankedRow:
    """Order the gallery for one query and keep the first `topk` entries the metric counts.

    The sort is stable (ties keep gallery index order), matching ``evaluate_rank``. With
    `show_junk`, ignored entries that come before the `topk`-th counted entry are kept too,
    so the user sees what the metric skipped. Galleries with fewer than `topk` counted
    entries give shorter rows.
    """
    if topk <= 0:
        raise ValueError(f"topk must be positive, got {topk}.")
    dist_row = np.asarray(dist_row, dtype=np.float64).reshape(-1)
    g_pids = np.asarray(g_pids)
    g_camids = np.asarray(g_camids)
    order = np.argsort(dist_row, kind="stable")
    pids, cams = g_pids[order], g_camids[order]
    # Exactly evaluate_rank's junk rule, so the ranks drawn are the ranks the metric counts.
    ignored = (pids == q_pid) & (cams == q_camid)
    counted = np.cumsum(~ignored)  # counted entries up to and including each position
    keep = ~ignored & (counted <= topk)
    if show_junk:
        # an ignored entry is "before the K-th counted one" when fewer than K were counted so far
        keep |= ignored & (counted < topk)
    sel = order[keep]
    ign = ignored[keep]
    return RankedRow(
        gallery_index=sel.astype(np.int64),
        distance=dist_row[sel],
        rank=np.where(ign, 0, counted[keep]).astype(np.int64),
        match=(g_pids[sel] == q_pid) & ~ign,
        ignored=ign,
    )
