"""Feature extraction split over the processes of a ``torchrun`` job.

``torchrun --nproc_per_node N tools/extract.py ...`` starts N processes; each takes one
contiguous shard of the (sorted) image list, and rank 0 gathers the shards in rank order, so
the rows come out in exactly the single-process order, and writes the one gallery file.
Without torchrun (``WORLD_SIZE`` unset or 1) this is the plain single-process extraction.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import torch.distributed as dist

from reid.utils.process import get_rank, get_world_size, shard_bounds

from .predictor import Predictor, ProgressFn


def extract_sharded(predictor: Predictor, paths: Sequence[str], progress: Optional[ProgressFn] = None,
                    camids: Optional[Sequence[int]] = None) -> Optional[np.ndarray]:
    """Features of `paths` (with their camera ids `camids`, for models with SIE), computed by
    every process of the job on its own shard.

    Returns ``[N, D]`` in the order of `paths` on rank 0 and None on the other ranks; a single
    process returns its own features.
    """
    world, rank = get_world_size(), get_rank()
    if world <= 1:
        return predictor.extract_paths(paths, progress, camids)
    lo, hi = shard_bounds(len(paths), rank, world)
    mine = predictor.extract_paths(paths[lo:hi], progress, None if camids is None else camids[lo:hi]) if hi > lo else \
        np.empty((0, predictor.feature_dim), dtype=np.float32)
    shards: Optional[List[np.ndarray]] = [None] * world if rank == 0 else None  # type: ignore[list-item]
    dist.gather_object(mine, shards, dst=0)
    return np.concatenate(shards, axis=0) if rank == 0 else None


__all__ = ["extract_sharded", "shard_bounds"]
