"""What the vehicle datasets (VeRi-776, VehicleID, VERI-Wild) share: finding a release folder that
may be incomplete, reading its split lists, and checking that every listed image is on disk.

The releases are large (VehicleID 221,567 images, VERI-Wild 416,314), so the images are checked by
reading each image folder once (``os.scandir``) and looking the listed names up in it, not by one
``stat`` per image; a list line naming an image that is not there fails at load time with the list
file and line, instead of at the first batch that reaches it.
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from reid.utils.text_files import brief, text_lines

from .base import DatasetFormatError, DatasetNotFoundError, README_HINT, check_id, find_dataset_dir

#: One parsed list line: (list file, line number, its fields).
Line = Tuple[str, int, List[str]]
#: What to do when a split list of a release is missing.
COPY_WHOLE = "copy the release's train_test_split/ folder whole."


def find_release_dir(root: str, candidates: Sequence[str], required: Sequence[str], dataset: str,
                     layout: str) -> str:
    """The first ``root/<candidate>`` that holds every entry of `required` (as ``find_dataset_dir``).

    When none does but a named candidate folder holds some of them, the release is there but
    incomplete (a split folder not unpacked): the DatasetNotFoundError then names that folder and
    what it lacks, first line. (The root itself is not taken for a release by one folder name it
    happens to hold, such as ``images``.)
    """
    try:
        return find_dataset_dir(root, candidates, required, dataset, layout)
    except DatasetNotFoundError:
        for cand in filter(None, candidates):
            folder = os.path.join(root, cand)
            missing = [r for r in required if not os.path.exists(os.path.join(folder, r))]
            if len(missing) < len(required):
                raise DatasetNotFoundError(
                    f"The {dataset} folder {folder!r} lacks {', '.join(m + '/' for m in missing)}: unpack the "
                    f"release whole, with {', '.join(r + '/' for r in required)} side by side. {README_HINT}"
                    f"\nExpected layout:\n{layout.rstrip()}"
                ) from None
        raise


def require_list(path: str, dataset: str, hint: str) -> str:
    """`path` when it is there; else DatasetNotFoundError naming it, with `hint` (what to do)."""
    if not os.path.lexists(path):
        raise DatasetNotFoundError(f"{dataset}: split list {path!r} not found; {hint} {README_HINT}")
    return path


def read_fields(path: str, what: str, expected: str, num_fields: int, sep: Optional[str] = None,
                skip_header: Callable[[List[str]], bool] = lambda fields: False, exact: bool = True) -> List[Line]:
    """The non-blank lines of list file `path`, each split at `sep` (None = whitespace).

    A line with another number of fields than `num_fields` (with `exact` False: fewer), or an
    empty one among the first `num_fields`, raises DatasetFormatError naming the file and line and
    showing `expected` (the line format). `skip_header(fields)` is asked about the first non-blank
    line only: True skips it (a header such as VERI-Wild's).
    """
    lines: List[Line] = []
    for lineno, line in text_lines(path, what):
        text = line.strip()
        if not text:
            continue
        fields = [f.strip() for f in text.split(sep)]
        if not lines and skip_header(fields):
            continue
        if len(fields) < num_fields or (exact and len(fields) > num_fields) or not all(fields[:num_fields]):
            raise DatasetFormatError(
                f"{path}, line {lineno}: expected {expected}, got {brief(text)}. The list files must be the ones "
                f"shipped with the dataset. {README_HINT}"
            )
        lines.append((path, lineno, fields))
    return lines


def _files_in(folder: str) -> set:
    """Names of the regular files directly in `folder` (empty when it is not a folder)."""
    try:
        with os.scandir(folder) as it:
            return {e.name for e in it if e.is_file()}
    except (FileNotFoundError, NotADirectoryError):
        return set()


def check_images(paths: Sequence[str], lines: Sequence[Line], dataset: str) -> None:
    """Raise DatasetNotFoundError for the first of `paths` that is not a file, naming its list line
    (``lines[i]`` is the line of ``paths[i]``) and what to do. Each folder is read once."""
    folders: Dict[str, set] = {folder: _files_in(folder) for folder in {os.path.dirname(p) for p in paths}}
    missing = next((i for i, p in enumerate(paths) if os.path.basename(p) not in folders[os.path.dirname(p)]), None)
    if missing is None:
        return
    path, lineno, _ = lines[missing]
    image = paths[missing]
    where = "its folder does not exist" if not os.path.isdir(os.path.dirname(image)) else "no such file"
    raise DatasetNotFoundError(
        f"{path}, line {lineno}: image {image!r} is not there ({where}). The {dataset} lists and image folders "
        f"must come from the same release: unpack the images whole, or remove the line. {README_HINT}"
    )


def parse_vid(text: str, where: str, example: str) -> int:
    """Vehicle id `text` (plain digits) as an int; DatasetFormatError naming `where` otherwise."""
    if not text.isascii() or not text.isdigit():
        raise DatasetFormatError(f"{where}: vehicle id {brief(text)} is not a number (plain digits, e.g. {example}). "
                                 f"The list files must be the ones shipped with the dataset. {README_HINT}")
    return check_id(text, "vehicle id", where)


def test_size_hint(folder: str, pattern: Callable[[object], str], sizes: Iterable[object], key: str, size: int) -> str:
    """What to do when the test list of `size` (config `key`) is missing: set a size whose list file
    ``folder/pattern(size)`` exists, or copy the whole split folder."""
    present = [s for s in sizes if os.path.isfile(os.path.join(folder, pattern(s)))]
    return (f"{key} is {size}; the folder has test lists for {', '.join(map(str, present)) or 'no size'}: set the "
            f"key to one of them, or {COPY_WHOLE}")
