"""The one driver of the metrics' inputs: ids checked, the gallery grouped, distances streamed.

CMC/mAP/mINP (rank.py), verification (verification.py) and open-set identification (open_set.py)
take a query x gallery distance matrix or, ``*_from_features``, the features (the matrix would
be 3.8 GB as float32 at MSMT17 size). Either is a :class:`Distances` here: it checks the ids and
hands the metric its distance rows a block of query rows at a time, computing each block from
features with distance.py's formula when it is asked for. The metric modules keep only their math.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator, Tuple

import numpy as np
import torch

from .distance import (
    ArrayLike,
    as_query_gallery,
    check_metric,
    feature_center,
    matmul_operand,
    pairwise_block,
    prepare_features,
)

# Distances per block handed out as numpy (verification, open set): 8M float32 (32 MB) plus a
# few key-sized temporaries.
NUMPY_BLOCK_ELEMENTS = 1 << 23

#: ``blocks()`` yields ``(first query row, distances of the block's rows)``, anew at each call.
Blocks = Callable[[], Iterator[Tuple[int, torch.Tensor]]]
NumpyBlocks = Callable[[], Iterator[Tuple[int, np.ndarray]]]


def as_ids(x: ArrayLike, name: str, length: int, what: str) -> np.ndarray:
    """`x` as a 1-D int64 numpy array of length `length`, or a ValueError naming `name` and `what`
    it must match (e.g. "distmat rows (queries)")."""
    a = x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}.")
    if a.shape[0] != length:
        raise ValueError(f"{name} has {a.shape[0]} entries but there are {length} {what}; they must match.")
    if a.dtype.kind not in "iub":
        if a.dtype.kind != "f" or not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise ValueError(f"{name} must hold integer ids, got dtype {a.dtype}.")
    return a.astype(np.int64, copy=False)


def as_distmat(distmat: ArrayLike) -> torch.Tensor:
    """`distmat` as a 2-D floating tensor (numpy shared, not copied); a ValueError for an empty side."""
    if isinstance(distmat, np.ndarray):
        # float16 stays as it is: the chunks are converted one at a time (a whole float32
        # copy would be 3.8 GB at MSMT17 size).
        if distmat.dtype not in (np.float16, np.float32, np.float64):
            distmat = distmat.astype(np.float32)
        t = torch.from_numpy(distmat)
    elif isinstance(distmat, torch.Tensor):
        t = distmat.detach()
    else:
        raise TypeError(f"distmat must be a numpy array or torch tensor, got {type(distmat).__name__}.")
    if t.dim() != 2:
        raise ValueError(f"distmat must be 2-D [num_query, num_gallery], got shape {tuple(t.shape)}.")
    if t.shape[0] == 0:
        raise ValueError("distmat has no query rows: the query set is empty.")
    if t.shape[1] == 0:
        raise ValueError("distmat has no gallery columns: the gallery set is empty.")
    if not t.is_floating_point():
        t = t.float()
    return t


@dataclass
class GalleryGroups:
    """The gallery grouped by pid: the matches + junk of query q are
    ``order[start[q] : start[q] + count[q]]`` (in gallery-index order)."""

    order: np.ndarray
    start: np.ndarray
    count: np.ndarray


def not_finite_error(bad_row: int) -> ValueError:
    """The error for distances holding NaN or inf, naming the first bad query row."""
    return ValueError(f"distmat contains NaN or inf (first bad query row: {bad_row}). Check the features that "
                      "produced it (a diverged model or fp16 overflow) before evaluating.")


def check_finite_rows(block: np.ndarray, r0: int) -> None:
    """Raise :func:`not_finite_error` when the distance rows `block` (query rows from `r0`) hold NaN or inf."""
    if not np.isfinite(block).all():
        raise not_finite_error(r0 + int(np.nonzero(~np.isfinite(block).all(axis=1))[0][0]))


def group_gallery(q_pids: np.ndarray, g_pids: np.ndarray) -> GalleryGroups:
    """The gallery items of each query's identity, without a ``[Q, G]`` mask."""
    order = np.argsort(g_pids, kind="stable")
    uniq, first, cnt = np.unique(g_pids[order], return_index=True, return_counts=True)
    pos = np.minimum(np.searchsorted(uniq, q_pids), len(uniq) - 1)
    found = uniq[pos] == q_pids
    return GalleryGroups(order, np.where(found, first[pos], 0), np.where(found, cnt[pos], 0))


