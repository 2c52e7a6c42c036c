"""Synthetic tracklets (reid/data/video/synthetic_video.py): the image dataset's draws of one person in one
camera as one tracklet, each test person's first camera as the query, distractors as one-frame tracklets."""
from __future__ import annotations

import os
from collections import Counter

from reid.data.datasets.synthetic import SyntheticDataset
from reid.data.video import build_video_dataset

SMALL = dict(num_train_ids=4, num_test_ids=3, num_cameras=3, num_distractors=2, image_size=(32, 16), verbose=False)


def test_tracklets_are_one_person_in_one_camera_with_the_images_frames(tmp_path):
    video = build_video_dataset("synthetic_video", root=str(tmp_path), frames=4, **SMALL)
    images = SyntheticDataset(str(tmp_path), images_per_camera=4, **SMALL)
    assert video.dataset_dir == images.dataset_dir  # the same cache: no new pixels
    # every training image in exactly one tracklet of 4 frames, one pid and one camera each
    assert sorted(f for t in video.train for f in t[0]) == sorted(p for p, _, _ in images.train)
    assert all(len(t[0]) == 4 and list(t[0]) == sorted(t[0]) for t in video.train)
    by_path = {p: (pid, cam) for p, pid, cam in images.train}
    assert all({by_path[f] for f in frames} == {(pid, cam)} for frames, pid, cam in video.train)
    assert video.num_train_pids == 4 and sorted({t[1] for t in video.train}) == [0, 1, 2, 3]
    assert len({(t[1], t[2]) for t in video.train}) == len(video.train)


def test_each_test_person_queries_from_its_first_camera_and_is_found_in_another(tmp_path):
    video = build_video_dataset("synthetic_video", root=str(tmp_path), frames=3, **SMALL)
    assert sorted(t[1] for t in video.query) == [5, 6, 7] and all(len(t[0]) == 3 for t in video.query)
    for frames, pid, cam in video.query:
        others = [t for t in video.gallery if t[1] == pid]
        assert others and all(t[2] > cam for t in others)  # its other cameras, never the query's own
        assert all(os.path.isfile(f) for f in frames)
    distractors = [t for t in video.gallery if t[1] == 0]
    assert len(distractors) == 2 and all(len(t[0]) == 1 for t in distractors)
    assert video.distractor_pids == (0,)
    assert Counter(len(t[0]) for t in video.gallery if t[1] != 0) == Counter({3: len(video.gallery) - 2})
