"""The k nearest items and the largest distance of every item of a set: which pass makes them.

k-reciprocal re-ranking and the Jaccard graph of clustering (reid.evaluation.rerank, .jaccard)
read, for each of N items, its k nearest items (itself included) by ascending plain distance,
and its largest distance to any item (S1's row normaliser). :class:`NeighbourSearch` (the
``NEIGHBOURS`` and ``APPROX_MIN_SIZE`` keys of ``TEST.RERANK`` and ``UDA``) picks the pass:

* ``"exact"`` (reid.evaluation.exact_neighbours): all N x N distances in symmetric blocks.
  O(N^2 D): 100 s at 100,000 x 2048 on 2 cores, hours at 1,000,000 x 512.
* ``"ivf"`` (reid.evaluation.ivf_neighbours): faiss k-means cells of ~64 items, each compared
  exactly with 256 cells (``APPROX_PROBES``), ~1.6% of the products at 1,000,000 items, then two
  rounds of reverse edges and neighbours of neighbours (reid.evaluation.neighbour_refine). What
  it costs: the neighbours it misses change the k-reciprocal sets, and so the clusters and the
  re-ranked distances: on features as hard to search as the demo model's it finds 93% of the
  exact neighbours at 100,000 items (clusters: ARI 0.97 against the exact ones; with 512 probed
  cells 98% and 0.995) and 68% at 1,000,000 (docs/benchmarks.md). Each run measures that share
  on 256 items, logs it and warns below LOW_RECALL.
* ``"auto"``: exact below `approx_min_size` items, ``"ivf"`` from there on; without faiss it
  stays exact with a warning line saying what that costs and how to install faiss (a run that
  worked before keeps working). Asking for ``"ivf"`` itself without faiss is an error.

Both passes return the same structure (``Neighbours``): lists sorted by distance (the
approximate pass orders equal distances by item index; the exact pass's order among exact ties
is its merge's), each holding its item at distance ~0, so everything downstream is shared. With
few items (every cell within `nprobe` of every other) the approximate pass compares all pairs
and its lists are the exact ones.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from reid.utils.registry import Registry

from .exact_neighbours import EXACT_BLOCK, Neighbours, exact_pass
from .ivf_neighbours import FAISS_HINT, FAR_PROBE, LIST_SIZE, NPROBE, RECALL_SAMPLE, ivf_pass

logger = logging.getLogger(__name__)

#: "auto" goes approximate from this many items. The approximate pass changes the clusters
#: (docs/benchmarks.md: ARI 0.97 against exact at 100,000 on features as hard to search as the
#: demo model's, 0.995 with 512 probed cells, which cost about the exact pass's time there), so
#: exact stays while it takes minutes, not hours (500,000 x 512: an estimated 20 min for the
#: exact pass on 2 cores).
DEFAULT_APPROX_MIN_SIZE = 500_000
#: Below this share of the exact neighbours found, the approximate pass warns.
LOW_RECALL = 0.8

# The size keys whose "faiss is not installed" warning this process has given.
_TOLD_NO_FAISS: set = set()

NEIGHBOUR_PASS_REGISTRY = Registry("neighbour backend")
NEIGHBOUR_PASS_REGISTRY.register("exact")(exact_pass)
NEIGHBOUR_PASS_REGISTRY.register("ivf")(ivf_pass)
#: The values of a neighbour backend setting: "auto" picks one of the passes by size.
NEIGHBOUR_BACKENDS = ("auto",) + tuple(NEIGHBOUR_PASS_REGISTRY.names())


@dataclass(frozen=True)
class NeighbourSearch:
    """How the neighbour pass is made: `backend` ("auto", "exact", "ivf") and, for "auto", the
    number of items from which it goes approximate. Checked on creation; the message names
    `backend_key` / `size_key` (the config keys it came from)."""

    backend: str = "exact"
    approx_min_size: int = DEFAULT_APPROX_MIN_SIZE
    nprobe: int = NPROBE
    list_size: int = LIST_SIZE
    far_probe: int = FAR_PROBE
    backend_key: str = "neighbour backend"
    size_key: str = "approx_min_size"

    def __post_init__(self) -> None:
        name = str(self.backend).lower()
        if name not in NEIGHBOUR_BACKENDS:
            raise ValueError(f"{self.backend_key} {self.backend!r} is not one of: {', '.join(NEIGHBOUR_BACKENDS)}.")
        object.__setattr__(self, "backend", name)
        object.__setattr__(self, "approx_min_size", _positive_int(self.approx_min_size, self.size_key, "items"))
        for key in ("nprobe", "list_size", "far_probe"):
            object.__setattr__(self, key, _positive_int(getattr(self, key), key, ""))

    def route(self, n: int) -> str:
        """The pass used for `n` items: "exact" or "ivf" (for "auto": by size, and by whether
        faiss is installed)."""
        if self.backend != "auto":
            return self.backend
        if n < self.approx_min_size:
            return "exact"
        if not _faiss_installed():
            # Once per setting and process: clustering asks every epoch, and one line says it all.
            level = logging.DEBUG if self.size_key in _TOLD_NO_FAISS else logging.WARNING
            _TOLD_NO_FAISS.add(self.size_key)
            logger.log(
                level,
                "%d items reach %s=%d, but faiss is not installed: the neighbours are computed exactly, "
                "O(N^2) (hours at 1,000,000 items); %s for the approximate pass.",
                n, self.size_key, self.approx_min_size, FAISS_HINT,
            )
            return "exact"
        return "ivf"


def neighbour_search(node, section: str) -> NeighbourSearch:
    """The :class:`NeighbourSearch` of a config section with ``NEIGHBOURS``, ``APPROX_MIN_SIZE``
    and ``APPROX_PROBES`` keys (``UDA``, ``TEST.RERANK``); errors name the keys."""
    probes = _positive_int(node.get("APPROX_PROBES", NPROBE), f"{section}.APPROX_PROBES", "cells of the approximate pass")
    return NeighbourSearch(str(node.NEIGHBOURS), node.APPROX_MIN_SIZE, nprobe=probes,
                           backend_key=f"{section}.NEIGHBOURS", size_key=f"{section}.APPROX_MIN_SIZE")


def _positive_int(value, key: str, unit: str) -> int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 1
    if not ok:
        raise ValueError(f"{key} must be a positive integer{' (' + unit + ')' if unit else ''}, got {value!r}.")
    return int(value)


def _faiss_installed() -> bool:
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def nearest_neighbours(
    x: torch.Tensor,
    x_sq: Optional[torch.Tensor],
    num_q: int,
    metric: str,
    k: int,
    search: Optional[NeighbourSearch] = None,
    block: int = EXACT_BLOCK,
) -> Neighbours:
    """The `k` nearest items (``k <= N``) and the largest distance of every row of prepared
    features `x` (``reid.evaluation.distance.prepare_features``), queries first (`num_q` of
    them), by the pass `search` picks for N items (default: exact); plus the plain query x
    gallery distances."""
    search = search or NeighbourSearch()
    route = search.route(x.shape[0])
    start = time.perf_counter()
    if route == "exact":
        out = NEIGHBOUR_PASS_REGISTRY.get(route)(x, x_sq, num_q, metric, k, block)
    else:
        out = NEIGHBOUR_PASS_REGISTRY.get(route)(x, x_sq, num_q, metric, k, search.list_size, search.nprobe,
                                          search.far_probe)
    seconds = time.perf_counter() - start
    if out.recall is None:
        logger.debug("%s neighbour pass: the %d nearest of %d items in %.1f s", route, k, x.shape[0], seconds)
        return out
    # Said where it matters: which pass ran, its time and how close it came.
    logger.info("%s neighbour pass: the %d nearest of %d items in %.1f s; its lists hold %.0f%% of the exact "
                "neighbours (measured on %d items)", route, k, x.shape[0], seconds, 100 * out.recall,
                min(RECALL_SAMPLE, x.shape[0]))
    if out.recall < LOW_RECALL:
        logger.warning("The approximate neighbour pass finds only %.0f%% of the exact %d nearest neighbours of these "
                       "%d features: its clusters (or re-ranked distances) will differ noticeably from the exact "
                       "pass's; where its time allows, use it (NEIGHBOURS exact, or a higher APPROX_MIN_SIZE).",
                       100 * out.recall, k, x.shape[0])
    return out


__all__ = [
    "DEFAULT_APPROX_MIN_SIZE",
    "NEIGHBOUR_BACKENDS",
    "NEIGHBOUR_PASS_REGISTRY",
    "NeighbourSearch",
    "Neighbours",
    "exact_pass",
    "ivf_pass",
    "nearest_neighbours",
    "neighbour_search",
]
