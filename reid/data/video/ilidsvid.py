"""iLIDS-VID (Wang et al., ECCV 2014): 300 people, each seen once by each of 2 cameras.

Layout (searched as ``root/ilids-vid``, ``root/iLIDS-VID``, then ``root`` itself)::

    <root>/ilids-vid/
        i-LIDS-VID/sequences/cam1/person001/cam1_person001_00317.png ...
        i-LIDS-VID/sequences/cam2/person001/...
        train-test people splits/train_test_splits_ilidsvid.mat     (array ls_set)

The splits file is the one published with the dataset: ``ls_set`` is 10 x 300, one split per
row, entries are 1-based indices into the sorted person folder names of ``cam1``. Assumption,
checked against the widely used loaders (torchreid and its descendants), which follow Wang et
al.: the FIRST half of a row (150 people) is the TEST set and the second half the TRAIN set.

Protocol: train = both cameras' tracklets of the train people (pids relabelled), query = camera
1 tracklets of the test people, gallery = camera 2 tracklets of the test people. Person ids are
the folder numbers (``person001`` -> 1). ``split_id`` picks the row (0..9).
"""
from __future__ import annotations

import os
import re
from typing import List, Tuple

import numpy as np

from reid.data.datasets.base import DatasetFormatError, find_dataset_dir

from .files import read_mat_array
from .splits import check_split_id
from .tracklets import VIDEO_DATASET_REGISTRY, VideoReIDDataset
from .two_cameras import person_folders, split_tracklets

LAYOUT = """\
  <root>/ilids-vid/                   (or <root>/iLIDS-VID/, or <root> itself)
      i-LIDS-VID/sequences/cam1/person001/cam1_person001_00317.png ...
      i-LIDS-VID/sequences/cam2/person001/...
      train-test people splits/train_test_splits_ilidsvid.mat"""

SEQUENCES = os.path.join("i-LIDS-VID", "sequences")
SPLITS_FILE = os.path.join("train-test people splits", "train_test_splits_ilidsvid.mat")
_PERSON_RE = re.compile(r"person(\d+)")
_HINT = "use train_test_splits_ilidsvid.mat as published with iLIDS-VID (array ls_set, 10 x 300)."


def check_same_people(cam1: List[str], cam2: List[str], cam_dirs: Tuple[str, str]) -> None:
    """Every person folder must be in both cameras: a split indexes one list for both."""
    for names, other, where in ((cam1, set(cam2), cam_dirs[1]), (cam2, set(cam1), cam_dirs[0])):
        lone = [n for n in names if n not in other]
        if lone:
            raise DatasetFormatError(f"Person folder {lone[0]!r} is missing from {where} ({len(lone)} people are "
                                     "in one camera only); restore the complete iLIDS-VID sequences folder.")


def split_people(ls_set: np.ndarray, split_id: int, people: List[str], path: str) -> Tuple[List[str], List[str]]:
    """``(train, test)`` person folder names of row `split_id` of `ls_set`: test = first half."""
    row = ls_set[split_id]
    bad = np.flatnonzero((row < 1) | (row > len(people)))
    if bad.size:
        raise DatasetFormatError(f"{path}: split {split_id} names person index {row[bad[0]]}, outside the "
                                 f"{len(people)} person folders of cam1 (1-based); {_HINT}")
    if np.unique(row).size != row.size:
        raise DatasetFormatError(f"{path}: split {split_id} names a person twice; {_HINT}")
    half = row.size // 2
    test, train = np.sort(row[:half]) - 1, np.sort(row[half:]) - 1
    return [people[i] for i in train.tolist()], [people[i] for i in test.tolist()]


@VIDEO_DATASET_REGISTRY.register("ilidsvid")
class ILIDSVID(VideoReIDDataset):
    """iLIDS-VID with one of its 10 published splits; see the module docstring."""

    name = "ilidsvid"
    candidates = ("ilids-vid", "iLIDS-VID", "")

    def __init__(self, root: str = "datasets", split_id: int = 0) -> None:
        cams = (os.path.join(SEQUENCES, "cam1"), os.path.join(SEQUENCES, "cam2"))
        self.dataset_dir = find_dataset_dir(root, self.candidates, cams + (SPLITS_FILE,), "iLIDS-VID", LAYOUT)
        cam_dirs = (os.path.join(self.dataset_dir, cams[0]), os.path.join(self.dataset_dir, cams[1]))
        cam1, cam2 = person_folders(cam_dirs[0]), person_folders(cam_dirs[1])
        check_same_people(cam1, cam2, cam_dirs)
        path = os.path.join(self.dataset_dir, SPLITS_FILE)
        ls_set = read_mat_array(path, "ls_set", _HINT)
        if ls_set.ndim != 2 or ls_set.shape[1] < 2 or ls_set.shape[1] % 2:
            raise DatasetFormatError(f"{path}: ls_set has shape {tuple(ls_set.shape)}, expected splits x people "
                                     f"with an even number of people; {_HINT}")
        self.split_id = check_split_id(split_id, ls_set.shape[0], path)
        self.num_splits = int(ls_set.shape[0])
        train_people, test_people = split_people(ls_set, self.split_id, cam1, path)
        super().__init__(*split_tracklets(cam_dirs, train_people, test_people, _PERSON_RE, "person001"))
        self.test_notes.update(split_id=self.split_id, splits_file=path)