def same_pid_entries(groups: GalleryGroups, r0: int, c: int, q_cams: np.ndarray, g_cams: np.ndarray
                     ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(rows, gallery columns, genuine?) of the same-identity entries of query rows r0 : r0 + c;
    not genuine = same camera too (junk)."""
    start, count = groups.start[r0:r0 + c], groups.count[r0:r0 + c]
    rows = np.repeat(np.arange(c), count)
    offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    cols = groups.order[np.repeat(start, count) + offsets]
    genuine = g_cams[cols] != q_cams[r0 + rows]
    return rows, cols, genuine


class Distances:
    """Query x gallery distances and the ids of both sides (int64: ``q_pids``, ``g_pids``,
    ``q_cams``, ``g_cams``), checked; the distances come a block of rows at a time."""

    num_q: int
    num_g: int

    def _check_ids(self, q_pids: ArrayLike, g_pids: ArrayLike, q_camids: ArrayLike, g_camids: ArrayLike,
                   rows: str, cols: str) -> None:
        self.q_pids = as_ids(q_pids, "q_pids", self.num_q, rows)
        self.g_pids = as_ids(g_pids, "g_pids", self.num_g, cols)
        self.q_cams = as_ids(q_camids, "q_camids", self.num_q, rows)
        self.g_cams = as_ids(g_camids, "g_camids", self.num_g, cols)

    def blocks(self, rows: int) -> Blocks:
        """Blocks of `rows` query rows (the last one shorter), as tensors on the input's device."""
        raise NotImplementedError

    def numpy_blocks(self) -> NumpyBlocks:
        """:meth:`blocks` of about NUMPY_BLOCK_ELEMENTS distances as float32 numpy arrays on the CPU
        (a numpy float32 matrix's rows are views of it, not copies)."""
        blocks = self.blocks(max(1, NUMPY_BLOCK_ELEMENTS // self.num_g))
        return lambda: ((r0, block.to("cpu", torch.float32).numpy()) for r0, block in blocks())


class MatrixDistances(Distances):
    """A given ``[Q, G]`` distance matrix (numpy or torch, any float dtype; see :func:`as_distmat`)."""

    def __init__(self, distmat: ArrayLike, q_pids: ArrayLike, g_pids: ArrayLike, q_camids: ArrayLike,
                 g_camids: ArrayLike) -> None:
        self.matrix = as_distmat(distmat)
        self.num_q, self.num_g = self.matrix.shape
        self._check_ids(q_pids, g_pids, q_camids, g_camids, "distmat rows (queries)", "distmat columns (gallery items)")

    def blocks(self, rows: int) -> Blocks:
        return lambda: ((r0, self.matrix[r0:r0 + rows]) for r0 in range(0, self.num_q, rows))


class FeatureDistances(Distances):
    """The distances of ``compute_distance(q_feats, g_feats, metric)``, computed a block at a time
    on the features' device (the gallery is prepared once and reused by every block and pass)."""

    def __init__(self, q_feats: ArrayLike, g_feats: ArrayLike, q_pids: ArrayLike, g_pids: ArrayLike,
                 q_camids: ArrayLike, g_camids: ArrayLike, metric: str) -> None:
        self.metric = check_metric(metric)
        q, g = as_query_gallery(q_feats, g_feats)
        self.num_q, self.num_g = q.shape[0], g.shape[0]
        self._check_ids(q_pids, g_pids, q_camids, g_camids, "query features", "gallery features")
        center = feature_center(g) if self.metric == "euclidean" else None
        self.q, self.q_sq = prepare_features(q, self.metric, center)
        self.g, self.g_sq = prepare_features(g, self.metric, center)

    def blocks(self, rows: int) -> Blocks:
        g_op = matmul_operand(self.g, min(rows, self.num_q))

        def blocks() -> Iterator[Tuple[int, torch.Tensor]]:
            for r0 in range(0, self.num_q, rows):
                q_sq = self.q_sq[r0:r0 + rows] if self.q_sq is not None else None
                yield r0, pairwise_block(self.q[r0:r0 + rows], q_sq, self.g, self.g_sq, self.metric, b_op=g_op)

        return blocks


__all__ = ["Blocks", "Distances", "FeatureDistances", "GalleryGroups", "MatrixDistances", "NUMPY_BLOCK_ELEMENTS",
           "NumpyBlocks", "as_distmat", "as_ids", "check_finite_rows", "group_gallery", "not_finite_error",
           "same_pid_entries"]
