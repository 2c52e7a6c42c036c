"""Clips of tracklets (reid/data/tracklet_dataset.py): the frames the sampler picks, read in order,
seeded like image samples, padded into batches with a frame mask; frames of two sizes refused."""
from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
import torch

from reid.data.frame_sampling import sample_frames
from reid.data.tracklet_dataset import TrackletDataset, collate_tracklets


def _tracklet(folder, n, size=(16, 8), pid=3, camid=1):
    """`n` (<= 25) frames whose pixels all hold the frame's number (10, 20, ...), so a clip shows which it read."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(n):
        path = os.path.join(folder, f"f{i:03d}.png")
        h, w = size if not callable(size) else size(i)
        assert cv2.imwrite(path, np.full((h, w, 3), 10 * (i + 1), np.uint8))
        paths.append(path)
    return tuple(paths), pid, camid


def _frames_read(sample):
    return (sample["images"][:, 0, 0, 0].numpy().astype(int) // 10 - 1).tolist()


def test_evenly_reads_the_sampled_frames_in_order_with_the_tracklets_labels(tmp_path):
    data = TrackletDataset([_tracklet(str(tmp_path / "t"), 10)], method="evenly", seq_len=4)
    sample = data[0]
    assert _frames_read(sample) == sample_frames(10, "evenly", 4).tolist() == [1, 3, 6, 8]
    assert sample["images"].shape == (4, 3, 16, 8) and sample["images"].dtype == torch.uint8
    assert (sample["targets"], sample["camids"], sample["num_frames"]) == (3, 1, 4)
    assert sample["img_paths"] == str(tmp_path / "t" / "f000.png")


def test_random_clips_follow_the_samplers_seed_and_are_fixed_without_one(tmp_path):
    data = TrackletDataset([_tracklet(str(tmp_path / "t"), 25)], method="random", seq_len=5, seed=7)
    a, b, c = data[(0, 11)], data[(0, 11)], data[(0, 12)]
    assert _frames_read(a) == _frames_read(b) != _frames_read(c)  # a resumed epoch draws what it drew
    assert _frames_read(a) == sample_frames(25, "random", 5, rng=np.random.default_rng(11)).tolist()
    assert _frames_read(data[0]) == _frames_read(data[0])  # no seed: one clip per tracklet, every time
    assert data[(0, 11, 42)]["targets"] == 42  # a pseudo-label (learning without labels) replaces the pid


def test_batches_pad_clips_of_different_lengths_and_mask_the_padding(tmp_path):
    data = TrackletDataset([_tracklet(str(tmp_path / "a"), 3), _tracklet(str(tmp_path / "b"), 5, pid=4, camid=0)],
                           method="all")
    batch = collate_tracklets([data[0], data[1]])
    assert batch["images"].shape == (2, 5, 3, 16, 8)
    assert batch["frame_mask"].tolist() == [[True] * 3 + [False] * 2, [True] * 5]
    assert batch["num_frames"].tolist() == [3, 5] and batch["targets"].tolist() == [3, 4]
    assert batch["camids"].tolist() == [1, 0]
    assert int(batch["images"][0, 3:].abs().sum()) == 0 and _frames_read({"images": batch["images"][1]}) == [0, 1, 2, 3, 4]


def test_frames_of_two_sizes_without_a_resize_are_one_line_naming_the_tracklet(tmp_path):
    folder = str(tmp_path / "person_7")
    data = TrackletDataset([_tracklet(folder, 4, size=lambda i: (16, 8) if i % 2 else (20, 10))], method="all")
    with pytest.raises(ValueError) as err:
        data[0]
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"Tracklet {folder}: its frames come out in different sizes")
    assert "16x8" in message and "20x10" in message and "INPUT.SIZE_TRAIN" in message


def test_bad_sampling_settings_are_refused_when_the_dataset_is_built(tmp_path):
    tracklets = [_tracklet(str(tmp_path / "t"), 2)]
    with pytest.raises(ValueError, match="DATALOADER.VIDEO.SEQ_LEN must be a positive integer, got 0"):
        TrackletDataset(tracklets, seq_len=0)
    with pytest.raises(KeyError, match="evenly"):
        TrackletDataset(tracklets, method="sometimes")
