"""A torch Dataset over tracklets ``(frames, pid, camid)`` and the collate function of their batches.

A sample is a clip of the tracklet: the frames :func:`reid.data.frame_sampling.sample_frames`
picks (``DATALOADER.VIDEO.SAMPLER`` / ``SEQ_LEN`` / ``STRIDE``), each read and transformed as an
image sample is (reid/data/dataset_wrappers.py), stacked into ``uint8 [T, 3, H, W]``. Batches pad
clips of different lengths (``all`` at test) to the longest with a ``frame_mask`` saying which
frames are real, the mask the temporal poolings take (reid/modeling/temporal.py).

Randomness is the image pipeline's: a sampler with ``sample_seeds=True`` sends ``(index, seed)``,
and both the frame choice (a numpy Generator from `seed`) and the augmentation (the generators
seeded with `seed`) follow from it, so a resumed epoch draws the same clips. Without a seed the
frame choice is seeded by ``(dataset seed, index)``: the same clip every time.
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import Dataset

from reid.utils.process import seed_sample

from .frame_sampling import check_sampling, sample_frames
from .image_io import read_image
from .transforms import to_chw_tensor


class TrackletDataset(Dataset):
    """Clips of `tracklets` (each ``(frame paths, pid, camid)``) in the batch format of images, plus
    ``num_frames``: ``{"images": uint8 [T, 3, H, W], "targets", "camids", "img_paths": first frame,
    "num_frames": T}``. `method`, `seq_len` and `stride` choose the frames (checked here, one line
    naming the key); `transform` is applied to each frame (it must give every frame one size)."""

    def __init__(self, tracklets: Sequence, transform: Optional[Callable] = None, method: str = "evenly",
                 seq_len: int = 8, stride: int = 1, seed: int = 0) -> None:
        check_sampling(method, seq_len, stride)
        self.tracklets = list(tracklets)
        self.transform = transform
        self.method, self.seq_len, self.stride, self.seed = str(method), int(seq_len), int(stride), int(seed)

    def __len__(self) -> int:
        return len(self.tracklets)

    def frame_indices(self, index: int, seed: Optional[int] = None) -> np.ndarray:
        """The frames of tracklet `index` a sample with `seed` uses (see the module docstring)."""
        rng = np.random.default_rng(int(seed) if seed is not None else [self.seed, int(index)])
        return sample_frames(len(self.tracklets[index][0]), self.method, self.seq_len, self.stride, rng)

    def __getitem__(self, key: Union[int, Tuple[int, ...]]) -> dict:
        index, seed, target = (tuple(key) + (None, None))[:3] if isinstance(key, tuple) else (key, None, None)
        frames, pid, camid = self.tracklets[index]
        chosen = self.frame_indices(index, seed)
        if seed is not None:
            seed_sample(seed)
        images = []
        for i in chosen.tolist():
            img = read_image(frames[i])
            images.append(self.transform(img) if self.transform is not None else to_chw_tensor(img))
        sizes = {tuple(img.shape) for img in images}
        if len(sizes) > 1:
            raise ValueError(f"Tracklet {os.path.dirname(frames[0]) or frames[0]}: its frames come out in different sizes "
                             f"({', '.join('x'.join(map(str, s[1:])) for s in sorted(sizes))}); a clip needs one size: "
                             "resize them (INPUT.SIZE_TRAIN / INPUT.SIZE_TEST) or give frames of one size.")
        return {"images": torch.stack(images), "targets": pid if target is None else target, "camids": camid,
                "img_paths": frames[0], "num_frames": len(images)}


def collate_tracklets(samples: Sequence[dict]) -> dict:
    """Batch clips: ``images`` uint8 ``[B, T, 3, H, W]`` padded with zeros to the longest clip,
    ``frame_mask`` bool ``[B, T]`` (True on real frames), targets / camids int64, img_paths, and
    ``num_frames`` int64 ``[B]``."""
    lengths = torch.tensor([s["num_frames"] for s in samples], dtype=torch.int64)
    longest = int(lengths.max())
    first = samples[0]["images"]
    images = first.new_zeros((len(samples), longest, *first.shape[1:]))
    for row, sample in enumerate(samples):  # one copy per clip (a batch holds a few), not per frame
        images[row, : sample["num_frames"]] = sample["images"]
    return {
        "images": images,
        "frame_mask": torch.arange(longest).unsqueeze(0) < lengths.unsqueeze(1),
        "targets": torch.tensor([s["targets"] for s in samples], dtype=torch.int64),
        "camids": torch.tensor([s["camids"] for s in samples], dtype=torch.int64),
        "img_paths": [s["img_paths"] for s in samples],
        "num_frames": lengths,
    }


__all__ = ["TrackletDataset", "collate_tracklets"]
