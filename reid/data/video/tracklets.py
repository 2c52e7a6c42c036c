"""Video re-ID data: tracklets, the dataset object every video parser returns, and its registry.

A tracklet is ``(frames, pid, camid)``: the paths of its frame images in temporal order (a
tuple), the person id and the 0-based camera id. Query and gallery items are whole tracklets,
so evaluation compares one feature per tracklet (built from its frames) with another.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from reid.data.datasets.base import DatasetFormatError, relabel_pids
from reid.data.image_io import is_image_file
from reid.utils.registry import Registry

#: One tracklet: (frame image paths in temporal order, person id, 0-based camera id).
Tracklet = Tuple[Tuple[str, ...], int, int]

#: name -> video dataset class; :func:`build_video_dataset` looks names up here.
VIDEO_DATASET_REGISTRY = Registry("video dataset")

_DIGITS_RE = re.compile(r"(\d+)")


def natural_key(name: str) -> Tuple[Any, ...]:
    """Sort key that orders the digit runs of `name` by value: ``f9`` before ``f10``.

    Frame numbers of user folders are not always zero-padded; a plain string sort would put
    frame 10 before frame 9 and scramble the temporal order.
    """
    parts = _DIGITS_RE.split(name)
    return tuple((0, int(p), p) if i % 2 else (1, 0, p) for i, p in enumerate(parts))


def list_frames(folder: str) -> List[str]:
    """Paths of the image files directly inside `folder`, in temporal (natural) order.

    Hidden files (macOS ``._*`` copies, ``.DS_Store``) are not frames and are skipped.
    """
    with os.scandir(folder) as it:
        names = [e.name for e in it if not e.name.startswith(".") and e.is_file() and is_image_file(e.name)]
    return [os.path.join(folder, n) for n in sorted(names, key=natural_key)]


def check_tracklet(frames: Sequence[str], where: str) -> Tuple[str, ...]:
    """`frames` as a tuple, or a one-line DatasetFormatError naming `where` (its folder or list
    entry) when the tracklet has no frames: an empty tracklet has no feature to compare."""
    if len(frames) == 0:
        raise DatasetFormatError(f"Tracklet {where} has no frame images: add its frames or remove it "
                                 "from the dataset.")
    return tuple(frames)


class VideoReIDDataset:
    """A video re-ID dataset: train, query and gallery lists of tracklets.

    ``train`` pids are relabelled to 0..C-1 (sorted original pids, mapping in ``train_pid_map``)
    so they index a classifier; ``query`` and ``gallery`` keep the original pids because
    evaluation only compares them for equality. ``junk_pids`` label gallery tracklets that a query
    ignores (neither a hit nor a miss); ``distractor_pids`` label gallery tracklets of people who
    are never queried (always a miss). Both stay in the gallery and are recorded here so that the
    evaluation can apply them.
    """

    #: Registry name; subclasses override it.
    name: str = "video"
    #: Gallery pids whose tracklets are ignored in ranking (MARS's -1).
    junk_pids: Tuple[int, ...] = ()
    #: Gallery pids of unqueried people, kept as negatives (MARS's 0).
    distractor_pids: Tuple[int, ...] = ()
    #: How query/gallery are evaluated: a gallery tracklet of the query's own person and camera
    #: does not count (the image datasets' protocol; every video benchmark here uses it).
    test_protocol: str = "cross_camera"
    #: False when the train tracklets carry no identities (pid -1): only learning without labels uses them.
    has_labels: bool = True

    def __init__(self, train: Sequence[Tracklet], query: Sequence[Tracklet], gallery: Sequence[Tracklet],
                 name: Optional[str] = None, relabel: bool = True) -> None:
        if name is not None:
            self.name = name
        if relabel:
            self.train, self.train_pid_map = relabel_pids(train)  # a tracklet's pid sits where an image's does
        else:
            self.train, self.train_pid_map = list(train), {}
        self.query: List[Tracklet] = list(query)
        self.gallery: List[Tracklet] = list(gallery)
        #: What a test of this query/gallery should record beside its metrics (split, split source).
        self.test_notes: Dict[str, Any] = {}

    @property
    def num_train_pids(self) -> int:
        """Number of training identities (classes)."""
        return len({t[1] for t in self.train})

    @property
    def num_train_cams(self) -> int:
        """Number of distinct cameras in the training subset."""
        return len({t[2] for t in self.train})

    @staticmethod
    def num_frames(tracklets: Sequence[Tracklet]) -> int:
        """Total number of frames of `tracklets`."""
        return sum(len(t[0]) for t in tracklets)

    def summary(self) -> str:
        """A small text table: subset | ids | tracklets | frames | cameras."""
        lines = [
            f"Video dataset {self.name}",
            f"  {'subset':<8} | {'ids':>6} | {'tracklets':>9} | {'frames':>9} | {'cameras':>7}",
            f"  {'-' * 8}-+-{'-' * 6}-+-{'-' * 9}-+-{'-' * 9}-+-{'-' * 7}",
        ]
        for label, items in (("train", self.train), ("query", self.query), ("gallery", self.gallery)):
            ids, cams = len({t[1] for t in items}), len({t[2] for t in items})
            lines.append(f"  {label:<8} | {ids:>6} | {len(items):>9} | {self.num_frames(items):>9} | {cams:>7}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, train={len(self.train)}, "
                f"query={len(self.query)}, gallery={len(self.gallery)})")

