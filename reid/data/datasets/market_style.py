"""Reading folders of crops named in the Market-1501 family: ``<pid>_c<cam>...jpg``.

Market-1501 (``0002_c1s1_000451_03.jpg``), DukeMTMC-reID (``0001_c2_f0046182.jpg``) and the
synthetic dataset share this scheme: the name starts with the person id (``-1`` = junk,
``0000`` = distractor) followed by ``_c`` and the 1-based camera number.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional, Tuple

from ..image_io import is_image_file
from .base import DatasetFormatError, Item, README_HINT, check_id


_NAME_RE = re.compile(r"^(-?\d+)_c(\d+)")

JUNK_PID = -1
#: The train, query and gallery folders of a Market-style dataset.
SUBDIRS = ("bounding_box_train", "query", "bounding_box_test")


def parse_market_name(path: str, max_cams: Optional[int] = None) -> tuple:
    """Return ``(pid, camid)`` from a Market-style file name; camid is 0-based.

    Raises DatasetFormatError naming the file when the name does not parse or the camera
    number is outside ``1..max_cams``.
    """
    fname = os.path.basename(path)
    m = _NAME_RE.match(fname)
    if m is None:
        raise DatasetFormatError(
            f"Cannot parse person id and camera from file name {path!r}: expected "
            f"'<pid>_c<camera>...' such as 0002_c1s1_000451_03.jpg. Remove or rename the file. "
            f"{README_HINT}"
        )
    pid, cam = check_id(m.group(1), "person id", repr(path)), check_id(m.group(2), "camera number", repr(path))
    if cam < 1 or (max_cams is not None and cam > max_cams):
        limit = f"1..{max_cams}" if max_cams is not None else ">= 1"
        raise DatasetFormatError(
            f"Camera number c{cam} in {path!r} is outside {limit} for this dataset. "
            f"Check that the file belongs to this dataset. {README_HINT}"
        )
    return pid, cam - 1


def list_images(folder: str) -> List[str]:
    """Sorted paths of the image files directly inside `folder` (sorting makes runs repeatable).

    Hidden files (names starting with ".") are skipped: macOS leaves AppleDouble files such as
    ``._0002_c1s1_000451_03.jpg`` next to every image copied from its disks, and they are not images.
    """
    with os.scandir(folder) as it:
        names = [
            e.name for e in it
            # other files (e.g. Market-1501's Thumbs.db) and hidden ones (macOS's ._* files) are ignored
            if not e.name.startswith(".") and e.is_file() and is_image_file(e.name)
        ]
    return [os.path.join(folder, n) for n in sorted(names)]


def load_market_folder(folder: str, max_cams: Optional[int] = None) -> List[Item]:
    """Items of one Market-style folder; junk images (pid -1) are dropped, distractors (0) kept."""
    items = []
    for path in list_images(folder):
        pid, camid = parse_market_name(path, max_cams)
        if pid == JUNK_PID:
            continue
        items.append((path, pid, camid))
    return items


def load_market_splits(dataset_dir: str, max_cams: Optional[int] = None) -> Tuple[List[Item], ...]:
    """``(train, query, gallery)`` items of the SUBDIRS folders of a Market-style dataset."""
    return tuple(load_market_folder(os.path.join(dataset_dir, sub), max_cams) for sub in SUBDIRS)
