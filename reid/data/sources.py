"""Turn what a user points at (a folder, a list file, image files) into image paths (and labels)."""
from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from reid.utils.folder_scan import scan_folder
from reid.utils.path_kinds import WrongPathKindError, file_problem, is_missing
from reid.utils.text_files import brief, text_lines

from .datasets.custom import is_header, split_list_line, strip_comment
from .image_io import IMAGE_EXTENSIONS, is_image_file

logger = logging.getLogger(__name__)


PathLike = Union[str, "os.PathLike[str]"]
_INT64 = np.iinfo(np.int64)  # labels become int64 arrays (ImageEntries.label_arrays)


def images_in_folder(folder: PathLike) -> List[str]:
    """Every image file under `folder` (recursive, hidden folders skipped), sorted, each once.

    Sorting makes the order (and so the gallery row of each image) the same on every
    machine, whatever order the file system lists them in. Symbolic links are handled as
    ``reid.utils.folder_scan`` says (no loops, nothing outside `folder`, no file twice); each
    kind of link skipped gets one warning line.
    """
    folder = os.fspath(folder)
    scan = scan_folder(folder, is_image_file)
    for note in scan.notes():
        logger.warning("%s", note)
    if not scan.files:
        skipped = f" ({sum(len(v) for v in scan.skipped.values())} entries skipped, see above)" if scan.skipped else ""
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found under folder {folder!r}{skipped}; "
            "check the path, or pass a list file with one image path per line."
        )
    return scan.files


@dataclass
class ImageEntries:
    """Image paths in order, with the ``pid``/``camid`` of each where a list file gave one.

    ``pids[i]``/``camids[i]`` are None for images from folders, image files and list lines
    that name only a path.
    """

    paths: List[str] = field(default_factory=list)
    pids: List[Optional[int]] = field(default_factory=list)
    camids: List[Optional[int]] = field(default_factory=list)

    def add(self, path: str, pid: Optional[int] = None, camid: Optional[int] = None) -> None:
        self.paths.append(path)
        self.pids.append(pid)
        self.camids.append(camid)

    def extend(self, other: "ImageEntries") -> None:
        self.paths += other.paths
        self.pids += other.pids
        self.camids += other.camids

    @property
    def num_labelled(self) -> int:
        """How many images have both a pid and a camid."""
        return sum(p is not None and c is not None for p, c in zip(self.pids, self.camids))

    def label_arrays(self) -> Tuple[Optional[np.ndarray], Optional[np.ndarray]]:
        """int64 ``(pids, camids)`` when every image is labelled, else ``(None, None)``."""
        if not self.paths or self.num_labelled < len(self.paths):
            return None, None
        return np.asarray(self.pids, dtype=np.int64), np.asarray(self.camids, dtype=np.int64)


def _labelled_line(content: str) -> Optional[Tuple[str, int, int]]:
    fields = split_list_line(content)
    if len(fields) != 3 or not fields[0]:
        return None
    try:
        return fields[0], int(fields[1]), int(fields[2])
    except ValueError:
        return None


def _looks_like_fields(content: str) -> bool:
    """Whether a line that is not ``path pid camid`` is an image path followed by numbers (``path
    pid``, or more fields): a list line in another format, which would otherwise be reported as a
    file that is not an image."""
    fields = [f for f in re.split(r"[\s,]+", content) if f]
    image_at = next((i for i, f in enumerate(fields) if is_image_file(f)), None)
    return (image_at is not None and image_at < len(fields) - 1
            and all(re.fullmatch(r"[+-]?\d+", f) for f in fields[image_at + 1:]))


