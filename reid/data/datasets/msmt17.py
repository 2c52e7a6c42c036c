"""MSMT17 (Wei et al., CVPR 2018): 4,101 identities, 15 cameras, Peking University campus.

Both releases are read from their list files:

* V1: ``MSMT17_V1/{train,test}/`` + ``list_{train,val,query,gallery}.txt``
* V2: ``MSMT17_V2/{mask_train_v2,mask_test_v2}/`` + the same list files (faces masked)

A list line is ``<pid folder>/<file name> <pid>``, e.g.
``0000/0000_000_01_0303morning_0015_0.jpg 0``; the path is relative to the train folder
(list_train/list_val) or the test folder (list_query/list_gallery). The pid is taken from the
list. The camera is the third ``_``-separated field of the file name, numbered 1..15
(``<pid>_<index>_<camera>_<date><time>_<frame>_<n>[_ex].jpg``, as documented by the
dataset release and read the same way by the toolkits in common use); it becomes 0..14.

list_val.txt is only read (and needed) with ``combine_val`` (DATASETS.MSMT17_COMBINE_VAL).
When a root holds both releases, ``version`` (DATASETS.MSMT17_VERSION) picks one; "auto"
takes V1. Loading checks that the first image of every list exists, so a mismatch between
the lists and the image folders fails at once with the expected layout.

Counts: list_train 30,248 images / 1,041 ids; list_val 2,373 images of the same 1,041 ids
(train + val = 32,621); query 11,659; gallery 82,161.
"""
from __future__ import annotations

import os
import re
from typing import List, Sequence

from reid.utils.path_kinds import file_problem
from reid.utils.text_files import text_lines

from .base import (
    DATASET_REGISTRY,
    DatasetFormatError,
    DatasetNotFoundError,
    Item,
    README_HINT,
    ReIDDataset,
    check_id,
    find_dataset_dir,
    not_found_message,
)

LAYOUT = """\
  <root>/MSMT17_V1/                  (V1; or <root>/msmt17/ or <root> itself)
      train/0000/0000_000_01_0303morning_0015_0.jpg ...
      test/0000/...
      list_train.txt  list_val.txt  list_query.txt  list_gallery.txt
  <root>/MSMT17_V2/                  (V2, faces masked)
      mask_train_v2/0000/...
      mask_test_v2/0000/...
      list_train.txt  list_val.txt  list_query.txt  list_gallery.txt
  (list_val.txt is needed only with DATASETS.MSMT17_COMBINE_VAL True)"""

LIST_FILES = ("list_train.txt", "list_val.txt", "list_query.txt", "list_gallery.txt")
#: Valid values of DATASETS.MSMT17_VERSION / the `version` argument.
VERSION_CHOICES = ("auto", "v1", "v2")
#: (version, folder names tried under the root, train folder, test folder)
VERSIONS = (
    ("v1", ("MSMT17_V1", "msmt17", ""), "train", "test"),
    ("v2", ("MSMT17_V2", "msmt17", ""), "mask_train_v2", "mask_test_v2"),
)
NUM_CAMS = 15


def parse_msmt_camera(fname: str, where: str) -> int:
    """0-based camera of an MSMT17 file name (third ``_`` field, 1..15); `where` names the line."""
    parts = os.path.basename(fname).split("_")
    if len(parts) < 3 or not parts[2].isdigit() or not 1 <= int(parts[2]) <= NUM_CAMS:
        raise DatasetFormatError(
            f"{where}: cannot read the camera from file name {fname!r}; expected "
            f"'<pid>_<index>_<camera 01-15>_...jpg' such as 0000_000_01_0303morning_0015_0.jpg. "
            f"{README_HINT}"
        )
    return int(parts[2]) - 1


