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
has one, the only pair left out is a query and the *identical* gallery image (the same file):
same-camera matches then count, which makes rank-1 easier than under the protocol (a second
image of the same track is usually the nearest one). Camera ids for some images only are refused.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence, Tuple

from reid.utils.folder_scan import scan_folder
from reid.utils.text_files import text_lines

from ..image_io import IMAGE_EXTENSIONS
from .base import DATASET_REGISTRY, DatasetFormatError, DatasetNotFoundError, Item, ReIDDataset
from .custom import split_list_line, strip_comment

Entry = Tuple[str, str, Optional[int]]  # path, identity name, camid (None: unknown)


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _from_folder(folder: str, side: str) -> List[Entry]:
    scan = scan_folder(folder, _is_image)
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
        if not _is_image(path):
            raise DatasetFormatError(f"{list_file}, line {lineno}: {path!r} is not an image file "
                                     f"({', '.join(IMAGE_EXTENSIONS)}).")
        if not os.path.isfile(path):
            raise DatasetNotFoundError(f"{list_file}, line {lineno}: image {path!r} does not exist. Paths are "
                                       f"relative to the list file's folder ({base}).")
        entries.append((path, fields[1], int(fields[2]) if len(fields) == 3 else None))
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
    raise DatasetNotFoundError(f"The {side} {source!r} does not exist; give a folder of identity sub-folders or a "
                               "list file 'path identity [camid]'.")


def to_items(query: Sequence[Entry], gallery: Sequence[Entry]) -> Tuple[List[Item], List[Item], bool]:
    """Query and gallery items with identities numbered 1..N by name; camids as given, or (no
    camera ids at all) made so that the evaluator's junk rule removes only identical files.

    Returns ``(query, gallery, with_cameras)``.
    """
    names: Dict[str, int] = {n: i + 1 for i, n in enumerate(sorted({e[1] for e in list(query) + list(gallery)}))}
    known = [e[2] is not None for e in list(query) + list(gallery)]
    if any(known) and not all(known):
        raise DatasetFormatError(
            f"{sum(known)} of {len(known)} query/gallery images have a camera id: give one for every image (a third "
            "column in the list files) or for none."
        )
    if all(known):
        return ([(p, names[n], int(c)) for p, n, c in query], [(p, names[n], int(c)) for p, n, c in gallery], True)
    # No cameras: query i gets camera i + 1 and the gallery camera 0, except a gallery image that is
    # the very file of a query, which takes that query's camera: (same pid, same camera) = junk for
    # that query alone.
    q_items = [(p, names[n], i + 1) for i, (p, n, _) in enumerate(query)]
    own_camera = {}
    for p, _, cam in reversed(q_items):
        own_camera[os.path.realpath(p)] = cam
    g_items = [(p, names[n], own_camera.get(os.path.realpath(p), 0)) for p, n, _ in gallery]
    return q_items, g_items, False


def folders_have_cameras(query_path: str, gallery_path: str) -> bool:
    """Whether the query and gallery of the "folders" test set give camera ids (list files with a
    camid column); without them the cameras are only the evaluation's bookkeeping (see to_items)."""
    return to_items(read_side(query_path, "query"), read_side(gallery_path, "gallery"))[2]


@DATASET_REGISTRY.register("folders")
class FoldersDataset(ReIDDataset):
    """A query and a gallery from folders of identity sub-folders or list files (no train split)."""

    name = "folders"
    empty_test_hint = "Check DATASETS.FOLDERS.QUERY_PATH and GALLERY_PATH (tools/test.py --query / --gallery)."

    def __init__(self, root: str = "datasets", query_path: str = "", gallery_path: str = "") -> None:
        query, gallery, self.with_cameras = to_items(read_side(query_path, "query"), read_side(gallery_path, "gallery"))
        super().__init__([], query, gallery)


__all__ = ["FoldersDataset", "folders_have_cameras", "read_side", "to_items"]
