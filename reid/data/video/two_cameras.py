"""What iLIDS-VID and PRID2011 share: two camera folders of person folders, 10 train/test splits.

A split names the people of train and test; train = both cameras' tracklets of the train people,
query = the first camera's tracklets of the test people, gallery = the second camera's.
"""
from __future__ import annotations

import os
import re
from typing import List, Sequence, Tuple

from reid.data.datasets.base import DatasetFormatError

from .tracklets import Tracklet, check_tracklet, list_frames


def person_folders(cam_dir: str) -> List[str]:
    """Sorted names of the (non-hidden) folders inside `cam_dir`."""
    with os.scandir(cam_dir) as it:
        return sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))


def person_id(folder: str, pattern: "re.Pattern[str]", example: str, where: str) -> int:
    """The person number of person folder name `folder` (``person001`` -> 1), or a one-line
    DatasetFormatError naming `where` when the name does not match `pattern`."""
    m = pattern.fullmatch(folder)
    if m is None:
        raise DatasetFormatError(f"Folder {os.path.join(where, folder)!r} is not a person folder such as "
                                 f"{example!r}; remove or rename it.")
    return int(m.group(1))


def camera_tracklets(cam_dir: str, camid: int, people: Sequence[str], pattern: "re.Pattern[str]",
                     example: str) -> List[Tracklet]:
    """One tracklet per person folder of `people` under `cam_dir`, camera `camid`."""
    out = []
    for folder in people:
        path = os.path.join(cam_dir, folder)
        pid = person_id(folder, pattern, example, cam_dir)
        out.append((check_tracklet(list_frames(path), repr(path)), pid, camid))
    return out


def split_tracklets(cam_dirs: Tuple[str, str], train: Sequence[str], test: Sequence[str],
                    pattern: "re.Pattern[str]", example: str) -> Tuple[List[Tracklet], ...]:
    """``(train, query, gallery)`` of a split: both cameras for train, camera 0 / 1 for query / gallery."""
    first = camera_tracklets(cam_dirs[0], 0, train, pattern, example)
    second = camera_tracklets(cam_dirs[1], 1, train, pattern, example)
    query = camera_tracklets(cam_dirs[0], 0, test, pattern, example)
    gallery = camera_tracklets(cam_dirs[1], 1, test, pattern, example)
    return first + second, query, gallery
