"""A torch Dataset over ``(path, pid, camid)`` items and the batch collate function."""
from __future__ import annotations

import logging
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from reid.utils.process import seed_sample

from .image_io import CorruptImageError, read_image
from .transforms import to_chw_tensor

logger = logging.getLogger(__name__)


class ImageDataset(Dataset):
    """Reads item `i`, applies `transform` and returns one sample of the batch format.

    Sample: ``{"images": uint8 [3, H, W], "targets": pid, "camids": camid, "img_paths": path}``;
    without a transform the image is only converted to a CHW tensor. The key is an index, or
    ``(index, seed)`` from a sampler with ``sample_seeds=True``: the random generators are then
    seeded with `seed` before the image is augmented; or ``(index, seed, target)`` (learning
    without labels): the sample's target is then `target`, not the item's pid.

    With ``skip_corrupt`` an image that cannot be read is replaced by the next readable image of
    the same identity (so a P x K batch keeps its structure), with a warning naming both;
    ``num_replaced`` counts replacements in this process. Without it the CorruptImageError,
    which names the file, propagates.
    """

    def __init__(
        self,
        items: Sequence,
        transform: Optional[Callable] = None,
        skip_corrupt: bool = False,
    ) -> None:
        self.items = list(items)
        self.transform = transform
        self.skip_corrupt = skip_corrupt
        self.num_replaced = 0
        self._same_pid: Optional[Dict[int, np.ndarray]] = None

    def __len__(self) -> int:
        return len(self.items)

    def _candidates(self, index: int) -> List[int]:
        """Other indices to try for a bad `index`: same pid first (cyclic order), then the rest."""
        if self._same_pid is None:
            pids = np.asarray([it[1] for it in self.items])
            order = np.argsort(pids, kind="stable")
            uniq, starts = np.unique(pids[order], return_index=True)
            self._same_pid = dict(zip(uniq.tolist(), np.split(order, starts[1:])))
        same = self._same_pid[self.items[index][1]]
        pos = int(np.searchsorted(same, index))
        same_order = np.roll(same, -pos)[1:].tolist()
        n = len(self.items)
        return same_order + [(index + k) % n for k in range(1, n)]

    def __getitem__(self, key: Union[int, Tuple[int, ...]]) -> dict:
        # The train sampler sends (index, seed): the sample's augmentation stream is seeded
        # from its position in the epoch, whichever worker process loads it.
        index, seed, target = (tuple(key) + (None, None))[:3] if isinstance(key, tuple) else (key, None, None)
        if seed is not None:
            seed_sample(seed)
        path, pid, camid = self.items[index]
        try:
            img = read_image(path)
        except CorruptImageError:
            if not self.skip_corrupt:
                raise
            img, path, pid, camid = self._replacement(index)
        if target is not None:
            pid = target
        img = self.transform(img) if self.transform is not None else to_chw_tensor(img)
        return {"images": img, "targets": pid, "camids": camid, "img_paths": path}

    def _replacement(self, index: int):
        bad = self.items[index][0]
        for j in self._candidates(index):
            path, pid, camid = self.items[j]
            try:
                img = read_image(path)
            except CorruptImageError:
                continue
            self.num_replaced += 1
            logger.warning("DATASETS.SKIP_CORRUPT: unreadable image %r replaced by %r (%d replaced so far in "
                           "this process)", bad, path, self.num_replaced)
            return img, path, pid, camid
        raise CorruptImageError(f"No readable image left among {len(self.items)} items (first bad: {bad!r}).")


def collate_batch(samples: Sequence[dict]) -> dict:
    """Stack samples into the batch dict: images uint8 [B,3,H,W], targets/camids int64, img_paths list."""
    return {
        "images": torch.stack([s["images"] for s in samples]),
        "targets": torch.tensor([s["targets"] for s in samples], dtype=torch.int64),
        "camids": torch.tensor([s["camids"] for s in samples], dtype=torch.int64),
        "img_paths": [s["img_paths"] for s in samples],
    }
