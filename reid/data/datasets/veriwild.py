"""VERI-Wild (Lou et al., CVPR 2019): 416,314 images of 40,671 vehicles, 174 cameras, one month of a
city's CCTV system.

Searched, in order (the first that holds ``images/`` and ``train_test_split/`` wins):
``root/VERI-Wild``, ``root/VeRI-Wild``, ``root/veriwild``, ``root`` itself. Images are
``images/<vehicle id>/<image id>.jpg``; ``train_test_split/`` holds the lists:

* ``train_list.txt`` (30,671 vehicles, 277,797 images) and the test lists ``test_<N>.txt``
  (gallery) and ``test_<N>_query.txt`` (query) for N = 3000 / 5000 / 10000 vehicles (small /
  medium / large; `test_size`, DATASETS.VERIWILD.TEST_SIZE): one image per line,
  ``<vehicle id>/<image id>`` (no extension);
* ``vehicle_info.txt``: ``<vehicle id>/<image id>;<camera>;<time>;<model>;<type>;<color>`` per
  image, after an optional header line. The camera comes from here (camid = the number as written;
  the evaluation only compares cameras for equality).

The gallery is the ``test_<N>.txt`` list as given and the queries are ``test_<N>_query.txt``,
as fast-reid reads them; evaluation is the Market-1501 protocol (gallery images of the query's
vehicle seen by its camera are ignored), which also ignores a query's own image if the gallery
list names it. Every listed image must be on disk and have a line in vehicle_info.txt.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Tuple

from .base import DATASET_REGISTRY, DatasetFormatError, Item, README_HINT, ReIDDataset, check_id
from .vehicle_release import (COPY_WHOLE, check_images, find_release_dir, parse_vid, read_fields, require_list,
                              test_size_hint)

LAYOUT = """\
  <root>/VERI-Wild/                  (or <root>/VeRI-Wild/, <root>/veriwild/, or <root> itself)
      images/<vehicle id>/<image id>.jpg ...
      train_test_split/   train_list.txt   vehicle_info.txt
                          test_3000.txt    test_3000_query.txt     (small)
                          test_5000.txt    test_5000_query.txt     (medium)
                          test_10000.txt   test_10000_query.txt    (large)"""

REQUIRED = ("images", "train_test_split")
#: Valid values of DATASETS.VERIWILD.TEST_SIZE (vehicles in the test set) and their names.
TEST_SIZES = {3000: "small", 5000: "medium", 10000: "large"}
_IMAGE_RE = re.compile(r"^\d+/\d+$", re.ASCII)
_LIST_LINE = "'<vehicle id>/<image id>' (no extension)"
_INFO_LINE = "'<vehicle id>/<image id>;<camera>;<time>;<model>;<type>;<color>'"


def check_test_size(test_size: object) -> int:
    """`test_size` as one of TEST_SIZES (a number, or small/medium/large); ValueError naming
    DATASETS.VERIWILD.TEST_SIZE and the valid values otherwise."""
    by_name = {name: size for size, name in TEST_SIZES.items()}
    text = str(test_size).strip().lower()
    size = by_name.get(text, int(text) if text.isdigit() else None)
    if size not in TEST_SIZES:
        valid = ", ".join(f"{s} ({n})" for s, n in TEST_SIZES.items())
        raise ValueError(f"DATASETS.VERIWILD.TEST_SIZE must be one of {valid}, got {test_size!r}.")
    return size


def read_cameras(path: str) -> Dict[str, int]:
    """``{"<vehicle id>/<image id>": camera}`` from vehicle_info.txt (its header line skipped)."""
    lines = read_fields(path, "VERI-Wild vehicle_info.txt", _INFO_LINE, 2, sep=";",
                        skip_header=lambda fields: _IMAGE_RE.match(fields[0]) is None, exact=False)
    cameras: Dict[str, int] = {}
    for _, lineno, fields in lines:
        if not (fields[1].isascii() and fields[1].isdigit()):
            raise DatasetFormatError(f"{path}, line {lineno}: camera {fields[1]!r} is not a number; expected "
                                     f"{_INFO_LINE}. The list files must be the ones shipped with the dataset. "
                                     f"{README_HINT}")
        cameras[fields[0]] = check_id(fields[1], "camera", f"{path}, line {lineno}")
    return cameras


def read_veriwild_list(path: str, image_dir: str, cameras: Dict[str, int], info_path: str) -> List[Item]:
    """Items ``(image path, vehicle id, camera)`` of one VERI-Wild list, in list order.

    Raises DatasetFormatError naming the file and line for a malformed line or an image without a
    line in vehicle_info.txt, DatasetNotFoundError naming them for an image that is not on disk.
    """
    lines = read_fields(path, "VERI-Wild split list", _LIST_LINE, 1)
    parsed: List[Tuple[int, int]] = []
    for _, lineno, (entry,) in lines:
        where = f"{path}, line {lineno}"
        if _IMAGE_RE.match(entry) is None:
            raise DatasetFormatError(f"{where}: expected {_LIST_LINE}, got {entry!r}. The list files must be the "
                                     f"ones shipped with the dataset. {README_HINT}")
        if entry not in cameras:
            raise DatasetFormatError(f"{where}: image {entry!r} has no line in {info_path}, so its camera is unknown; "
                                     f"use the vehicle_info.txt of the same release, or remove the line.")
        parsed.append((parse_vid(entry.split("/")[0], where, "1"), cameras[entry]))
    paths = [os.path.join(image_dir, *fields[0].split("/")) + ".jpg" for _, _, fields in lines]
    check_images(paths, lines, "VERI-Wild")
    return [(p, vid, cam) for p, (vid, cam) in zip(paths, parsed)]


@DATASET_REGISTRY.register("veriwild")
class VeRiWild(ReIDDataset):
    """VERI-Wild with the test set of `test_size` vehicles (DATASETS.VERIWILD.TEST_SIZE: 3000, 5000,
    10000, or small / medium / large).

    Raises ValueError for another test size, DatasetNotFoundError naming the folder or file for a
    missing folder, list file or listed image, and DatasetFormatError naming the file and line for a
    malformed line.
    """

    name = "veriwild"
    candidates = ("VERI-Wild", "VeRI-Wild", "veriwild", "")

    def __init__(self, root: str = "datasets", test_size: object = 3000) -> None:
        self.test_size = check_test_size(test_size)
        self.dataset_dir = find_release_dir(root, self.candidates, REQUIRED, "VERI-Wild", LAYOUT)
        split_dir = os.path.join(self.dataset_dir, "train_test_split")
        image_dir = os.path.join(self.dataset_dir, "images")
        info = require_list(os.path.join(split_dir, "vehicle_info.txt"), "VERI-Wild", COPY_WHOLE)
        train_list = require_list(os.path.join(split_dir, "train_list.txt"), "VERI-Wild", COPY_WHOLE)
        hint = test_size_hint(split_dir, lambda s: f"test_{s}.txt", TEST_SIZES, "DATASETS.VERIWILD.TEST_SIZE",
                              self.test_size)
        test = os.path.join(split_dir, f"test_{self.test_size}")  # test_<N>.txt: gallery, test_<N>_query.txt: query
        gallery_list, query_list = (require_list(test + end, "VERI-Wild", hint) for end in (".txt", "_query.txt"))
        cameras = read_cameras(info)
        train, query, gallery = (read_veriwild_list(p, image_dir, cameras, info)
                                 for p in (train_list, query_list, gallery_list))
        super().__init__(train, query, gallery)


__all__ = ["VeRiWild", "check_test_size", "read_cameras", "read_veriwild_list"]
