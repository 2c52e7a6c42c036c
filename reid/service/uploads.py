"""Uploaded query images, decoded safely: bounded in bytes and pixels before any pixel is decoded.

Pillow reads the image's header first (its size), so a small file that claims a huge image (a
decompression bomb) is refused before memory is spent on it; only JPEG, PNG, BMP and WebP are
taken; anything else is "not an image".
"""
from __future__ import annotations

import io
import warnings

import numpy as np

#: Largest upload, bytes.
MAX_UPLOAD_BYTES = 8 * 1024 * 1024
#: Largest image, pixels (width x height): a person crop needs far less.
MAX_UPLOAD_PIXELS = 16 * 1024 * 1024
FORMATS = ("JPEG", "PNG", "BMP", "WEBP")


class UploadError(ValueError):
    """An upload that is refused; `status` is the HTTP status that says why."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def decode_upload(data: bytes, max_bytes: int = MAX_UPLOAD_BYTES, max_pixels: int = MAX_UPLOAD_PIXELS) -> np.ndarray:
    """RGB uint8 ``[H, W, 3]`` of an uploaded image; an UploadError (413 too large, 415 not an image)."""
    from PIL import Image

    if len(data) > max_bytes:
        raise UploadError(f"upload of {len(data)} bytes is over the limit of {max_bytes}; send a smaller crop.", 413)
    if not data:
        raise UploadError("upload is empty; send a JPEG or PNG image.", 415)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            image = Image.open(io.BytesIO(data), formats=FORMATS)
            width, height = image.size
            if width * height > max_pixels:
                raise UploadError(f"image of {width}x{height} pixels is over the limit of {max_pixels} pixels; "
                                  "send a person crop.", 413)
            if width < 1 or height < 1:
                raise UploadError("image has no pixels.", 415)
            rgb = np.asarray(image.convert("RGB"))
        except UploadError:
            raise
        except (Image.DecompressionBombError, Image.DecompressionBombWarning):
            raise UploadError(f"image is over the limit of {max_pixels} pixels; send a person crop.", 413) from None
        except Exception:  # Pillow raises many kinds for damaged or foreign bytes; all mean the same here
            raise UploadError("upload is not an image this service reads (JPEG, PNG, BMP or WebP).", 415) from None
    return np.ascontiguousarray(rgb)


__all__ = ["FORMATS", "MAX_UPLOAD_BYTES", "MAX_UPLOAD_PIXELS", "UploadError", "decode_upload"]
