"""VeRi-776 (Liu et al., ECCV 2016 / IEEE TMM 2018): 776 vehicles, 20 cameras, a city's road network.

Searched, in order (the first that holds all three image folders wins): ``root/VeRi``,
``root/veri``, ``root/VeRi-776``, ``root`` itself. File names are
``<vehicle id>_c<camera, 3 digits>_<timestamp>_<n>.jpg``, e.g. ``0002_c002_00030600_0.jpg``;
camera ``c002`` becomes camid 1. The release's other files (name_*.txt, gt_image.txt,
jk_image.txt, camera_ID.txt, the XML labels) are not read.

Loaded counts of the release: train 576 ids / 37,778 images, query 1,678 images and gallery
(image_test) 11,579 images of the other 200 ids, 20 cameras. Evaluation is the Market-1501 protocol:
gallery images of the query's vehicle seen by the query's camera are ignored.
"""
from __future__ import annotations

import os
import re
from typing import List

from .base import DATASET_REGISTRY, DatasetFormatError, Item, README_HINT, ReIDDataset, check_id
from .market_style import list_images
from .vehicle_release import find_release_dir

LAYOUT = """\
  <root>/VeRi/                       (or <root>/veri/, <root>/VeRi-776/, or <root> itself)
      image_train/   <vid>_c<cam>_<timestamp>_<n>.jpg ...   (576 ids, 37,778 images)
      image_query/   0002_c002_00030600_0.jpg ...   (1,678 images)
      image_test/    <vid>_c<cam>_<timestamp>_<n>.jpg ...   (11,579 images)"""

SUBDIRS = ("image_train", "image_query", "image_test")
NUM_CAMS = 20
_NAME_RE = re.compile(r"^(\d+)_c(\d+)_", re.ASCII)


def parse_veri_name(path: str) -> tuple:
    """``(vehicle id, 0-based camid)`` of a VeRi-776 file name; DatasetFormatError naming the file
    when it does not parse or its camera is outside c001..c020."""
    m = _NAME_RE.match(os.path.basename(path))
    if m is None:
        raise DatasetFormatError(
            f"Cannot read the vehicle id and camera from file name {path!r}: expected "
            f"'<vehicle id>_c<camera>_<timestamp>_<n>.jpg' such as 0002_c002_00030600_0.jpg. Remove or rename "
            f"the file. {README_HINT}"
        )
    vid = check_id(m.group(1), "vehicle id", repr(path))
    cam = check_id(m.group(2), "camera number", repr(path))
    if not 1 <= cam <= NUM_CAMS:
        raise DatasetFormatError(f"Camera c{m.group(2)} in {path!r} is outside c001..c{NUM_CAMS:03d} of VeRi-776. "
                                 f"Check that the file belongs to this dataset. {README_HINT}")
    return vid, cam - 1


def load_veri_folder(folder: str) -> List[Item]:
    """Items of one VeRi-776 image folder, in file-name order."""
    return [(path, *parse_veri_name(path)) for path in list_images(folder)]


@DATASET_REGISTRY.register("veri")
class VeRi(ReIDDataset):
    """VeRi-776 from its release folder; see the module docstring for the layout and counts."""

    name = "veri"
    #: Folder names tried under the root, in order ("" = the root itself).
    candidates = ("VeRi", "veri", "VeRi-776", "")
    num_cams = NUM_CAMS

    def __init__(self, root: str = "datasets") -> None:
        self.dataset_dir = find_release_dir(root, self.candidates, SUBDIRS, "VeRi-776", LAYOUT)
        super().__init__(*(load_veri_folder(os.path.join(self.dataset_dir, sub)) for sub in SUBDIRS))
