"""Crop files the store owns: JPEG files named by the SHA-256 of their bytes, under ``<store>/crops/``.

A crop is found by its name only (64 hexadecimal digits, checked), never by a path from outside,
so nothing a request sends can reach another file. Files are written whole (temp file, rename)
before the row that names them is committed; a crop whose row never committed is an orphan that
``orphans()`` lists (harmless: the same crop ingested again finds its file).
"""
from __future__ import annotations

import hashlib
import os
import re
from typing import Iterable, List

import cv2
import numpy as np

from reid.utils.file_io import atomic_write

_NAME = re.compile(r"[0-9a-f]{64}")
#: JPEG quality of stored crops (crops are small; 95 keeps what a re-ID model sees).
JPEG_QUALITY = 95


class CropError(ValueError):
    """A crop name that is not one of the store's."""


def check_crop_name(name: str) -> str:
    """`name` when it is 64 lower-case hexadecimal digits; a CropError otherwise."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise CropError(f"crop {str(name)[:80]!r} is not a crop name (64 hexadecimal digits).")
    return name


def encode_crop(bgr: np.ndarray) -> bytes:
    """JPEG bytes of a BGR uint8 crop; a ValueError for an empty crop."""
    if bgr.ndim != 3 or bgr.shape[0] == 0 or bgr.shape[1] == 0:
        raise ValueError(f"crop of shape {bgr.shape} has no pixels.")
    ok, data = cv2.imencode(".jpg", np.ascontiguousarray(bgr), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
    if not ok:
        raise ValueError(f"crop of shape {bgr.shape} could not be encoded as JPEG.")
    return data.tobytes()


class CropFiles:
    """The crop folder of a store."""

    def __init__(self, folder: str) -> None:
        self.folder = os.path.abspath(folder)
        os.makedirs(self.folder, exist_ok=True)

    def path(self, name: str) -> str:
        """The file of crop `name` (checked; the file may not exist)."""
        name = check_crop_name(name)
        return os.path.join(self.folder, name[:2], name + ".jpg")

    def put(self, data: bytes) -> str:
        """Keep `data` (JPEG bytes); returns its name. The same bytes twice are one file."""
        name = hashlib.sha256(data).hexdigest()
        path = self.path(name)
        if not os.path.isfile(path):
            os.makedirs(os.path.dirname(path), exist_ok=True)
            atomic_write(path, lambda f: f.write(data))
        return name

    def put_image(self, bgr: np.ndarray) -> str:
        """Keep a BGR crop as JPEG; returns its name."""
        return self.put(encode_crop(bgr))

    def read(self, name: str) -> bytes:
        """The bytes of crop `name`; FileNotFoundError naming it when the store has no such file."""
        path = self.path(name)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"crop {name} is not in the store's crop folder {self.folder}.")
        with open(path, "rb") as f:
            return f.read()

    def orphans(self, known: Iterable[str]) -> List[str]:
        """Crop files no row names (left by an ingest that was stopped before its commit)."""
        known = set(known)
        found = []
        for sub in sorted(os.listdir(self.folder)):
            folder = os.path.join(self.folder, sub)
            if os.path.isdir(folder):
                found += [n[:-4] for n in sorted(os.listdir(folder)) if n.endswith(".jpg") and n[:-4] not in known]
        return found


__all__ = ["CropError", "CropFiles", "JPEG_QUALITY", "check_crop_name", "encode_crop"]