def read_msmt_list(list_path: str, image_dir: str) -> List[Item]:
    """Items of one MSMT17 list file; paths are joined to `image_dir`."""
    items = []
    for lineno, line in text_lines(list_path, "MSMT17 list file"):  # a regular UTF-8 file, bounded lines
        fields = line.split()
        if not fields:
            continue
        where = f"{list_path}, line {lineno}"
        # Strict: MSMT17 lists have no junk pid -1, and int() alone would read "1_0" as 10.
        if len(fields) != 2 or re.fullmatch(r"\d+", fields[1], re.ASCII) is None:
            raise DatasetFormatError(
                f"{where}: expected '<relative/path.jpg> <pid>' with a pid >= 0, got {line.strip()!r}. "
                f"The list files must be the ones shipped with MSMT17. {README_HINT}"
            )
        camid = parse_msmt_camera(fields[0], where)
        items.append((os.path.join(image_dir, fields[0]), check_id(fields[1], "pid", where), camid))
    return items


def check_first_image(items: Sequence[Item], list_path: str, image_dir: str) -> None:
    """Raise DatasetNotFoundError when the first image of a list is missing.

    One file per list is enough to catch a list / folder mismatch (e.g. V2 lists next to V1
    folders, or an extra folder level) at load time instead of at the first batch.
    """
    problem = file_problem(items[0][0]) if items else None
    if problem:
        raise DatasetNotFoundError(
            f"{list_path}: its first image {items[0][0]!r} {problem} (the paths of this list are "
            f"relative to {image_dir!r}). The list files and the image folders must come from the same "
            f"release and sit side by side, the folders unpacked without an extra level: check "
            f"DATASETS.ROOT and DATASETS.MSMT17_VERSION. {README_HINT}\nExpected layout:\n{LAYOUT}"
        )


@DATASET_REGISTRY.register("msmt17")
class MSMT17(ReIDDataset):
    """MSMT17 V1 or V2 (found automatically; V1 wins when both exist unless `version` says).

    Args:
        root: folder that holds ``MSMT17_V1`` / ``MSMT17_V2``.
        combine_val: train on list_train + list_val (the usual protocol, 32,621 images) instead
            of list_train alone (30,248). The val identities are the train identities, so both
            lists are relabelled together. list_val.txt is only needed when this is True.
        version: "auto", "v1" or "v2" (DATASETS.MSMT17_VERSION).

    Raises DatasetNotFoundError when the folders, a needed list file or the first image of a
    list is missing, and DatasetFormatError naming the list file and line for a bad line.
    """

    name = "msmt17"

    def __init__(self, root: str = "datasets", combine_val: bool = True, version: str = "auto") -> None:
        key = str(version).lower()
        if key not in VERSION_CHOICES:
            raise ValueError(
                f"DATASETS.MSMT17_VERSION must be one of {', '.join(map(repr, VERSION_CHOICES))}, "
                f"got {version!r}."
            )
        lists = [n for n in LIST_FILES if combine_val or n != "list_val.txt"]
        self.version, self.dataset_dir, train_dir, test_dir = self._locate(root, key, lists)
        splits = {}
        for name in lists:
            image_dir = train_dir if name in ("list_train.txt", "list_val.txt") else test_dir
            path = os.path.join(self.dataset_dir, name)
            splits[name] = read_msmt_list(path, image_dir)
            check_first_image(splits[name], path, image_dir)
        train = splits["list_train.txt"] + splits.get("list_val.txt", [])
        self.combine_val = combine_val
        super().__init__(train, splits["list_query.txt"], splits["list_gallery.txt"])

    @staticmethod
    def _locate(root: str, version: str, lists: Sequence[str]):
        errors = []
        for ver, candidates, train_sub, test_sub in VERSIONS:
            if version not in ("auto", ver):
                continue
            try:
                folder = find_dataset_dir(
                    root, candidates, (train_sub, test_sub) + tuple(lists), f"MSMT17 {ver.upper()}", LAYOUT
                )
            except DatasetNotFoundError as e:
                errors.append(e)
                continue
            return ver, folder, os.path.join(folder, train_sub), os.path.join(folder, test_sub)
        if len(errors) == 1:
            raise errors[0]
        # Both layouts failed: the searched folders of each (a folder both looked at, once), the layout once.
        searched = list(dict.fromkeys(line for e in errors for line in e.searched))
        raise DatasetNotFoundError(not_found_message("MSMT17 (V1 or V2)", root, searched, LAYOUT))
