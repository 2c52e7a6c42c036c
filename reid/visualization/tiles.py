"""Drawing primitives for ranked-list pictures: image tiles with coloured borders and labels.

All arrays are RGB uint8 ``[H, W, 3]``; conversion to OpenCV's BGR happens only when a file
is read or written, so colours in code and in tests mean what they say.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import cv2
import numpy as np

from reid.config import value_range
from reid.data.image_io import CorruptImageError, read_image
from reid.utils.file_io import atomic_write

from .options import MIN_TILE_HEIGHT

Color = Tuple[int, int, int]

MATCH_COLOR: Color = (0, 170, 0)  # green: same identity as the query
MISMATCH_COLOR: Color = (220, 0, 0)  # red: different identity
IGNORED_COLOR: Color = (160, 160, 160)  # grey: an entry the metric ignores (shown on request)
QUERY_COLOR: Color = (30, 90, 220)  # blue: the query itself
TEXT_COLOR: Color = (0, 0, 0)
BACKGROUND: Color = (255, 255, 255)

FONT = cv2.FONT_HERSHEY_SIMPLEX
# A picture's tiles are no taller than the largest image side a config may ask for (each tile
# and each row of tiles is allocated at that height).
MAX_TILE_HEIGHT = value_range("INPUT.SIZE_TEST")[1]


@dataclass(frozen=True)
class TileGeometry:
    """Pixel sizes of one tile, all derived from the image height so pictures scale together."""

    image_h: int
    image_w: int
    border: int
    label_h: int
    font_scale: float
    thickness: int

    @property
    def height(self) -> int:
        return self.image_h + 2 * self.border + self.label_h

    @property
    def width(self) -> int:
        return self.image_w + 2 * self.border

    @classmethod
    def for_height(cls, image_h: int, aspect_wh: float) -> "TileGeometry":
        """Geometry for images `image_h` pixels tall at width/height ratio `aspect_wh`."""
        if image_h < MIN_TILE_HEIGHT:
            raise ValueError(f"Tile height {image_h} px is too small to read; use at least {MIN_TILE_HEIGHT} "
                             "(256 is the default).")
        if image_h > MAX_TILE_HEIGHT:
            raise ValueError(f"Tile height {image_h} px is larger than any image a model reads; use at most "
                             f"{MAX_TILE_HEIGHT} (the bound of INPUT.SIZE_TEST; 256 is the default).")
        image_w = max(8, int(round(image_h * aspect_wh)))
        # ~0.5 font scale at 256 px: about 11 px tall digits, readable at 100% zoom
        scale = 0.5 * image_h / 256.0
        return cls(
            image_h=image_h,
            image_w=image_w,
            border=max(3, image_h // 40),
            label_h=max(16, int(round(image_h * 0.11))),
            font_scale=max(0.35, scale),
            thickness=1 if image_h < 400 else 2,
        )


def read_rgb(path: str) -> np.ndarray:
    """Read an image file as RGB uint8; the error names the file and what to check.

    The file is read with the same checks as training images (reid.data.image_io: regular
    files only, sizes checked before decoding): the paths come from a features or gallery file,
    which may be someone else's.
    """
    try:
        return read_image(str(path))
    except CorruptImageError as e:
        reason = "does not exist" if not os.path.exists(str(path)) else f"is not a readable image ({e.why})"
        raise FileNotFoundError(
            f"Image {path!r} {reason}. Pictures are drawn from the image files named in the features; "
            "if the dataset moved, pass its new folder as image_root (tools/visualize.py --image-root)."
        ) from None


def fit_text(text: str, max_width: int, scale: float, thickness: int) -> float:
    """The largest font scale <= `scale` at which `text` fits into `max_width` pixels."""
    (w, _), _ = cv2.getTextSize(text, FONT, scale, thickness)
    if w <= max_width or w == 0:
        return scale
    return max(0.25, scale * max_width / w)


def put_text(canvas: np.ndarray, text: str, x: int, y_baseline: int, scale: float, thickness: int,
             color: Color = TEXT_COLOR, max_width: Optional[int] = None) -> None:
    """Draw `text` (shrunk to fit `max_width` when given) with its baseline at `y_baseline`."""
    if max_width is not None:
        scale = fit_text(text, max_width, scale, thickness)
    cv2.putText(canvas, text, (int(x), int(y_baseline)), FONT, scale, color, thickness, cv2.LINE_AA)


def grey_out(img: np.ndarray) -> np.ndarray:
    """A washed-out grey version of `img`: visibly "not counted" but still recognisable."""
    grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).astype(np.float32)
    light = 0.5 * grey + 0.5 * 255.0
    return np.repeat(light[..., None], 3, axis=2).astype(np.uint8)


def make_tile(img: np.ndarray, geom: TileGeometry, border_color: Color, label: str,
              greyed: bool = False) -> np.ndarray:
    """One tile: `img` resized to the geometry, a solid border, and `label` on a strip below."""
    interp = cv2.INTER_AREA if img.shape[0] > geom.image_h else cv2.INTER_LINEAR
    body = cv2.resize(img, (geom.image_w, geom.image_h), interpolation=interp)
    if greyed:
        body = grey_out(body)
    tile = np.full((geom.height, geom.width, 3), BACKGROUND, dtype=np.uint8)
    b = geom.border
    tile[: geom.image_h + 2 * b] = border_color
    tile[b : b + geom.image_h, b : b + geom.image_w] = body
    (_, th), _ = cv2.getTextSize("0", FONT, geom.font_scale, geom.thickness)
    baseline = geom.image_h + 2 * b + (geom.label_h + th) // 2
    put_text(tile, label, 2, baseline, geom.font_scale, geom.thickness, max_width=geom.width - 4)
    return tile


def caption_strip(lines: Sequence[str], width: int, geom: TileGeometry) -> np.ndarray:
    """White strip with one text line per entry of `lines`, each shrunk to fit `width`."""
    line_h = int(round(geom.label_h * 1.15))
    strip = np.full((line_h * len(lines) + geom.border, width, 3), BACKGROUND, dtype=np.uint8)
    scale = geom.font_scale * 1.1
    (_, th), _ = cv2.getTextSize("0", FONT, scale, geom.thickness)
    for i, line in enumerate(lines):
        y = i * line_h + (line_h + th) // 2
        put_text(strip, line, geom.border, y, scale, geom.thickness, max_width=width - 2 * geom.border)
    return strip


def hstack_tiles(tiles: Sequence[np.ndarray], gaps: Sequence[int], margin: int) -> np.ndarray:
    """Tiles side by side on white, `gaps[i]` pixels before tile i+1, `margin` around."""
    h = max(t.shape[0] for t in tiles)
    w = 2 * margin + sum(t.shape[1] for t in tiles) + sum(gaps)
    canvas = np.full((h, w, 3), BACKGROUND, dtype=np.uint8)
    x = margin
    for i, t in enumerate(tiles):
        canvas[: t.shape[0], x : x + t.shape[1]] = t
        x += t.shape[1] + (gaps[i] if i < len(gaps) else 0)
    return canvas


def results_row(tiles: Sequence[np.ndarray], geom: TileGeometry, caption: Optional[Sequence[str]] = None) -> np.ndarray:
    """A query's picture row: its tile, a wide gap that separates it from its results, then the result
    tiles with small gaps; `caption` lines (None: no strip) above."""
    gaps = [4 * geom.border] + [geom.border] * max(0, len(tiles) - 2)
    body = hstack_tiles(tiles, gaps, 2 * geom.border)
    return body if caption is None else vstack_padded([caption_strip(list(caption), body.shape[1], geom), body])


def vstack_padded(parts: Sequence[np.ndarray], gap: int = 0, separator: Optional[Color] = None) -> np.ndarray:
    """Stack images vertically, padding narrower ones with white on the right."""
    w = max(p.shape[1] for p in parts)
    out = []
    for i, p in enumerate(parts):
        if i and gap:
            sep = np.full((gap, w, 3), BACKGROUND, dtype=np.uint8)
            if separator is not None:
                sep[gap // 2 : gap // 2 + 1] = separator
            out.append(sep)
        if p.shape[1] < w:
            p = np.concatenate([p, np.full((p.shape[0], w - p.shape[1], 3), BACKGROUND, dtype=np.uint8)], axis=1)
        out.append(p)
    return np.concatenate(out, axis=0)


def write_rgb(path: str, img: np.ndarray, jpeg_quality: int = 92) -> None:
    """Write an RGB image atomically (format from the extension: .png, .jpg or .jpeg)."""
    ext = os.path.splitext(str(path))[1].lower()
    if ext not in (".png", ".jpg", ".jpeg"):
        raise ValueError(f"Cannot write {path!r}: use a .png or .jpg file name.")
    params = [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)] if ext != ".png" else []
    ok, buf = cv2.imencode(ext, cv2.cvtColor(img, cv2.COLOR_RGB2BGR), params)
    if not ok:
        raise OSError(f"OpenCV could not encode the picture for {path!r}.")
    atomic_write(str(path), lambda f: f.write(buf.tobytes()))
