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

Bounded memory, whatever the file claims: only regular files of at most MAX_IMAGE_BYTES are
read (a FIFO named ``x.jpg`` would block forever), and the width and height in the file's
header are checked against MAX_IMAGE_PIXELS before anything is decoded (a 100 kB PNG can
declare 50,000 x 50,000 pixels, 7.5 GB decoded). A file whose header no reader recognises
is refused rather than handed to OpenCV, which guesses the format from the bytes.
"""
from __future__ import annotations

import io
import logging
import os
import stat
import struct
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import List, Optional, Sequence, Tuple

import cv2
import numpy as np

from reid.utils.file_signatures import HEAD_BYTES, content_kind
from reid.utils.path_kinds import MISSING, file_problem, is_missing, mode_kind
from reid.utils.text_files import brief

logger = logging.getLogger(__name__)

_JPEG_SOI = b"\xff\xd8"
_JPEG_EOI = b"\xff\xd9"
_JPEG_SOS = b"\xff\xda"
# JPEG start-of-frame markers (they carry the size): C0-CF except DHT (C4), JPG (C8), DAC (CC).
_JPEG_SOF = set(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}

#: Image file extensions the tools look for in folders; compared case-insensitively (".JPG" is common).
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")


def is_image_file(path: "str | os.PathLike[str]") -> bool:
    """Whether `path` has one of IMAGE_EXTENSIONS (the file itself is not opened)."""
    return os.fspath(path).lower().endswith(IMAGE_EXTENSIONS)


#: Largest image file read (bytes); re-ID crops are a few kB, a camera frame a few MB.
MAX_IMAGE_BYTES = 1 << 28
#: Most pixels an image may declare (64 megapixels, 192 MB decoded).
MAX_IMAGE_PIXELS = 1 << 26
# Scale of the up-front check's JPEG decoding (cv2.IMREAD_REDUCED_GRAYSCALE_4).
_REDUCTION = 4


class CorruptImageError(OSError):
    """An image file is missing, unreadable or truncated; the message names it, ``why`` says what is wrong."""

    why: str = ""


def _corrupt(path: str, why: str) -> CorruptImageError:
    error = CorruptImageError(
        f"Cannot read image {path!r}: {why}. Replace or delete the file, or set "
        f"DATASETS.SKIP_CORRUPT True to skip unreadable images (they are counted and reported)."
    )
    error.why = why
    return error


def _missing(path: str, problem: str = MISSING) -> CorruptImageError:
    # A missing file is a path problem, not a damaged image: replacing or skipping it is the
    # wrong advice, since usually every image of the dataset is missing the same way.
    what = "the file does not exist" if problem == MISSING else f"it {problem}"
    return CorruptImageError(
        f"Cannot read image {path!r}: {what}. Check DATASETS.ROOT and the dataset "
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


def _jpeg_size(buf: bytes) -> Optional[Tuple[int, int]]:
    pos = 2
    while pos + 4 <= len(buf):
        if buf[pos] != 0xFF:
            return None
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # markers without a length
            pos += 2
            continue
        if marker == 0xDA:  # start of scan before any frame header
            return None
        if marker in _JPEG_SOF and pos + 9 <= len(buf):
            height, width = struct.unpack_from(">HH", buf, pos + 5)
            return width, height
        pos += 2 + struct.unpack_from(">H", buf, pos + 2)[0]
    return None


# What image_dimensions returns for a header whose size Pillow refuses to report (too large).
_TOO_LARGE = (-1, -1)


def image_dimensions(buf: bytes) -> Optional[Tuple[int, int]]:
    """``(width, height)`` from an image file's header, without decoding it; None if unrecognised.

    JPEG, PNG and BMP are read here; other formats (TIFF, WebP, ...) through Pillow's header
    parser (Pillow comes with torchvision and matplotlib). ``(-1, -1)``: Pillow found the
    declared size too large to report.
    """
    if buf[:2] == _JPEG_SOI:
        return _jpeg_size(buf)
    if buf[:8] == b"\x89PNG\r\n\x1a\n" and len(buf) >= 24:
        return struct.unpack_from(">II", buf, 16)
    if buf[:2] == b"BM" and len(buf) >= 26:
        if struct.unpack_from("<I", buf, 14)[0] == 12:  # OS/2 header: 16-bit sizes
            return struct.unpack_from("<HH", buf, 18)
        width, height = struct.unpack_from("<ii", buf, 18)
        return abs(width), abs(height)  # negative height: rows stored top-down
    from PIL import Image

    try:
        with warnings.catch_warnings():
            # Pillow's own size warning; the caller applies MAX_IMAGE_PIXELS itself.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(buf)) as img:
                return img.size
    except Image.DecompressionBombError:  # more than twice Pillow's limit, far above ours
        return _TOO_LARGE
    except Exception:  # Pillow raises several types for what it does not recognise
        return None


def _read_file(path: str) -> bytes:
    """The bytes of image file `path`: a regular file of at most MAX_IMAGE_BYTES."""
    try:
        st = os.stat(path)
    except OSError as e:
        problem = file_problem(path)
        if is_missing(problem):
            raise _missing(path, problem) from None
        raise _corrupt(path, f"it {problem}" if problem else f"{type(e).__name__}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _corrupt(path, f"it is {mode_kind(st.st_mode)}, not a file")
    if st.st_size > MAX_IMAGE_BYTES:
        raise _corrupt(path, f"the file is {st.st_size / 2**20:.0f} MB, more than the {MAX_IMAGE_BYTES >> 20} MB an "
                             "image may have here")
    try:
        with open(path, "rb") as f:
            return f.read(MAX_IMAGE_BYTES + 1)
    except OSError as e:
        raise _corrupt(path, f"{type(e).__name__}: {e.strerror or e}") from None


def _check_flags(buf: bytes, size: Tuple[int, int]) -> int:
    """OpenCV flags for the up-front check: a JPEG is decoded at 1/4 scale (libjpeg skips most of
    the inverse DCT); other formats in full, greyscale (their "reduced" decoding is a full decoding
    plus a resize, which also fails on images under 4 pixels a side, valid as they are)."""
    if buf[:2] == _JPEG_SOI and min(size) >= _REDUCTION:
        return cv2.IMREAD_REDUCED_GRAYSCALE_4
    return cv2.IMREAD_GRAYSCALE


def _decode(path: str, flags: Optional[int] = None) -> np.ndarray:
    """The decoded image at `path`; `flags` None: the check's flags (:func:`_check_flags`)."""
    buf = _read_file(path)
    if not buf:
        raise _corrupt(path, "the file is empty")
    size = image_dimensions(buf)
    if size is None:
        kind = content_kind(buf[:HEAD_BYTES], path)
        raise _corrupt(path, f"it is {kind}, not an image in a format read here (JPEG, PNG, BMP, TIFF, WebP)"
                       if not kind.endswith(" image") else f"it is {kind} whose header is damaged or not read here "
                       "(JPEG, PNG, BMP, TIFF, WebP are)")
    if size == _TOO_LARGE:
        raise _corrupt(path, f"its header declares more than {MAX_IMAGE_PIXELS:,} pixels; crop or resize it")
    if size[0] * size[1] > MAX_IMAGE_PIXELS or min(size) < 1:
        raise _corrupt(path, f"its header declares {size[0]} x {size[1]} pixels (at most {MAX_IMAGE_PIXELS:,} "
                             "pixels, each side at least 1, are read); crop or resize it")
    if buf[:2] == _JPEG_SOI and jpeg_is_truncated(buf):
        raise _corrupt(path, "the JPEG is truncated (its last scan has no end-of-image marker)")
    if flags is None:
        flags = _check_flags(buf, size)
    try:
        img = cv2.imdecode(np.frombuffer(buf, dtype=np.uint8), flags)
    except cv2.error as e:  # some damaged files make OpenCV raise instead of returning None
        raise _corrupt(path, f"OpenCV could not decode it ({brief(str(e).strip().splitlines()[-1])})") from None
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
        # Reduced-size JPEG decoding still walks the whole compressed stream but skips most of
        # the inverse DCT, so the scan is a few times faster than a full read.
        _decode(path)
    except CorruptImageError as e:
        return str(e)
    return None


def filter_readable(items: Sequence[Tuple[str, int, int]], what: str = "images",
                    warn: bool = True) -> Tuple[List[Tuple[str, int, int]], List[str]]:
    """Split `items` into readable items and the paths of unreadable ones.

    Decoding runs in up to 8 threads (OpenCV releases the GIL). With `warn`, one warning gives the count
    and the first five file names (callers that list every file themselves pass False).
    """
    paths = [it[0] for it in items]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        reasons = list(pool.map(check_image, paths))
    good = [it for it, r in zip(items, reasons) if r is None]
    bad = [p for p, r in zip(paths, reasons) if r is not None]
    if bad and warn:
        shown = ", ".join(bad[:5]) + (", ..." if len(bad) > 5 else "")
        logger.warning("DATASETS.SKIP_CORRUPT: skipped %d unreadable of %d %s: %s", len(bad), len(items), what, shown)
    return good, bad
