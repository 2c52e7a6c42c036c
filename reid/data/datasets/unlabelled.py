"""Your own crops without identity labels: a folder of images or a list file (``unlabelled``).

The training set of learning without labels (``UDA.ENABLED``, docs/training.md "No labels?"):
every item is ``(path, -1, camid)``; the person id -1 means "unknown", and the dataset says so
with ``has_labels = False``, so that supervised training refuses it instead of treating all
crops as one person. There is no query or gallery split.

Sources (exactly one):

* ``DATASETS.UNLABELLED.DIR``: a folder, scanned recursively (links and special files as in
  ``reid.utils.folder_scan``) for ``.jpg``, ``.jpeg``, ``.png``, ``.bmp`` files;
* ``DATASETS.UNLABELLED.LIST``: a text file with one image per line, ``path`` or ``path camid``
  (whitespace or a comma before the camera id; ``#`` comments and blank lines ignored; relative
  paths are relative to the list's folder).

Camera ids are optional (models with SIE use them): from the list's second column, or
from the file names through ``DATASETS.UNLABELLED.CAMERA_REGEX`` (one group that captures the
camera, e.g. ``_c(\\d+)`` for Market-1501 names), else every image is camera 0. Camera values are
numbered 0..C-1 in sorted order (only equality matters). A relative folder or list path is
looked up under the dataset root first, then the working folder.
"""
from __future__ import annotations

import logging
import os
import re
from typing import List, Optional, Sequence, Tuple

from reid.utils.folder_scan import scan_folder
from reid.utils.text_files import text_lines

from ..image_io import IMAGE_EXTENSIONS
from .base import DATASET_REGISTRY, DatasetFormatError, DatasetNotFoundError, Item, ReIDDataset
from .custom import strip_comment

logger = logging.getLogger(__name__)

#: The person id of every unlabelled item.
UNKNOWN_PID = -1
_CAMID_RE = re.compile(r"\d+", re.ASCII)


def _resolve(root: str, path: str) -> List[str]:
    return [path] if os.path.isabs(path) else [os.path.join(root, path), path]


def _camera_pattern(regex: str) -> Optional[re.Pattern]:
    if not regex:
        return None
    try:
        pattern = re.compile(regex)
    except re.error as e:
        raise ValueError(f"DATASETS.UNLABELLED.CAMERA_REGEX {regex!r} is not a regular expression ({e}); "
                         r"give one with a group that captures the camera number, e.g. '_c(\d+)'.") from None
    if pattern.groups != 1:
        raise ValueError(f"DATASETS.UNLABELLED.CAMERA_REGEX {regex!r} has {pattern.groups} groups; it needs exactly "
                         r"one, capturing the camera number of a file name, e.g. '_c(\d+)'.")
    return pattern


def camera_from_name(path: str, pattern: re.Pattern) -> str:
    """The camera value that `pattern`'s group finds in the file name of `path` (searched)."""
    m = pattern.search(os.path.basename(path))
    if m is None or not m.group(1):
        raise DatasetFormatError(
            f"Image {path!r}: its file name does not match DATASETS.UNLABELLED.CAMERA_REGEX {pattern.pattern!r}. "
            "Rename the file, fix the expression, or set it to '' (all images from one camera)."
        )
    return m.group(1)


def number_cameras(values: Sequence[Optional[str]]) -> List[int]:
    """Camera values (strings, None = unknown) as ids 0..C-1 in sorted order (numeric when all are)."""
    if all(v is None for v in values):
        return [0] * len(values)
    uniq = sorted(set(values), key=lambda v: (int(v), v) if v.isdigit() else (float("inf"), v))
    index = {v: i for i, v in enumerate(uniq)}
    return [index[v] for v in values]


def _check_listed_image(list_path: str, lineno: int, base: str, path: str, with_cam: bool) -> str:
    """The absolute path of a list line's image; one line naming file and line for what is wrong."""
    where = f"{list_path}, line {lineno}"
    full = path if os.path.isabs(path) else os.path.join(base, path)
    if os.path.isfile(full):
        if not full.lower().endswith(IMAGE_EXTENSIONS):
            raise DatasetFormatError(f"{where}: {full!r} is not an image file ({', '.join(IMAGE_EXTENSIONS)}); "
                                     "list image files only.")
        return full
    if os.path.isdir(full):
        raise DatasetFormatError(f"{where}: {full!r} is a folder; list image files, or set DATASETS.UNLABELLED.DIR "
                                 "to the folder instead of DATASETS.UNLABELLED.LIST.")
    head, _, rest = path.partition("," if "," in path else " ")
    head_full = head if os.path.isabs(head) else os.path.join(base, head)
    if not with_cam and rest.strip() and os.path.isfile(head_full):  # 'img.jpg -3', 'img.jpg 1 extra'
        raise DatasetFormatError(f"{where}: {rest.strip()!r} after the image path is not a camera id (a "
                                 "non-negative integer); write 'path' or 'path camid'.")
    raise DatasetNotFoundError(f"{where}: image {full!r} does not exist. Paths are relative to the list file's "
                               f"folder ({base}); fix the path or remove the line.")


