"""Training batches of precomputed features (CLIP-ReID's first stage trains on the frozen image
encoder's features of the training images, computed once).

A batch is ``{"images": features [B, P], "targets": labels [B]}``, fetched with one index
operation; the order is :class:`reid.data.samplers.ShuffleSampler`'s (seeded per epoch, split
between processes, ``set_epoch(epoch, start_batch)`` for an exact mid-epoch resume). Full
batches only: CLIP-ReID also trains on the last partial one.
"""
from __future__ import annotations

from typing import Dict, List

import torch
from torch.utils.data import DataLoader, Dataset

from .samplers import ShuffleSampler


class FeatureDataset(Dataset):
    """Rows of `features` ``[N, P]`` with their `labels` ``[N]``, fetched a batch at a time."""

    def __init__(self, features: torch.Tensor, labels: torch.Tensor) -> None:
        if features.dim() != 2 or labels.shape != (features.shape[0],):
            raise ValueError(f"FeatureDataset expects features [N, P] and labels [N], got "
                             f"{tuple(features.shape)} and {tuple(labels.shape)}.")
        self.features, self.labels = features, labels.long()

    def __len__(self) -> int:
        return self.features.shape[0]

    def __getitems__(self, indices: List[int]) -> Dict[str, torch.Tensor]:
        idx = torch.as_tensor(indices, dtype=torch.long)
        return {"images": self.features[idx], "targets": self.labels[idx]}


def check_feature_batch(num_items: int, batch_size: int, world_size: int = 1) -> None:
    """One line when `batch_size` (SOLVER.PROMPT_STAGE.IMS_PER_BATCH) cannot be split between the
    processes or is larger than the data."""
    if batch_size % world_size:
        raise ValueError(f"SOLVER.PROMPT_STAGE.IMS_PER_BATCH {batch_size} is not divisible by the {world_size} "
                         "processes: make it a multiple.")
    if num_items // world_size < batch_size // world_size:
        raise ValueError(f"The {num_items} training images do not fill one batch of SOLVER.PROMPT_STAGE."
                         f"IMS_PER_BATCH {batch_size}{f' on {world_size} processes' if world_size > 1 else ''}: lower it.")


def build_feature_loader(features: torch.Tensor, labels: torch.Tensor, batch_size: int, seed: int,
                         rank: int = 0, world_size: int = 1) -> DataLoader:
    """Shuffled full batches of ``batch_size // world_size`` rows per process (`batch_size` is the
    total over all processes, as ``SOLVER.IMS_PER_BATCH``), in the main process."""
    check_feature_batch(features.shape[0], batch_size, world_size)
    per_process = batch_size // world_size
    sampler = ShuffleSampler(features.shape[0], per_process, seed=seed, rank=rank, world_size=world_size)
    return DataLoader(FeatureDataset(features, labels), batch_size=per_process, sampler=sampler, drop_last=True,
                      num_workers=0, collate_fn=lambda batch: batch)  # __getitems__ has built the batch


__all__ = ["FeatureDataset", "build_feature_loader", "check_feature_batch"]
