"""PKU VehicleID (Liu et al., CVPR 2016): 221,567 images of 26,328 vehicles, no camera ids.

Searched, in order (the first that holds ``image/`` and ``train_test_split/`` wins):
``root/VehicleID_V1.0``, ``root/VehicleID``, ``root/vehicleid``, ``root`` itself. A split list
line is ``<image id> <vehicle id>``; the image is ``image/<image id>.jpg``. Training reads
``train_list.txt`` (13,164 vehicles); the test set is ``test_list_<size>.txt`` with `test_size`
(DATASETS.VEHICLEID.TEST_SIZE) vehicles: 800, 1600 or 2400 (the small / medium / large sets of the
paper), or 3200, 6000, 13164 (more lists of the release). Every listed image must be on disk.

The release has no camera ids, and its protocol has none: for each test vehicle one image drawn at
random is the gallery, all its other images are queries, and the results are the mean over 10
draws (``test_protocol = "gallery_draws"``, reid/evaluation/gallery_draws.py). The dataset's own
``query``/``gallery`` hold one fixed split for tools that need one (the first listed image of each
vehicle is its gallery image); the evaluation pools them and draws again. Camera ids are
bookkeeping: 0 for training and gallery images, 1 for queries, so that no same-camera rule drops a
match when the fixed split is evaluated as a plain query/gallery set.
"""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

import numpy as np

from .base import DATASET_REGISTRY, DatasetFormatError, Item, README_HINT, ReIDDataset
from .vehicle_release import (COPY_WHOLE, check_images, find_release_dir, parse_vid, read_fields, require_list,
                              test_size_hint)

LAYOUT = """\
  <root>/VehicleID_V1.0/             (or <root>/VehicleID/, <root>/vehicleid/, or <root> itself)
      image/              <image id>.jpg ...          (221,567 images)
      train_test_split/   train_list.txt              (lines '<image id> <vehicle id>', 13,164 vehicles)
                          test_list_800.txt  test_list_1600.txt  test_list_2400.txt
                          (test_list_3200.txt  test_list_6000.txt  test_list_13164.txt)"""

REQUIRED = ("image", "train_test_split")
#: Valid values of DATASETS.VEHICLEID.TEST_SIZE: the test lists of the release.
TEST_SIZES = (800, 1600, 2400, 3200, 6000, 13164)
#: Bookkeeping cameras of the fixed split (the release has none; see the module docstring).
GALLERY_CAMID, QUERY_CAMID = 0, 1
_LINE = "'<image id> <vehicle id>'"


def split_list_name(size: object) -> str:
    """File name of the test list with `size` vehicles."""
    return f"test_list_{size}.txt"


def check_test_size(test_size: object) -> int:
    """`test_size` as one of TEST_SIZES; ValueError naming DATASETS.VEHICLEID.TEST_SIZE otherwise."""
    size = int(test_size) if isinstance(test_size, (int, np.integer)) or str(test_size).isdigit() else None
    if size not in TEST_SIZES:
        raise ValueError(f"DATASETS.VEHICLEID.TEST_SIZE must be one of {', '.join(map(str, TEST_SIZES))} (vehicles in "
                         f"the test list; 800/1600/2400 = small/medium/large), got {test_size!r}.")
    return size


def read_vehicleid_list(path: str, image_dir: str) -> List[Item]:
    """Items ``(image path, vehicle id, 0)`` of one VehicleID split list, in list order.

    Raises DatasetFormatError naming the file and line for a malformed line, and
    DatasetNotFoundError naming them for a line whose image is not in `image_dir`.
    """
    lines = read_fields(path, "VehicleID split list", _LINE, 2)
    for _, lineno, (imgid, _) in lines:
        if os.sep in imgid or "/" in imgid or imgid.startswith("."):
            raise DatasetFormatError(f"{path}, line {lineno}: image id {imgid!r} is not a plain name; expected "
                                     f"{_LINE}. {README_HINT}")
    vids = [parse_vid(fields[1], f"{path}, line {lineno}", "1") for _, lineno, fields in lines]
    paths = [os.path.join(image_dir, f"{fields[0]}.jpg") for _, _, fields in lines]
    check_images(paths, lines, "VehicleID")
    return [(p, vid, 0) for p, vid in zip(paths, vids)]


def fixed_split(items: Sequence[Item]) -> Tuple[List[Item], List[Item]]:
    """(query, gallery): the first listed image of each vehicle is its gallery image, the others
    are queries; camids become the bookkeeping QUERY_CAMID / GALLERY_CAMID."""
    pids = np.fromiter((it[1] for it in items), dtype=np.int64, count=len(items))
    _, first = np.unique(pids, return_index=True)
    is_gallery = np.zeros(len(items), dtype=bool)
    is_gallery[first] = True
    query = [(items[i][0], items[i][1], QUERY_CAMID) for i in np.flatnonzero(~is_gallery).tolist()]
    gallery = [(items[i][0], items[i][1], GALLERY_CAMID) for i in np.flatnonzero(is_gallery).tolist()]
    return query, gallery


@DATASET_REGISTRY.register("vehicleid")
class VehicleID(ReIDDataset):
    """VehicleID with the test list of `test_size` vehicles (DATASETS.VEHICLEID.TEST_SIZE).

    Raises ValueError for a test size that is not one of TEST_SIZES, DatasetNotFoundError naming
    the folder or file for a missing folder, split list or listed image, and DatasetFormatError
    naming the list file and line for a malformed line.
    """

    name = "vehicleid"
    candidates = ("VehicleID_V1.0", "VehicleID", "vehicleid", "")
    test_protocol = "gallery_draws"
    empty_test_hint = ("VehicleID's test list needs vehicles with two images or more (one is the gallery, the "
                       "others queries); check DATASETS.VEHICLEID.TEST_SIZE and the list file.")

    def __init__(self, root: str = "datasets", test_size: int = 800) -> None:
        self.test_size = check_test_size(test_size)
        self.dataset_dir = find_release_dir(root, self.candidates, REQUIRED, "VehicleID", LAYOUT)
        split_dir = os.path.join(self.dataset_dir, "train_test_split")
        image_dir = os.path.join(self.dataset_dir, "image")
        train_list = require_list(os.path.join(split_dir, "train_list.txt"), "VehicleID", COPY_WHOLE)
        hint = test_size_hint(split_dir, split_list_name, TEST_SIZES, "DATASETS.VEHICLEID.TEST_SIZE", self.test_size)
        test_list = require_list(os.path.join(split_dir, split_list_name(self.test_size)), "VehicleID", hint)
        train = read_vehicleid_list(train_list, image_dir)
        query, gallery = fixed_split(read_vehicleid_list(test_list, image_dir))
        super().__init__(train, query, gallery)
