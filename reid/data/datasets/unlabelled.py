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
camera, e.g. ``_c(\\d+)`` for Market-1501 names; matched within the bounds of
reid/utils/safe_regex.py, so that no expression can hang the scan), else every image is camera 0.
Camera values are numbered 0..C-1 in sorted order (only equality matters). A relative folder or
list path is looked up under the dataset root first, then the working folder.

Every image is used once: a second name of a file or a byte-identical copy is dropped with one
warning (:func:`keep_once`), since a repeated crop would weigh twice in the clustering.
"""
from __future__ import annotations

import logging
import os
import re
from typing import List, Optional, Sequence, Tuple, Type

from regex import Pattern

from reid.utils.folder_scan import scan_folder
from reid.utils.path_kinds import check_file, check_folder, file_problem
from reid.utils.safe_regex import compile_bounded, search_names
from reid.utils.same_files import RELATION, SAME_FILE, first_copies
from reid.utils.text_files import text_lines

from ..image_io import IMAGE_EXTENSIONS, is_image_file
from .base import DATASET_REGISTRY, DatasetFormatError, DatasetNotFoundError, Item, ReIDDataset, check_listed_image
from .custom import root_candidates, strip_comment

logger = logging.getLogger(__name__)

#: The person id of every unlabelled item.
UNKNOWN_PID = -1
_CAMID_RE = re.compile(r"\d+", re.ASCII)


_CAMERA_KEY = "DATASETS.UNLABELLED.CAMERA_REGEX"


def one_group_pattern(regex: str, key: str, what: str, example: str) -> Pattern:
    """`regex` (config key `key`) compiled within the bounds of reid/utils/safe_regex.py (a length cap, and
    a time limit per name that no expression can outrun); ValueError unless it has exactly one group,
    the one that captures `what` of a file name (`example`: a pattern that works)."""
    pattern = compile_bounded(regex, key, example=example)
    if pattern.groups != 1:
        raise ValueError(f"{key} {regex!r} has {pattern.groups} groups; it needs exactly one, capturing {what} of "
                         f"a file name, e.g. '{example}'.")
    return pattern


def groups_in_names(paths: Sequence[str], pattern: Pattern, key: str, unmatched: str,
                    error: Type[ValueError] = DatasetFormatError) -> List[str]:
    """What `pattern`'s group finds in the file name of each of `paths` (searched within the bounds of
    reid/utils/safe_regex.py); a name it does not match raises `error` naming the file and `key`, then
    `unmatched` (what to do)."""
    found = search_names(pattern, [os.path.basename(p) for p in paths], key)
    for path, groups in zip(paths, found):
        if groups is None or not groups[0]:
            raise error(f"Image {path!r}: its file name does not match {key} {pattern.pattern!r}{unmatched}")
    return [groups[0] for groups in found]


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
    if file_problem(full) is None:
        if not is_image_file(full):
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
    check_listed_image(full, where, base)  # raises, saying what it is: missing, a FIFO, a broken link, ...
    return full


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


def keep_once(rows: List[Tuple[str, Optional[str]]], source: str) -> List[Tuple[str, Optional[str]]]:
    """`rows` with every image kept once: a second name of a file (a hard or symbolic link, another
    spelling of its path) or a byte-identical copy is dropped (reid/utils/same_files.py), and one
    warning says how many, why and gives an example. A repeated crop would weigh twice in the
    clustering (its own dense cluster of identical features) and in the memory's centroid."""
    copies = first_copies([p for p, _ in rows])
    repeats = [(i, c) for i, c in enumerate(copies) if c is not None]
    if not repeats:
        return rows
    same = sum(c[1] == SAME_FILE for _, c in repeats)
    i, (first, how) = repeats[0]
    logger.warning("%s: %d of %d images repeat another one (%d the same file: a link or another spelling of its path; "
                   "%d byte-identical copies) and are kept once; e.g. %s %s %s", source, len(repeats), len(rows),
                   same, len(repeats) - same, rows[i][0], RELATION[how], rows[first][0])
    return [row for row, c in zip(rows, copies) if c is None]


def scan_crops(folder: str) -> List[str]:
    """Sorted image paths under `folder` (recursive); what the scan skipped is logged once per reason."""
    scan = scan_folder(folder, is_image_file)
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
        pattern = (one_group_pattern(camera_regex, _CAMERA_KEY, "the camera number", r"_c(\d+)")
                   if camera_regex else None)
        key = "DIR" if folder else "LIST"
        candidates = root_candidates(root, folder or list_file)
        what = "a folder of image crops" if folder else "a list file with one image path per line"
        right_kind = os.path.isdir if folder else os.path.isfile
        # The first of the right kind; else the first that is something (named below for what it is).
        found = next((c for c in candidates if right_kind(c)), None) or next(
            (c for c in candidates if os.path.lexists(c)), None)
        if found is None:
            raise DatasetNotFoundError(
                f"DATASETS.UNLABELLED.{key} {folder or list_file!r} was not found (looked at: "
                f"{', '.join(repr(c) for c in candidates)}); set it to {what}."
            )
        (check_folder if folder else check_file)(found, f"DATASETS.UNLABELLED.{key}", f"set it to {what}.",
                                                 error=DatasetFormatError, missing_error=DatasetNotFoundError)
        if folder:
            rows: List[Tuple[str, Optional[str]]] = [(p, None) for p in scan_crops(found)]
        else:
            rows = read_unlabelled_list(found)
        if not rows:
            raise DatasetNotFoundError(
                f"DATASETS.UNLABELLED.{key} {found!r} names no images (.jpg, .jpeg, .png, .bmp"
                f"{', searched recursively' if folder else ''}); put the crops there or point the key at them."
            )
        rows = keep_once(rows, f"DATASETS.UNLABELLED.{key} {found}")
        if pattern is not None:
            paths = [p for p, _ in rows]
            rows = list(zip(paths, groups_in_names(paths, pattern, _CAMERA_KEY, ". Rename the file, fix the "
                                                   "expression, or set it to '' (all images from one camera).")))
            found = {c for _, c in rows}
            if len(found) == 1 and len(rows) > 1:  # e.g. a group around a letter every name shares: "(c)\d+"
                logger.warning("%s %r finds one camera (%r) in all %d images, so camera-aware learning has no "
                               "camera to tell apart; if they come from several cameras, make its group capture "
                               "the camera number (e.g. '_c(\\d+)').", _CAMERA_KEY, camera_regex, found.pop(),
                               len(rows))
        self.source = found
        #: whether the camera ids are the images' own (a regex or a list with camera ids), not all 0 for want of any
        self.has_cameras = pattern is not None or rows[0][1] is not None
        cams = number_cameras([c for _, c in rows])
        train: List[Item] = [(p, UNKNOWN_PID, c) for (p, _), c in zip(rows, cams)]
        super().__init__(train, [], [], relabel=False)


__all__ = ["UNKNOWN_PID", "UnlabelledDataset", "groups_in_names", "keep_once", "number_cameras", "one_group_pattern",
           "read_unlabelled_list", "scan_crops"]
