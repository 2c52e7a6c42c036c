"""Which queries to draw: the worst or best by AP, a seeded random sample, or given ones."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import numpy as np

logger = logging.getLogger("reid.visualization")

MODES = ("worst", "best", "random", "indices")


@dataclass
class QuerySelection:
    """Chosen query indices (in drawing order) and human-readable notes on what was skipped."""

    indices: np.ndarray
    notes: List[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.indices)


class QueryIndexError(IndexError, ValueError):
    """A query index outside the query set: an IndexError for callers that index, and a
    ValueError because it is a user's bad value (the tools print it as one line)."""


def select_queries(
    all_AP: Sequence[float],
    mode: str = "worst",
    k: int = 10,
    seed: int = 0,
    indices: Optional[Sequence[Union[int, str]]] = None,
    names: Optional[Sequence[str]] = None,
    paths: Optional[Sequence[str]] = None,
) -> QuerySelection:
    """Pick queries to visualise.

    Args:
        all_AP: per-query AP from ``evaluate_rank`` (NaN for queries the metric skipped because
            no valid gallery match exists).
        mode: "worst" (lowest AP first), "best" (highest first), "random" (`k` queries drawn with
            `seed`, shown in index order) or "indices" (the given `indices` and/or `names`, in
            the order given; `k` does not cap them).
        k: how many queries for worst/best/random.
        indices: for mode "indices": query indices, and/or file names (str) mixed in, drawn in
            the order given.
        names: more query file names (base names, path suffixes or full paths) for mode
            "indices", drawn after `indices`; names need `paths`.
        paths: the query image paths, used to resolve `names` and in notes.

    Queries with NaN AP are never drawn: their picture would not match any number. Each skip is
    recorded in ``notes`` (and logged). Ties in AP keep the lower query index first.
    """
    ap = np.asarray(all_AP, dtype=np.float64).reshape(-1)
    mode = str(mode).lower()
    if mode not in MODES:
        raise ValueError(f"Unknown query selection mode {mode!r}; use one of {', '.join(MODES)}.")
    if (indices is not None or names is not None) and mode != "indices":
        raise ValueError(f"Query indices/names were given with mode {mode!r}; use mode 'indices' to draw given queries.")
    valid = ~np.isnan(ap)
    notes: List[str] = []

    if mode == "indices":
        chosen = _given_queries(ap, indices, names, paths)
        keep = valid[chosen] if len(chosen) else np.zeros(0, dtype=bool)
        for q in chosen[~keep]:
            notes.append(f"query {q}{_name(paths, q)} skipped: it has no valid gallery match (AP is NaN).")
        chosen = chosen[keep]
    else:
        if k <= 0:
            raise ValueError(f"Number of queries to draw must be positive, got {k}.")
        n_invalid = int((~valid).sum())
        if n_invalid:
            notes.append(
                f"{n_invalid} of {len(ap)} queries have no valid gallery match (AP is NaN) and were not considered."
            )
        candidates = np.flatnonzero(valid)
        if mode == "random":
            rng = np.random.default_rng(seed)
            chosen = np.sort(rng.choice(candidates, size=min(k, len(candidates)), replace=False))
        else:
            key = ap[candidates] if mode == "worst" else -ap[candidates]
            # stable sort: equal APs keep ascending query index, so results are repeatable
            chosen = candidates[np.argsort(key, kind="stable")[:k]]
    for note in notes:
        logger.info(note)
    if len(chosen) == 0:
        logger.warning("No query selected for drawing (%s).", "; ".join(notes) or "empty input")
    return QuerySelection(np.asarray(chosen, dtype=np.int64), notes)


def _given_queries(
    ap: np.ndarray,
    indices: Optional[Sequence[Union[int, str]]],
    names: Optional[Sequence[str]],
    paths: Optional[Sequence[str]],
) -> np.ndarray:
    """Indices and names resolved to unique query indices, in the order given."""
    if indices is None and names is None:
        raise ValueError("Mode 'indices' needs query indices or file names (e.g. --queries 3 17 0002_c1s1_000451_03.jpg).")
    chosen: List[int] = []
    n = len(ap)
    for q in list(indices or []) + list(names or []):
        if isinstance(q, str):
            if paths is None:
                raise ValueError("Query names were given without the query paths to look them up in; pass paths=.")
            chosen.extend(resolve_names([q], paths))
            continue
        i = int(q)
        if not -n <= i < n:
            raise QueryIndexError(f"Query index {i} is out of range: there are {n} queries (valid 0..{n - 1}).")
        chosen.append(i % n)
    # drop repeats but keep the order the user asked for
    _, first = np.unique(np.asarray(chosen, dtype=np.int64), return_index=True)
    return np.asarray(chosen, dtype=np.int64)[np.sort(first)]


def resolve_names(names: Sequence[str], paths: Sequence[str]) -> List[int]:
    """Query indices whose path equals a name or ends with it as a path suffix (all matches)."""
    norm = [str(p).replace("\\", "/") for p in paths]
    out: List[int] = []
    for name in names:
        key = str(name).replace("\\", "/")
        hits = [i for i, p in enumerate(norm) if p == key or p.endswith("/" + key.lstrip("/"))]
        if not hits:
            examples = ", ".join(os.path.basename(p) for p in norm[:3])
            raise ValueError(
                f"No query image is named {name!r}. Give a file name from the query set (e.g. {examples}) "
                "or a query index."
            )
        out.extend(hits)
    return out


def _name(paths: Optional[Sequence[str]], i: int) -> str:
    return f" ({os.path.basename(str(paths[i]))})" if paths is not None else ""
