"""Reading images (OpenCV, RGB) and finding unreadable ones.

Policy for corrupt or unreadable images (DATASETS.SKIP_CORRUPT):

* False (default): the first image that cannot be read stops the run with CorruptImageError
  naming the file. Nothing is scanned up front, so start-up stays fast.
* True: ``filter_readable`` decodes every image once when the loaders are built and drops
  the bad ones, warning with their count and the first few names (the scan costs one decode
  per image, a few seconds for Market-1501). An image that breaks after the scan is replaced
  at load time by another image of the same identity, with a warning naming it, so a long
  run does not die.
"""
from __future__ import annotations

import logging
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np

logger = logging.getLogger(__name__)

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"


class CorruptImageError(OSError):
    """An image file is missing, unreadable or truncated; the message names it."""


def _corrupt(path: str, why: str) -> CorruptImageError:
    return CorruptImageError(
        f"Cannot read image {path!r}: {why}. Replace or delete the file, or set "
        f"DATASETS.SKIP_CORRUPT True to skip unreadable images (they are counted and reported)."
    )


def _decode(path: str, flags: int) -> np.ndarray:
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise _corrupt(path, f"{type(e).__name__}: {e.strerror or e}") from None
    if data.size == 0:
        raise _corrupt(path, "the file is empty")
    buf = data.tobytes()
    # libjpeg decodes a truncated JPEG into a grey-filled image without failing; the missing
    # end-of-image marker is the reliable sign. Search the tail only: some writers pad after it.
    if buf[:2] == _JPEG_SOI and _JPEG_EOI not in buf[-1024:]:
        raise _corrupt(path, "the JPEG is truncated (no end-of-image marker)")
    img = cv2.imdecode(data, flags)
    if img is None:
        raise _corrupt(path, "OpenCV could not decode it (not an image, or damaged)")
    return img


def read_image(path: str) -> np.ndarray:
    """Read an image as an ``H x W x 3`` uint8 RGB array; CorruptImageError names a bad file."""
    img = _decode(path, cv2.IMREAD_COLOR)
    return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)


def check_image(path: str) -> Optional[str]:
    """None when `path` decodes, else the reason it does not (used by the up-front scan)."""
    try:
        # Reduced-size decoding still walks the whole compressed stream but skips most of the
        # inverse DCT, so the scan is a few times faster than a full read.
        _decode(path, cv2.IMREAD_REDUCED_GRAYSCALE_4)
    except CorruptImageError as e:
        return str(e)
    return None


def filter_readable(
    items: Sequence[Tuple[str, int, int]], what: str = "images", num_threads: Optional[int] = None
) -> Tuple[List[Tuple[str, int, int]], List[str]]:
    """Split `items` into readable items and the paths of unreadable ones, warning about the latter.

    Decoding runs in threads (OpenCV releases the GIL). The warning gives the count and the
    first five file names.
    """
    threads = num_threads or min(8, os.cpu_count() or 1)
    paths = [it[0] for it in items]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        reasons = list(pool.map(check_image, paths))
    good = [it for it, r in zip(items, reasons) if r is None]
    bad = [p for p, r in zip(paths, reasons) if r is not None]
    if bad:
        shown = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
        msg = (
            f"DATASETS.SKIP_CORRUPT: skipped {len(bad)} unreadable of {len(items)} {what}: {shown}"
        )
        warnings.warn(msg, RuntimeWarning, stacklevel=2)
        logger.warning(msg)
    return good, bad