def read_unlabelled_list(list_path: str) -> List[Tuple[str, Optional[str]]]:
    """``(absolute path, camera value or None)`` for every line of an unlabelled list file.

    Raises DatasetFormatError naming file and line for a camera id that is not a non-negative
    integer or for a file that mixes lines with and without one, and DatasetNotFoundError for
    an image that does not exist.
    """
    base = os.path.dirname(os.path.abspath(list_path))
    rows: List[Tuple[str, Optional[str]]] = []
    with_cam: Optional[bool] = None
    for lineno, raw in text_lines(list_path):
        line = strip_comment(raw)
        if not line or (not rows and line.lower().replace(",", " ").split() in (["path"], ["path", "camid"])):
            continue
        fields = line.rsplit(",", 1) if "," in line else line.rsplit(None, 1)
        fields = [f.strip() for f in fields]
        # A last field that is not a camera id belongs to the path (a name with a space or comma).
        cam = fields[1] if len(fields) == 2 and _CAMID_RE.fullmatch(fields[1]) else None
        path = fields[0] if cam is not None else line
        if with_cam is not None and with_cam != (cam is not None):
            raise DatasetFormatError(
                f"{list_path}, line {lineno}: {'no' if cam is None else 'a'} camera id, unlike the lines before it. "
                "Give every line a camera id ('path camid') or none ('path')."
            )
        with_cam = cam is not None
        full = _check_listed_image(list_path, lineno, base, path, cam is not None)
        rows.append((full, cam))
    return rows


def scan_crops(folder: str) -> List[str]:
    """Sorted image paths under `folder` (recursive); what the scan skipped is logged once per reason."""
    scan = scan_folder(folder, lambda name: name.lower().endswith(IMAGE_EXTENSIONS))
    for note in scan.notes():
        logger.warning("%s", note)
    return scan.files


@DATASET_REGISTRY.register("unlabelled")
class UnlabelledDataset(ReIDDataset):
    """Crops without identities (see the module docstring); train only, pids all -1.

    Args:
        root: dataset root (relative `folder` / `list_file` are looked up under it first).
        folder: DATASETS.UNLABELLED.DIR; list_file: DATASETS.UNLABELLED.LIST (one of the two).
        camera_regex: DATASETS.UNLABELLED.CAMERA_REGEX ('' = cameras from the list, or none).
    """

    name = "unlabelled"
    has_labels = False
    empty_test_hint = ("The unlabelled dataset has no query or gallery images (it has no identities to test "
                       "against): take 'unlabelled' out of DATASETS.TESTS and test on a labelled dataset.")

    def __init__(self, root: str = "datasets", folder: str = "", list_file: str = "", camera_regex: str = "") -> None:
        if bool(folder) == bool(list_file):
            raise DatasetNotFoundError(
                "Unlabelled dataset: set exactly one of DATASETS.UNLABELLED.DIR (a folder of crops) and "
                f"DATASETS.UNLABELLED.LIST (a file with one image path per line); got DIR {folder!r}, LIST {list_file!r}."
            )
        pattern = _camera_pattern(camera_regex)
        key = "DIR" if folder else "LIST"
        candidates = _resolve(root, folder or list_file)
        found = next((c for c in candidates if (os.path.isdir(c) if folder else os.path.isfile(c))), None)
        if found is None:
            what = "a folder of image crops" if folder else "a list file with one image path per line"
            raise DatasetNotFoundError(
                f"DATASETS.UNLABELLED.{key} {folder or list_file!r} was not found (looked at: "
                f"{', '.join(repr(c) for c in candidates)}); set it to {what}."
            )
        if folder:
            rows: List[Tuple[str, Optional[str]]] = [(p, None) for p in scan_crops(found)]
        else:
            rows = read_unlabelled_list(found)
        if not rows:
            raise DatasetNotFoundError(
                f"DATASETS.UNLABELLED.{key} {found!r} names no images (.jpg, .jpeg, .png, .bmp"
                f"{', searched recursively' if folder else ''}); put the crops there or point the key at them."
            )
        if pattern is not None:
            rows = [(p, camera_from_name(p, pattern)) for p, _ in rows]
        self.source = found
        cams = number_cameras([c for _, c in rows])
        train: List[Item] = [(p, UNKNOWN_PID, c) for (p, _), c in zip(rows, cams)]
        super().__init__(train, [], [], relabel=False)


__all__ = ["UNKNOWN_PID", "UnlabelledDataset", "camera_from_name", "number_cameras", "read_unlabelled_list",
           "scan_crops"]
