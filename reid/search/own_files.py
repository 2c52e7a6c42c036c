"""Searching a gallery that may hold the query itself: its own image is never one of its matches.

A query image that is also in the gallery (the same file under any name, or a byte-identical
copy: reid/utils/same_files.py) is found at similarity 1 and would be reported as the best match,
and as "match" by any threshold. :func:`search_without_own_files` asks the index for a few more
matches than wanted, leaves out those that are the query's own image (comparing the query's file
with the gallery files found, so only the returned rows are examined), and asks again for a query
that lost so many that fewer than `k` remain. Gallery paths are looked up from the working folder,
as the gallery stores them; a gallery file that is not there cannot be compared and is kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from reid.utils.same_files import RELATION, SAME_FILE, copies_of

from .index_base import SearchIndex, check_k

#: Matches asked for beyond `k`, so that a query with a few copies of itself needs one search.
EXTRA_MATCHES = 8


@dataclass
class OwnFilesSearch:
    """Per query: the gallery rows of its top matches (best first), their scores, and the rows left
    out as the query's own image with why (``reid.utils.same_files.SAME_FILE`` / ``SAME_BYTES``)."""

    indices: List[np.ndarray] = field(default_factory=list)
    scores: List[np.ndarray] = field(default_factory=list)
    left_out: List[List[Tuple[int, str]]] = field(default_factory=list)

    def note(self, q_paths: Sequence[str], paths: Sequence[str]) -> Optional[str]:
        """One line saying how many gallery images were left out and why, with an example; None if none."""
        pairs = [(qi, row, how) for qi, rows in enumerate(self.left_out) for row, how in rows]
        if not pairs:
            return None
        same = sum(how == SAME_FILE for _, _, how in pairs)
        qi, row, how = pairs[0]
        queries = sum(bool(rows) for rows in self.left_out)
        return (f"left out {len(pairs)} gallery images that are a query's own image ({same} the same file: a hard or "
                f"symbolic link or another spelling of its path; {len(pairs) - same} byte-identical copies) from the "
                f"matches of {queries} queries; e.g. gallery row {row} {paths[row]!r} {RELATION[how]} query "
                f"{q_paths[qi]!r}")


def search_without_own_files(index: SearchIndex, q_feats: Any, q_paths: Sequence[str], k: int) -> OwnFilesSearch:
    """The top-`k` matches in `index` (which has ``paths``) of the queries whose image files are
    `q_paths` and features `q_feats`, none of them the query's own image (see the module docstring).

    A query gets fewer than `k` matches only when the gallery has no more images that are not its own.
    """
    n = len(index)
    k = check_k(k, n)
    paths = index.paths
    found = OwnFilesSearch([np.empty(0, np.int64)] * len(q_paths), [np.empty(0, np.float32)] * len(q_paths),
                           [[] for _ in q_paths])
    pending = list(range(len(q_paths)))
    want = min(n, k + EXTRA_MATCHES)
    while pending:
        result = index.search(q_feats[pending] if len(pending) < len(q_paths) else q_feats, want)
        again = []
        for r, qi in enumerate(pending):
            rows, scores = result.indices[r], result.scores[r]
            copies = copies_of([q_paths[qi]], [paths[g] for g in rows])
            keep = np.array([c is None for c in copies], dtype=bool)
            if keep.sum() < k and want < n:
                again.append(qi)
                continue
            found.indices[qi], found.scores[qi] = rows[keep][:k], scores[keep][:k]
            found.left_out[qi] = [(int(rows[j]), c[1]) for j, c in enumerate(copies) if c is not None]
        pending, want = again, min(n, 2 * want)
    return found


__all__ = ["EXTRA_MATCHES", "OwnFilesSearch", "search_without_own_files"]
