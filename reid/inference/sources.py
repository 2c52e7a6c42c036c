"""Turn what a user points at (a folder, a list file, image files) into a list of image paths."""
from __future__ import annotations

import os
from typing import Iterable, List, Sequence, Union

# Extensions OpenCV decodes out of the box; compared case-insensitively (".JPG" is common).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")

PathLike = Union[str, "os.PathLike[str]"]


def is_image_file(path: PathLike) -> bool:
    """Whether `path` has one of IMAGE_EXTENSIONS (the file itself is not opened)."""
    return os.fspath(path).lower().endswith(IMAGE_EXTENSIONS)


def images_in_folder(folder: PathLike) -> List[str]:
    """Every image file under `folder` (recursive, hidden folders skipped), sorted.

    Sorting makes the order (and so the gallery row of each image) the same on every
    machine, whatever order the file system lists them in.
    """
    folder = os.fspath(folder)
    found = []
    for root, dirs, files in os.walk(folder, followlinks=True):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        found.extend(os.path.join(root, f) for f in files if is_image_file(f))
    found.sort()
    if not found:
        raise ValueError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found under folder {folder!r}; "
            "check the path, or pass a list file with one image path per line."
        )
    return found


def images_in_list(list_file: PathLike) -> List[str]:
    """The image paths named in a text file, one per line.

    Blank lines and lines starting with ``#`` are skipped. A line may also be a dataset list
    entry ``path pid camid``: when the whole line is not a file, its first field is the path.
    Relative paths are relative to the list file's folder (as in the custom dataset lists).
    Missing files raise a FileNotFoundError naming the first few.
    """
    list_file = os.fspath(list_file)
    base = os.path.dirname(os.path.abspath(list_file))
    paths: List[str] = []
    with open(list_file, "r", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            candidate = line if os.path.isabs(line) else os.path.join(base, line)
            if not os.path.isfile(candidate) and len(line.split()) > 1:
                first = line.split()[0]
                candidate = first if os.path.isabs(first) else os.path.join(base, first)
            paths.append(os.path.normpath(candidate))
    if not paths:
        raise ValueError(f"List file {list_file!r} names no images; put one image path per line.")
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise FileNotFoundError(
            f"List file {list_file!r} names {len(missing)} images that do not exist: {shown}. "
            "Relative paths are taken relative to the list file's folder."
        )
    return paths


def collect_images(sources: Union[PathLike, Iterable[PathLike]]) -> List[str]:
    """Image paths from one or more sources, in order.

    Each source is an image file, a folder (searched recursively) or a list file (any other
    file: one path per line).
    """
    if isinstance(sources, (str, os.PathLike)):
        sources = [sources]
    paths: List[str] = []
    for src in sources:
        src = os.fspath(src)
        if os.path.isdir(src):
            paths.extend(images_in_folder(src))
        elif os.path.isfile(src):
            paths.extend([src] if is_image_file(src) else images_in_list(src))
        else:
            raise FileNotFoundError(
                f"{src!r} does not exist; pass an image file, a folder of images or a list file."
            )
    if not paths:
        raise ValueError("No image sources given; pass at least one image, folder or list file.")
    return paths


__all__: Sequence[str] = [
    "IMAGE_EXTENSIONS",
    "collect_images",
    "images_in_folder",
    "images_in_list",
    "is_image_file",
]
