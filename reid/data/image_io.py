"""Reading images (OpenCV, RGB) and finding unreadable ones.

Policy for corrupt or unreadable images (DATASETS.SKIP_CORRUPT):

* False (default): the first image that cannot be read stops the run with CorruptImageError
  naming the file. Nothing is scanned up front, so start-up stays fast.
* True: ``filter_readable`` decodes every image once when the loaders are built and drops
  the bad ones, warning with their count and the first few names (the scan costs one decode
  per image, a few seconds for Market-1501). A training image that breaks after the scan is
  replaced at load time by another image of the same identity, with a warning naming it, so
  a long run does not die; a test image that breaks later stops the run (a replacement could
  move an image between query and gallery and so corrupt the evaluation).

A missing file gets its own message (check DATASETS.ROOT and the layout), since skipping or
replacing it is the wrong advice when a path is wrong.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np

logger = logging.getLogger(__name__)

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
_JPEG_SOS = b"\xff\xda"


class CorruptImageError(OSError):
    """An image file is missing, unreadable or truncated; the message names it."""


def _corrupt(path: str, why: str) -> CorruptImageError:
    return CorruptImageError(
        f"Cannot read image {path!r}: {why}. Replace or delete the file, or set "
        f"DATASETS.SKIP_CORRUPT True to skip unreadable images (they are counted and reported)."
    )


def _missing(path: str) -> CorruptImageError:
    # A missing file is a path problem, not a damaged image: replacing or skipping it is the
    # wrong advice, since usually every image of the dataset is missing the same way.
    return CorruptImageError(
        f"Cannot read image {path!r}: the file does not exist. Check DATASETS.ROOT and the dataset "
        f"layout (see datasets/README.md), or the list file that names this path."
    )


def jpeg_is_truncated(buf: bytes) -> bool:
    """Whether JPEG bytes `buf` end before the end of their last scan.

    Many libjpeg builds decode a truncated JPEG into a grey-filled image without failing, so
    the markers decide: the file is truncated when its last end-of-image marker (FF D9) is
    missing or comes before its last start-of-scan marker (FF DA). Entropy-coded data
    byte-stuffs 0xFF, so neither marker can occur inside a scan, and an embedded (EXIF)
    thumbnail's markers come before the main scan; data padded after the end-of-image marker
    is allowed.
    """
    eoi = buf.rfind(_JPEG_EOI)
    return eoi < 0 or eoi < buf.rfind(_JPEG_SOS)


def _decode(path: str, flags: int) -> np.ndarray:
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except FileNotFoundError:
        raise _missing(path) from None
    except OSError as e:
        raise _corrupt(path, f"{type(e).__name__}: {e.strerror or e}") from None
    if data.size == 0:
        raise _corrupt(path, "the file is empty")
    buf = data.tobytes()
    if buf[:2] == _JPEG_SOI and jpeg_is_truncated(buf):
        raise _corrupt(path, "the JPEG is truncated (its last scan has no end-of-image marker)")
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
    items: Sequence[Tuple[str, int, int]], what: str = "images", num_threads: Optional[int] = None,
    warn: bool = True,
) -> Tuple[List[Tuple[str, int, int]], List[str]]:
    """Split `items` into readable items and the paths of unreadable ones.

    Decoding runs in threads (OpenCV releases the GIL). With `warn`, one warning gives the count
    and the first five file names (callers that list every file themselves pass False).
    """
    threads = num_threads or min(8, os.cpu_count() or 1)
    paths = [it[0] for it in items]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        reasons = list(pool.map(check_image, paths))
    good = [it for it, r in zip(items, reasons) if r is None]
    bad = [p for p, r in zip(paths, reasons) if r is not None]
    if bad and warn:
        shown = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
        logger.warning("DATASETS.SKIP_CORRUPT: skipped %d unreadable of %d %s: %s", len(bad), len(items), what, shown)
    return good, bad