def list_entries(list_file: PathLike) -> ImageEntries:
    """The images named in a text file, one per line, with their labels where given.

    A line is an image path, or a dataset list entry ``path pid camid`` in the custom
    dataset's format (whitespace or commas; the path may contain spaces). A line that is an
    existing file as a whole is always just a path. Blank lines, ``#`` comments and a
    ``path pid camid`` header are skipped. Relative paths are relative to the list file's
    folder. Missing files raise a FileNotFoundError naming the first few.
    """
    list_file = os.fspath(list_file)
    base = os.path.dirname(os.path.abspath(list_file))

    def resolve(path: str) -> str:
        return os.path.normpath(path if os.path.isabs(path) else os.path.join(base, path))

    entries = ImageEntries()
    for number, line in text_lines(list_file):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if os.path.isfile(resolve(line)):
            entries.add(resolve(line))
            continue
        content = strip_comment(line).strip()
        if is_header(split_list_line(content)):
            continue
        labelled = _labelled_line(content)
        if (labelled is None or not is_image_file(labelled[0])) and _looks_like_fields(content):
            raise ValueError(f"List file {list_file!r} line {number}: {brief(content)} is neither an image path nor "
                             "'path pid camid' (three fields); give one image path per line, or all three fields.")
        if labelled is not None:
            if not all(_INT64.min <= v <= _INT64.max for v in labelled[1:]):
                raise ValueError(f"List file {list_file!r} line {number}: pid {labelled[1]} / camid {labelled[2]} "
                                 "do not fit int64; use ids from 0 up to the number of identities / cameras.")
            entries.add(resolve(labelled[0]), labelled[1], labelled[2])
        else:
            entries.add(resolve(content))
    if not entries.paths:
        raise ValueError(f"List file {list_file!r} names no images; put one image path per line.")
    # Only images: a list from someone else must not make a tool open /etc/shadow "as an image".
    not_images = [p for p in entries.paths if not is_image_file(p)]
    if not_images:
        raise ValueError(
            f"List file {list_file!r} names {len(not_images)} files that are not images "
            f"({', '.join(IMAGE_EXTENSIONS)}): {not_images[0]}{', ...' if len(not_images) > 1 else ''}. "
            "List image files only."
        )
    problems = [(p, file_problem(p)) for p in entries.paths]
    other = next(((p, problem) for p, problem in problems if problem and not is_missing(problem)), None)
    if other is not None:
        raise WrongPathKindError(f"List file {list_file!r} names {other[0]!r}, which {other[1]}; list image files "
                                 "only.")
    missing = [p for p, problem in problems if problem]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise FileNotFoundError(
            f"List file {list_file!r} names {len(missing)} images that do not exist: {shown}. "
            "Relative paths are taken relative to the list file's folder; a line is a path, or "
            "'path pid camid'."
        )
    return entries


def collect_entries(sources: Union[PathLike, Iterable[PathLike]]) -> ImageEntries:
    """Images from one or more sources, in order, with the labels list files give.

    Each source is an image file, a folder (searched recursively) or a list file (any other
    file: one path, or ``path pid camid``, per line).
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    entries = ImageEntries()
    for src in sources:
        src = os.fspath(src)
        if os.path.isdir(src):
            for path in images_in_folder(src):
                entries.add(path)
        elif os.path.isfile(src):
            if is_image_file(src):
                entries.add(src)
            else:
                entries.extend(list_entries(src))
        else:
            problem = file_problem(src)
            if not is_missing(problem):
                problem = problem.replace("not a file", "not a file or folder")
            raise (FileNotFoundError if is_missing(problem) else WrongPathKindError)(
                f"{src!r} {problem}; pass an image file, a folder of images or a list file.")
    if not entries.paths:
        raise ValueError("No image sources given; pass at least one image, folder or list file.")
    return entries


def collect_images(sources: Union[PathLike, Iterable[PathLike]]) -> List[str]:
    """Image paths from one or more sources, in order (see :func:`collect_entries`)."""
    return collect_entries(sources).paths


__all__: Sequence[str] = [
    "IMAGE_EXTENSIONS",
    "ImageEntries",
    "collect_entries",
    "collect_images",
    "images_in_folder",
    "list_entries",
    "is_image_file",
]
