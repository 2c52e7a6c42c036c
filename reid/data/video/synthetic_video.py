"""Synthetic tracklets: the built-in synthetic people as video data, for tests and a video demo.

The image dataset (reid/data/datasets/synthetic.py) draws each identity in each of its cameras
``images_per_camera`` times, every image with its own pose, light, blur and occlusion draw; here
those images of one person in one camera are one tracklet of ``frames`` frames (in the order they
were drawn). Same cache, same renderer, no new pixels: ``root/synthetic/<key>/``.

Protocol: train = every tracklet of the training identities; for each test identity the tracklet
of its first camera is the query and those of its other cameras the gallery (so every query has a
match in another camera), with the one-image distractor people (pid 0) as one-frame gallery
tracklets.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

from reid.data.datasets.synthetic import SyntheticDataset

from .tracklets import VIDEO_DATASET_REGISTRY, Tracklet, VideoReIDDataset

Item = Tuple[str, int, int]


def tracklets_of(items: Sequence[Item], one_off: Sequence[int] = ()) -> List[Tracklet]:
    """The images of `items` grouped by (pid, camera) into tracklets, frames in name order (the order
    they were drawn), tracklets ordered by (pid, camera); images of the `one_off` pids (distractors:
    a different person in every image) one tracklet each, after the others."""
    groups: Dict[Tuple[int, int], List[str]] = defaultdict(list)
    single: List[Tracklet] = []
    for path, pid, cam in items:
        if pid in one_off:
            single.append(((path,), 0, cam))
        else:
            groups[(pid, cam)].append(path)
    grouped = [(tuple(sorted(paths)), pid, cam) for (pid, cam), paths in sorted(groups.items())]
    return grouped + sorted(single)


def query_and_gallery(tracklets: Sequence[Tracklet]) -> Tuple[List[Tracklet], List[Tracklet]]:
    """Each person's first-camera tracklet as the query, the rest (distractors included) as the gallery."""
    query, gallery, seen = [], [], set()
    for tracklet in tracklets:  # ordered by (pid, camera): a person's first camera comes first
        pid = tracklet[1]
        if pid != SyntheticVideoDataset.distractor_pids[0] and pid not in seen:
            seen.add(pid)
            query.append(tracklet)
        else:
            gallery.append(tracklet)
    return query, gallery


@VIDEO_DATASET_REGISTRY.register("synthetic_video")
class SyntheticVideoDataset(VideoReIDDataset):
    """Synthetic people as tracklets of `frames` frames (see the module docstring); the other arguments
    are the image dataset's (DATASETS.SYNTHETIC.*)."""

    name = "synthetic_video"
    distractor_pids = (0,)

    def __init__(self, root: str = "datasets", num_train_ids: int = 100, num_test_ids: int = 100,
                 num_cameras: int = 6, frames: int = 8, num_distractors: Optional[int] = None, seed: int = 0,
                 image_size: Sequence[int] = (128, 64), verbose: bool = True, style: str = "demo") -> None:
        images = SyntheticDataset(root, num_train_ids, num_test_ids, num_cameras, images_per_camera=frames,
                                  num_distractors=num_distractors, seed=seed, image_size=image_size,
                                  verbose=verbose, style=style)
        self.dataset_dir = images.dataset_dir
        test = tracklets_of(list(images.query) + list(images.gallery), one_off=self.distractor_pids)
        query, gallery = query_and_gallery(test)
        super().__init__(tracklets_of(images.train), query, gallery)  # train pids: 0..C-1, no distractors


__all__ = ["SyntheticVideoDataset", "query_and_gallery", "tracklets_of"]
