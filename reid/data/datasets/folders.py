"""A test set from your own query and gallery folders (or list files), with or without camera ids.

Each side (DATASETS.FOLDERS.QUERY_PATH, DATASETS.FOLDERS.GALLERY_PATH, or
``tools/test.py --query SRC --gallery SRC``) is

* a **folder** whose sub-folders are identities: ``query/alice/1.jpg``, ``query/bob/cam2/7.png``
  (everything under a sub-folder belongs to it; scanned as reid/utils/folder_scan.py does); or
* a **list file** with ``path identity [camid]`` per line (whitespace or commas; relative paths
  start at the list file's folder; identity ``-1`` marks junk, which is dropped).

Identities are names: the same name on both sides is the same person (a list's numbers are names
too); they are numbered 1..N in sorted order. Camera ids come from list files. When every image
has one, the Market-1501 protocol applies (same identity AND same camera is junk). When no image
has one, the only pair left out is a query and its own image in the gallery: same-camera matches
then count, which makes rank-1 easier than under the protocol (a second image of the same track is
usually the nearest one). Camera ids for some images only are refused.

Either way a query is never scored against its own image: a gallery image that is a query image,
the same file under any name (a hard or symbolic link, ``./`` or ``..`` in the path) or a
byte-identical copy (reid/utils/same_files.py), is left out for that query (:class:`QueryFiles`),
and the log and metrics.json say how many there were.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from reid.utils.folder_scan import scan_folder
from reid.utils.path_kinds import file_problem, is_missing
from reid.utils.same_files import RELATION, SAME_FILE, copies_of, first_copies
from reid.utils.text_files import text_lines

from ..image_io import IMAGE_EXTENSIONS, is_image_file
from .base import (DATASET_REGISTRY, DatasetFormatError, DatasetNotFoundError, Item, ReIDDataset, check_id,
                   check_listed_image)
from .custom import split_list_line, strip_comment

logger = logging.getLogger(__name__)

Entry = Tuple[str, str, Optional[int]]  # path, identity name, camid (None: unknown)


def _from_folder(folder: str, side: str) -> List[Entry]:
    scan = scan_folder(folder, is_image_file)
    # What the scan left out (links out of the folder, FIFOs, ...): one line per reason, as for
    # extract and unlabelled crops, so that a gallery never shrinks without a word.
    for note in scan.notes():
        logger.warning("%s: %s", side, note)
    loose = [p for p in scan.files if os.path.dirname(os.path.relpath(p, folder)) == ""]
    if loose:
        raise DatasetFormatError(
            f"{side} folder {folder!r} has {len(loose)} images outside any sub-folder (e.g. {loose[0]}): put each "
            "identity's images in a sub-folder named after it, or pass a list file 'path identity [camid]'."
        )
    entries = [(p, os.path.relpath(p, folder).split(os.sep)[0], None) for p in scan.files]
    if not entries:
        raise DatasetFormatError(
            f"{side} folder {folder!r} has no images in identity sub-folders ({', '.join(IMAGE_EXTENSIONS)}): "
            "put each identity's images in a sub-folder named after it, or pass a list file."
        )
    return entries


def _from_list(list_file: str, side: str) -> List[Entry]:
    base = os.path.dirname(os.path.abspath(list_file))
    entries: List[Entry] = []
    for lineno, raw in text_lines(list_file, f"{side} list file"):
        line = strip_comment(raw)
        if not line:
            continue
        fields = split_list_line(line)
        if len(fields) < 2 and "," not in line:
            fields = line.rsplit(None, 1)
        ok = len(fields) in (2, 3) and fields[0] and fields[1] and (len(fields) == 2 or fields[2].isdigit())
        if not ok:
            raise DatasetFormatError(f"{list_file}, line {lineno}: expected 'path identity [camid]' (camid a "
                                     f"non-negative integer), got {raw.strip()[:200]!r}.")
        if fields[1] == "-1":
            continue
        path = fields[0] if os.path.isabs(fields[0]) else os.path.join(base, fields[0])
        if not is_image_file(path):
            raise DatasetFormatError(f"{list_file}, line {lineno}: {path!r} is not an image file "
                                     f"({', '.join(IMAGE_EXTENSIONS)}).")
        check_listed_image(path, f"{list_file}, line {lineno}", base)
        camid = check_id(fields[2], "camid", f"{list_file}, line {lineno}") if len(fields) == 3 else None
        entries.append((path, fields[1], camid))
    if not entries:
        raise DatasetFormatError(f"{side} list file {list_file!r} names no images; write 'path identity [camid]' "
                                 "per line.")
    return entries


def read_side(source: str, side: str) -> List[Entry]:
    """(path, identity, camid or None) of every image of a query or gallery folder / list file."""
    if not source:
        raise DatasetNotFoundError(f"No {side} given: set DATASETS.FOLDERS.{side.upper()}_PATH (or tools/test.py "
                                   f"--{side} SRC) to a folder of identity sub-folders or a list file.")
    if os.path.isdir(source):
        return _from_folder(source, side)
    if os.path.isfile(source):
        return _from_list(source, side)
    problem = file_problem(source).replace("not a file", "not a folder or a list file")
    raise (DatasetNotFoundError if is_missing(problem) else DatasetFormatError)(
        f"The {side} {source!r} {problem}; give a folder of identity sub-folders or a list file 'path identity "
        "[camid]'.")


@dataclass
class QueryFiles:
    """Gallery images that are query images (the same file, or byte-identical) and what became of them.

    Each is left out for its own query: it takes that query's camera, so the protocol's junk rule
    (same identity, same camera) drops it for that query alone and it stays a match for the others
    (it is a picture of that person). One whose labels contradict its query's (another identity,
    or another camera where queries of that image disagree) is removed from the gallery (`removed`).
    """

    same_file: int = 0
    identical_bytes: int = 0
    removed: int = 0
    example: str = ""

    @property
    def count(self) -> int:
        return self.same_file + self.identical_bytes

    def record(self) -> Dict[str, int]:
        """What metrics.json records."""
        return {"count": self.count, "same_file": self.same_file, "identical_bytes": self.identical_bytes,
                "removed_from_gallery": self.removed}

    def note(self) -> str:
        """One log line: how many, why, an example."""
        removed = (f"; {self.removed} of them are labelled with another identity or camera than their query and "
                   "were removed from the gallery" if self.removed else "")
        return (f"{self.count} gallery images are query images ({self.same_file} the same file: a hard or symbolic "
                f"link or another spelling of its path; {self.identical_bytes} byte-identical copies); each is left "
                f"out for its own query{removed}; e.g. {self.example}")


def _with_cameras(query: Sequence[Entry], gallery: Sequence[Entry]) -> bool:
    known = [e[2] is not None for e in list(query) + list(gallery)]
    if any(known) and not all(known):
        raise DatasetFormatError(
            f"{sum(known)} of {len(known)} query/gallery images have a camera id: give one for every image (a third "
            "column in the list files) or for none."
        )
    return all(known)


def to_items(query: Sequence[Entry], gallery: Sequence[Entry]) -> Tuple[List[Item], List[Item], bool, QueryFiles]:
    """Query and gallery items with identities numbered 1..N by name; camids as given, or (no
    camera ids at all) query i camera i + 1 and the gallery camera 0. Either way a gallery image
    that is a query image is left out for that query (:class:`QueryFiles`), whatever its name.

    Returns ``(query, gallery, with_cameras, query_files)``.
    """
    names: Dict[str, int] = {n: i + 1 for i, n in enumerate(sorted({e[1] for e in list(query) + list(gallery)}))}
    with_cameras = _with_cameras(query, gallery)
    q_paths = [p for p, _, _ in query]
    # Queries that are one image (links, copies) form a group led by its first query; without camera
    # ids the group shares that query's camera, so that a gallery copy is junk for all of them.
    lead = [i if copy is None else copy[0] for i, copy in enumerate(first_copies(q_paths))]
    q_items = [(p, names[n], int(c) if with_cameras else lead[i] + 1) for i, (p, n, c) in enumerate(query)]
    members: Dict[int, List[int]] = {}
    for i, first in enumerate(lead):
        members.setdefault(first, []).append(i)
    found = QueryFiles()
    g_items: List[Item] = []
    for (p, n, c), copy in zip(gallery, copies_of(q_paths, [p for p, _, _ in gallery])):
        item = (p, names[n], int(c) if with_cameras else 0)
        if copy is not None:
            group = members[lead[copy[0]]]
            if copy[1] == SAME_FILE:
                found.same_file += 1
            else:
                found.identical_bytes += 1
            found.example = found.example or f"{p} {RELATION[copy[1]]} query {q_paths[copy[0]]}"
            if any(q_items[i][1] != item[1] for i in group) or len({q_items[i][2] for i in group}) > 1:
                found.removed += 1
                continue
            item = (p, item[1], q_items[group[0]][2])
        g_items.append(item)
    return q_items, g_items, with_cameras, found


def check_folder_cameras(query_path: str, gallery_path: str) -> None:
    """A model with SIE embeds each image with its camera: folders without camera ids (list files with a
    camid column) cannot feed it (the cameras the evaluation assigns them are bookkeeping, see to_items)."""
    if not _with_cameras(read_side(query_path, "query"), read_side(gallery_path, "gallery")):
        raise ValueError("This model uses camera ids (SIE: SIE_CAMERA True in MODEL.TRANSREID or MODEL.CLIP), and the --check-on or "
                         "--query / --gallery images have none: give list files of 'path identity camid' lines.")


@DATASET_REGISTRY.register("folders")
class FoldersDataset(ReIDDataset):
    """A query and a gallery from folders of identity sub-folders or list files (no train split)."""

    name = "folders"
    empty_test_hint = "Check DATASETS.FOLDERS.QUERY_PATH and GALLERY_PATH (tools/test.py --query / --gallery)."

    def __init__(self, root: str = "datasets", query_path: str = "", gallery_path: str = "") -> None:
        query, gallery, self.with_cameras, self.query_files = to_items(
            read_side(query_path, "query"), read_side(gallery_path, "gallery"))
        if self.query_files.count:
            logger.warning("%s", self.query_files.note())
        super().__init__([], query, gallery)
        self.test_notes["query_files_in_gallery"] = self.query_files.record()


__all__ = ["FoldersDataset", "QueryFiles", "check_folder_cameras", "read_side", "to_items"]
