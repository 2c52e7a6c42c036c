"""Procedural drawing of person-like crops for the synthetic dataset.

Identity evidence (kept consistent across cameras): clothing colours (upper, lower, shoes),
upper-body pattern (solid, horizontal/vertical stripes, checks, chest logo), body shape
(height, shoulder width, head size, leg length), hair, and accessories (hat, backpack, bag,
scarf). Camera nuisance (large on purpose, so raw pixels do not identify people): background
(gradient, noise texture, tiled wall/floor, stripes, plus fixed clutter), illumination (gain,
colour cast, lighting slope), viewpoint (front/back/side; side views are narrower, a logo only
shows from the front, a backpack is a block from the back and straps from the front), blur,
noise, scale and position jitter and occasional occluders.

Every draw comes from the numpy Generator passed in, so an image is a pure function of its seed.
The person is drawn at twice the output resolution and shrunk with area averaging, which gives
anti-aliased edges without per-pixel Python work.
"""
from __future__ import annotations

import colorsys
from dataclasses import dataclass, replace
from typing import List, Optional, Tuple

import cv2
import numpy as np

from .synthetic_styles import STYLES, RenderStyle  # re-exported: callers import the styles from here too

#: Bump when the drawing changes, so cached datasets made by an older renderer are not reused.
RENDER_VERSION = 4

Colour = Tuple[int, int, int]
VIEWS = ("front", "back", "side")
PATTERNS = ("solid", "hstripes", "vstripes", "checks", "logo")
LOWER_STYLES = ("trousers", "trousers", "shorts", "skirt")
_SS = 2  # supersampling factor
_SHIFT = 4  # cv2 fixed-point bits: coordinates are passed as round(x * 16)
_FP = 1 << _SHIFT

_SKIN = ((255, 220, 190), (235, 190, 150), (200, 150, 110), (160, 110, 75), (110, 75, 50))
_HAIR = ((20, 15, 10), (60, 40, 25), (110, 75, 40), (200, 170, 110), (150, 150, 150), (140, 60, 30))
_NEUTRAL_LOWER = ((35, 45, 80), (25, 25, 28), (90, 90, 95), (170, 150, 110), (60, 70, 110), (230, 230, 225))


_DEMO = STYLES["demo"]


def _hsv(h: float, s: float, v: float) -> Colour:
    r, g, b = colorsys.hsv_to_rgb(h % 1.0, s, v)
    return (int(r * 255), int(g * 255), int(b * 255))


def _garment_colour(rng: np.random.Generator, neutral_p: float, style: RenderStyle = _DEMO) -> Colour:
    """A clothing colour: a saturated hue most of the time, black/white/grey otherwise.

    Hue, saturation and value come from a few well-separated levels (12 hues 30 degrees apart)
    with a little jitter, like the colour names people would use; a continuous hue would let
    the cameras' colour casts turn one identity's colour into another's.
    """
    if rng.random() < neutral_p:
        v = rng.choice([0.1, 0.3, 0.55, 0.8, 0.95]) + rng.uniform(-0.03, 0.03)
        return _hsv(rng.random(), rng.uniform(0, 0.1), float(np.clip(v, 0, 1)))
    hue = rng.integers(12) / 12 + rng.normal(0, 0.012) + style.hue_offset
    sat = (rng.choice([0.55, 0.8, 1.0]) + rng.uniform(-0.05, 0.0)) * style.saturation
    val = rng.choice([0.5, 0.7, 0.92]) + rng.uniform(-0.04, 0.04)
    return _hsv(hue, sat, val)


def _contrast_colour(rng: np.random.Generator, base: Colour, style: RenderStyle = _DEMO) -> Colour:
    """A second colour far enough from `base` to make a visible pattern."""
    for _ in range(20):
        c = _garment_colour(rng, 0.3, style)
        if np.abs(np.subtract(c, base)).sum() > 180:
            return c
    return tuple(255 - x for x in base)  # type: ignore[return-value]


@dataclass(frozen=True)
class IdentitySpec:
    """Appearance of one person (fractions are of the drawn person's height)."""

    upper: Colour
    upper2: Colour
    pattern: str
    period: float  # stripe/check period as a fraction of person height
    logo_shape: int  # 0 disc, 1 square, 2 triangle
    short_sleeves: bool
    lower: Colour
    lower_style: str
    shoes: Colour
    skin: Colour
    hair: Colour
    long_hair: bool
    height: float  # fraction of the figure box
    width: float  # shoulder half-width
    head: float  # head radius
    legs: float  # leg length
    hat: Optional[Colour]
    backpack: Optional[Colour]
    bag: Optional[Colour]
    bag_side: int  # +1: the person's right, -1: left
    scarf: Optional[Colour]


@dataclass(frozen=True)
class CameraSpec:
    """Look of one camera: background, light, blur and how people appear in it."""

    background: str
    bg1: Colour
    bg2: Colour
    floor: Colour
    floor_y: float
    bg_period: float
    clutter: Tuple[Tuple[float, float, float, float, Colour], ...]
    gain: float
    cast: Tuple[float, float, float]
    light_slope: float
    blur: float  # Gaussian sigma at output resolution
    noise: float  # std of pixel noise
    view_p: Tuple[float, float, float]
    scale: float  # mean person height as a fraction of the image height
    occluder_p: float
    occluder: Colour


def sample_identity(rng: np.random.Generator, style: RenderStyle = _DEMO) -> IdentitySpec:
    """Draw a random person."""
    upper = _garment_colour(rng, 0.15, style)
    lower = (_NEUTRAL_LOWER[rng.integers(len(_NEUTRAL_LOWER))] if rng.random() < 0.5
             else _garment_colour(rng, 0.2, style))
    opt = lambda p: _garment_colour(rng, 0.3, style) if rng.random() < p else None  # noqa: E731
    return IdentitySpec(
        upper=upper,
        upper2=_contrast_colour(rng, upper, style),
        pattern=PATTERNS[rng.choice(len(PATTERNS), p=[0.36, 0.16, 0.12, 0.14, 0.22])],
        period=float(rng.uniform(0.05, 0.09)),
        logo_shape=int(rng.integers(3)),
        short_sleeves=bool(rng.random() < 0.35),
        lower=tuple(int(x) for x in lower),  # type: ignore[arg-type]
        lower_style=LOWER_STYLES[rng.integers(len(LOWER_STYLES))],
        shoes=_garment_colour(rng, 0.6, style),
        skin=_SKIN[rng.integers(len(_SKIN))],
        hair=_HAIR[rng.integers(len(_HAIR))],
        long_hair=bool(rng.random() < 0.3),
        height=float(rng.uniform(0.86, 1.0)),
        width=float(rng.uniform(0.095, 0.14)),
        head=float(rng.uniform(0.055, 0.072)),
        legs=float(rng.uniform(0.42, 0.5)),
        hat=opt(0.2),
        backpack=opt(0.3),
        bag=opt(0.25),
        bag_side=int(rng.choice([-1, 1])),
        scarf=opt(0.15),
    )


def sample_camera(rng: np.random.Generator, style: RenderStyle = _DEMO) -> CameraSpec:
    """Draw a random camera."""
    bright = lambda: _hsv(rng.random(), rng.uniform(0.1, 0.7), rng.uniform(*style.bg_value))  # noqa: E731
    clutter = tuple(
        (float(rng.uniform(-0.2, 0.9)), float(rng.uniform(0.0, 0.7)), float(rng.uniform(0.15, 0.6)),
         float(rng.uniform(0.1, 0.5)), bright())
        for _ in range(int(rng.integers(0, 4)))
    )
    dominant = int(rng.integers(3))
    view_p = np.full(3, 0.15)
    view_p[dominant] = 0.7
    return CameraSpec(
        background=style.backgrounds[rng.integers(len(style.backgrounds))],
        bg1=bright(),
        bg2=bright(),
        floor=bright(),
        floor_y=float(rng.uniform(0.55, 0.85)),
        bg_period=float(rng.uniform(0.12, 0.4)),
        clutter=clutter,
        gain=float(rng.uniform(*style.gain)),
        cast=tuple(float(x) for x in rng.uniform(*style.cast, 3)),  # type: ignore[arg-type]
        light_slope=float(rng.uniform(-0.4, 0.4)),
        blur=float(rng.uniform(*style.blur)),
        noise=float(rng.uniform(*style.noise)),
        view_p=tuple(float(x) for x in view_p),  # type: ignore[arg-type]
        scale=float(rng.uniform(0.8, 0.95)),
        occluder_p=float(rng.uniform(0.0, 0.25)),
        occluder=bright(),
    )


# --------------------------------------------------------------------------------------- #
# drawing
# --------------------------------------------------------------------------------------- #
def _fp(pts) -> np.ndarray:
    return np.round(np.asarray(pts, dtype=np.float64) * _FP).astype(np.int32)


class _Layer:
    """A colour canvas plus a coverage mask; every part is drawn into both."""

    def __init__(self, h: int, w: int) -> None:
        self.rgb = np.zeros((h, w, 3), np.uint8)
        self.mask = np.zeros((h, w), np.uint8)

    def poly(self, pts, colour) -> None:
        p = [_fp(pts)]
        cv2.fillPoly(self.rgb, p, colour, cv2.LINE_AA, _SHIFT)
        cv2.fillPoly(self.mask, p, 255, cv2.LINE_AA, _SHIFT)

    def rect(self, x0: float, y0: float, x1: float, y1: float, colour) -> None:
        self.poly([(x0, y0), (x1, y0), (x1, y1), (x0, y1)], colour)

    def line(self, p0, p1, thickness: float, colour) -> None:
        t = max(1, int(round(thickness)))
        a, b = tuple(_fp(p0)), tuple(_fp(p1))
        cv2.line(self.rgb, a, b, colour, t, cv2.LINE_AA, _SHIFT)
        cv2.line(self.mask, a, b, 255, t, cv2.LINE_AA, _SHIFT)

    def ellipse(self, centre, axes, colour, start: float = 0, end: float = 360) -> None:
        c, ax = tuple(_fp(centre)), tuple(_fp(np.maximum(axes, 0.5)))
        cv2.ellipse(self.rgb, c, ax, 0, start, end, colour, -1, cv2.LINE_AA, _SHIFT)
        cv2.ellipse(self.mask, c, ax, 0, start, end, 255, -1, cv2.LINE_AA, _SHIFT)


def _jitter_colour(c: Colour, rng: np.random.Generator, amount: float = 10) -> Colour:
    return tuple(int(np.clip(x + rng.normal(0, amount), 0, 255)) for x in c)  # type: ignore[return-value]


def draw_background(cam: CameraSpec, rng: np.random.Generator, size: Tuple[int, int]) -> np.ndarray:
    """A float32 ``H x W x 3`` background of `size` (H, W) in `cam`'s style (before its light), with
    per-image variation."""
    h, w = int(size[0]), int(size[1])
    c1 = np.array(_jitter_colour(cam.bg1, rng, 12), np.float32)
    c2 = np.array(_jitter_colour(cam.bg2, rng, 12), np.float32)
    yy = np.linspace(0, 1, h, dtype=np.float32)[:, None]
    xx = np.linspace(0, 1, w, dtype=np.float32)[None, :]
    if cam.background == "gradient":
        t = np.clip(yy * rng.uniform(0.7, 1.3) + xx * rng.uniform(-0.3, 0.3) + rng.uniform(-0.2, 0.2), 0, 1)
    elif cam.background == "noise":
        coarse = rng.random((int(rng.integers(3, 7)), int(rng.integers(2, 5)))).astype(np.float32)
        t = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_CUBIC).clip(0, 1)
    elif cam.background == "stripes":
        phase = rng.random()
        t = ((xx / cam.bg_period + phase) % 1.0 < 0.5).astype(np.float32) * np.ones_like(yy)
    else:  # tiles: a panelled wall over a floor
        phase = rng.random()
        t = ((xx / cam.bg_period + phase) % 1.0 < 0.08).astype(np.float32) * np.ones_like(yy)
    bg = c1 * (1 - t[..., None]) + c2 * t[..., None]
    if cam.background == "tiles":
        fy = int((cam.floor_y + rng.uniform(-0.06, 0.06)) * h)
        floor = np.array(_jitter_colour(cam.floor, rng, 10), np.float32)
        bg[fy:] = floor * (1 - 0.25 * ((np.arange(h - fy) // max(2, h // 12)) % 2))[:, None, None]
    shift = rng.uniform(-0.3, 0.3)
    for x0, y0, bw, bh, col in cam.clutter:
        xa, ya = int((x0 + shift) * w), int(y0 * h)
        bg[max(ya, 0) : max(ya + int(bh * h), 0), max(xa, 0) : max(xa + int(bw * w), 0)] = _jitter_colour(col, rng, 8)
    return bg


def _draw_person(ident: IdentitySpec, view: str, rng: np.random.Generator, h: int, w: int,
                 scale: float, cx: float, top_pad: float, open_jacket: bool = False) -> _Layer:
    """Draw one person facing right (side) / the camera (front) / away (back)."""
    L = _Layer(h, w)
    hp = scale * ident.height * h
    top = top_pad + (1 - ident.height) * scale * h  # shorter people stand on the same ground line
    r = ident.head * hp
    head_c = (cx + (0.25 * r if view == "side" else 0.0), top + r)
    neck = top + 2.05 * r
    shoulder_y = neck + 0.02 * hp
    hip = top + hp * (1 - ident.legs)
    foot = top + hp
    side = view == "side"
    sw = ident.width * hp * (0.6 if side else 1.0)
    hw = sw * (0.85 if side else 0.8)
    limb = ident.width * hp * 0.3
    leg_w = ident.width * hp * 0.42
    upper = _jitter_colour(ident.upper, rng, 6)
    lower = _jitter_colour(ident.lower, rng, 6)
    stride = rng.uniform(0.0, 0.09) * hp
    swing = rng.uniform(-0.05, 0.05) * hp

    # Backpack seen from the side sits behind the torso.
    if ident.backpack is not None and side:
        L.rect(cx - sw - 0.09 * hp, shoulder_y + 0.02 * hp, cx - sw + 0.02 * hp, hip - 0.04 * hp, ident.backpack)
    if ident.long_hair and view == "front":
        L.poly([(cx - 1.05 * r, top + r), (cx + 1.05 * r, top + r), (cx + 1.1 * r, neck + 0.07 * hp),
                (cx - 1.1 * r, neck + 0.07 * hp)], ident.hair)

    # Legs (two lines from the hips to the feet); shorts/skirts show skin below the garment.
    legs_x = [(-0.5 * hw, -stride), (0.5 * hw, stride)] if not side else [(0.0, -1.6 * stride), (0.0, 1.6 * stride)]
    knee_frac = {"trousers": 1.0, "shorts": 0.42, "skirt": 0.0}[ident.lower_style]
    for x_hip, dx in legs_x:
        p0 = np.array([cx + x_hip, hip])
        p1 = np.array([cx + x_hip + dx, foot - 0.03 * hp])
        L.line(p0, p1, leg_w, ident.skin)
        if knee_frac > 0:
            L.line(p0, p0 + (p1 - p0) * knee_frac, leg_w * 1.08, lower)
        L.ellipse((p1[0] + (0.3 * leg_w if side else 0), foot - 0.015 * hp), (0.75 * leg_w, 0.022 * hp), ident.shoes)
    if ident.lower_style == "skirt":
        L.poly([(cx - hw, hip - 0.01 * hp), (cx + hw, hip - 0.01 * hp), (cx + 1.5 * hw, hip + 0.2 * hp),
                (cx - 1.5 * hw, hip + 0.2 * hp)], lower)
    else:  # the seat of trousers/shorts joins the two legs
        L.rect(cx - hw, hip - 0.01 * hp, cx + hw, hip + 0.06 * hp, lower)

    # Torso with its pattern: drawn into its own mask, filled from a vectorised texture.
    torso = [(cx - sw, shoulder_y), (cx + sw, shoulder_y), (cx + hw, hip + 0.01 * hp), (cx - hw, hip + 0.01 * hp)]
    tmask = np.zeros((h, w), np.uint8)
    cv2.fillPoly(tmask, [_fp(torso)], 255, cv2.LINE_AA, _SHIFT)
    pattern = ident.pattern if not (ident.pattern == "logo" and view != "front") else "solid"
    tex = _torso_texture(pattern, upper, ident.upper2, ident.period * hp, h, w, cx, shoulder_y)
    a = (tmask.astype(np.float32) / 255.0)[..., None]
    L.rgb = (L.rgb * (1 - a) + tex * a).astype(np.uint8)
    L.mask = np.maximum(L.mask, tmask)
    if pattern == "logo":
        lc, ls = (cx, shoulder_y + 0.3 * (hip - shoulder_y)), 0.45 * sw
        if ident.logo_shape == 0:
            L.ellipse(lc, (ls, ls), ident.upper2)
        elif ident.logo_shape == 1:
            L.rect(lc[0] - ls, lc[1] - ls, lc[0] + ls, lc[1] + ls, ident.upper2)
        else:
            L.poly([(lc[0], lc[1] - ls), (lc[0] + ls, lc[1] + ls), (lc[0] - ls, lc[1] + ls)], ident.upper2)

    if open_jacket and view == "front":  # the shirt between the open jacket's halves; no random draw
        L.poly([(cx - 0.4 * sw, shoulder_y), (cx + 0.4 * sw, shoulder_y), (cx + 0.45 * hw, hip),
                (cx - 0.45 * hw, hip)], ident.upper2)

    if ident.backpack is not None and view == "back":
        L.poly([(cx - 0.6 * sw, shoulder_y + 0.04 * hp), (cx + 0.6 * sw, shoulder_y + 0.04 * hp),
                (cx + 0.55 * sw, hip - 0.05 * hp), (cx - 0.55 * sw, hip - 0.05 * hp)], ident.backpack)
    elif ident.backpack is not None and view == "front":
        for s in (-1, 1):
            L.line((cx + s * 0.6 * sw, shoulder_y), (cx + s * 0.55 * sw, hip - 0.08 * hp), 0.35 * limb, ident.backpack)

    # Arms: sleeve in the upper colour, forearm skin for short sleeves, a hand at the end.
    arms = [(-1, -swing), (1, swing)] if not side else [(0, swing * 2)]
    for s, sv in arms:
        sh = np.array([cx + s * (sw + 0.3 * limb), shoulder_y + 0.3 * limb])
        hand = np.array([cx + s * (sw + 0.6 * limb) + sv, hip + 0.02 * hp])
        elbow = sh + (hand - sh) * 0.5
        L.line(sh, hand, limb, ident.skin)
        L.line(sh, elbow if ident.short_sleeves else hand - (hand - sh) * 0.1, limb * 1.1, upper)
        L.ellipse(hand, (0.55 * limb, 0.6 * limb), ident.skin)

    if ident.bag is not None:
        # A shoulder bag: strap across the chest, bag at the hip on the carrying side.
        s = -ident.bag_side if view == "front" else ident.bag_side
        if side:
            s = 0.3
        L.line((cx - s * sw, shoulder_y), (cx + s * 1.1 * hw, hip - 0.02 * hp), 0.3 * limb, ident.bag)
        bx = cx + s * 1.1 * hw
        L.rect(bx - 0.05 * hp, hip - 0.05 * hp, bx + 0.05 * hp, hip + 0.05 * hp, ident.bag)
    if ident.scarf is not None:
        L.poly([(cx - 0.75 * sw, neck - 0.01 * hp), (cx + 0.75 * sw, neck - 0.01 * hp), (cx + 0.7 * sw, neck + 0.045 * hp),
                (cx - 0.7 * sw, neck + 0.045 * hp)], ident.scarf)
        if view == "front":
            L.line((cx + 0.3 * sw, neck), (cx + 0.35 * sw, neck + 0.16 * hp), 0.5 * limb, ident.scarf)

    # Head: hair first, then the face where it is visible from this view.
    if ident.long_hair and side:  # hangs behind the head, so drawn before the face
        L.poly([(head_c[0] - 0.95 * r, top + r), (head_c[0] + 0.1 * r, top + r),
                (head_c[0] + 0.05 * r, neck + 0.08 * hp), (head_c[0] - 0.9 * r, neck + 0.08 * hp)], ident.hair)
    L.ellipse(head_c, (0.88 * r, r), ident.hair)
    if view == "front":
        L.ellipse((head_c[0], head_c[1] + 0.18 * r), (0.78 * r, 0.82 * r), ident.skin)
    elif side:
        L.ellipse((head_c[0] + 0.25 * r, head_c[1] + 0.15 * r), (0.6 * r, 0.82 * r), ident.skin)
    if ident.long_hair and view == "back":
        L.poly([(cx - 0.95 * r, top + r), (cx + 0.95 * r, top + r), (cx + 0.9 * r, neck + 0.08 * hp),
                (cx - 0.9 * r, neck + 0.08 * hp)], ident.hair)
    if ident.hat is not None:
        L.ellipse((head_c[0], head_c[1] - 0.2 * r), (0.95 * r, 0.85 * r), ident.hat, 180, 360)
        L.line((head_c[0] - 1.05 * r, head_c[1] - 0.2 * r), (head_c[0] + (1.5 if side else 1.05) * r, head_c[1] - 0.2 * r),
               0.25 * r, ident.hat)
    return L


def _torso_texture(pattern: str, c1: Colour, c2: Colour, period: float, h: int, w: int,
                   cx: float, y0: float) -> np.ndarray:
    """Full-frame texture of the torso pattern (the torso mask picks the visible part)."""
    a = np.array(c1, np.float32)
    if pattern in ("solid", "logo"):
        return np.broadcast_to(a, (h, w, 3))
    b = np.array(c2, np.float32)
    period = max(period, 2.0)
    rows = ((np.arange(h) - y0) // period % 2).astype(bool)[:, None]
    cols = ((np.arange(w) - cx + period / 2) // period % 2).astype(bool)[None, :]
    if pattern == "hstripes":
        sel = np.broadcast_to(rows, (h, w))
    elif pattern == "vstripes":
        sel = np.broadcast_to(cols, (h, w))
    else:  # checks
        sel = rows ^ cols
    return np.where(sel[..., None], b, a)


def render_image(ident: IdentitySpec, cam: CameraSpec, rng: np.random.Generator,
                 size: Tuple[int, int] = (128, 64), open_jacket: bool = False) -> np.ndarray:
    """One ``H x W x 3`` uint8 RGB crop of `ident` seen by `cam`; all randomness from `rng`
    (`open_jacket`: RenderStyle.open_jackets)."""
    H, W = int(size[0]), int(size[1])
    h, w = H * _SS, W * _SS
    view = VIEWS[rng.choice(3, p=np.asarray(cam.view_p) / sum(cam.view_p))]
    scale = float(np.clip(cam.scale * rng.uniform(0.88, 1.1), 0.6, 1.0))
    cx = w / 2 + rng.uniform(-0.13, 0.13) * w
    top_pad = (1 - scale) * h * rng.uniform(0.1, 0.9) + rng.normal(0, 0.03) * h
    img = composite(_draw_person(ident, view, rng, h, w, scale, cx, top_pad, open_jacket), view, cx, cam, rng)
    if rng.random() < cam.occluder_p:  # a post, a bench or a passer-by's edge
        oc = np.array(_jitter_colour(cam.occluder, rng, 10), np.float32)
        if rng.random() < 0.5:
            y = int(rng.uniform(0.68, 0.88) * h)
            img[y:] = oc
        else:
            x = int(rng.uniform(0.0, 0.85) * w)
            img[:, x : x + int(rng.uniform(0.1, 0.22) * w)] = oc
    img = cv2.resize(img, (W, H), interpolation=cv2.INTER_AREA)
    return apply_camera_look(img, cam, rng)


def composite(layer: _Layer, view: str, cx: float, cam: CameraSpec, rng: np.random.Generator) -> np.ndarray:
    """`layer` (a figure centred on x = `cx`) over `cam`'s background, as float32 ``h x w x 3``; a side
    view faces left half the time (mirrored about the figure's centre line, not the frame's)."""
    rgb, mask = layer.rgb, layer.mask
    h, w = mask.shape
    if view == "side" and rng.random() < 0.5:
        M = np.float32([[1, 0, int(round(2 * cx)) - w], [0, 1, 0]])
        rgb = cv2.warpAffine(cv2.flip(rgb, 1), M, (w, h), flags=cv2.INTER_NEAREST)
        mask = cv2.warpAffine(cv2.flip(mask, 1), M, (w, h), flags=cv2.INTER_NEAREST)
    bg = draw_background(cam, rng, (h, w))
    a = (mask.astype(np.float32) / 255.0)[..., None]
    return bg * (1 - a) + rgb.astype(np.float32) * a


def apply_camera_look(img: np.ndarray, cam: CameraSpec, rng: np.random.Generator, jitter: bool = True) -> np.ndarray:
    """`img` (float32 ``H x W x 3`` RGB, 0-255) as `cam` sees it: its gain, colour cast and
    horizontal light slope, its blur and its pixel noise; returns uint8.

    With `jitter` (crops), gain and blur vary per image around the camera's values; without it
    (video frames) they stay the camera's own, so consecutive frames do not flicker. Only the
    noise is then drawn from `rng`.
    """
    W = img.shape[1]
    # Illumination: per-image gain around the camera's, its colour cast and a horizontal slope.
    gain = cam.gain * rng.uniform(0.88, 1.12) if jitter else cam.gain
    light = gain * (1 + cam.light_slope * (np.linspace(-0.5, 0.5, W, dtype=np.float32)))
    img = img * light[None, :, None] * np.asarray(cam.cast, np.float32)
    sigma = cam.blur * rng.uniform(0.7, 1.3) if jitter else cam.blur
    if sigma > 0.3:
        img = cv2.GaussianBlur(img, (0, 0), sigma)
    img += rng.normal(0, cam.noise, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def draw_person(ident: IdentitySpec, view: str, rng: np.random.Generator, size: Tuple[int, int],
                facing_left: bool = False) -> Tuple[np.ndarray, np.ndarray]:
    """The person alone in a box of `size` (H, W): ``(rgb, alpha)``, uint8 ``H x W x 3`` RGB and
    float32 ``H x W`` coverage in [0, 1] (0 where the background shows), for pasting into a scene.

    Drawn as in the crops (twice the resolution, shrunk with area averaging), centred, the
    figure 0.9 of the box height with its feet near the bottom edge; `facing_left` mirrors a
    side view. `view` is one of VIEWS.
    """
    if view not in VIEWS:
        raise ValueError(f"view {view!r} is not one of {', '.join(VIEWS)}; pick one of them")
    H, W = int(size[0]), int(size[1])
    h, w = H * _SS, W * _SS
    person = _draw_person(ident, view, rng, h, w, 0.9, w / 2, 0.05 * h)
    rgb, mask = person.rgb, person.mask
    if facing_left:  # the figure is centred, so mirroring the box mirrors it about its centre line
        rgb, mask = rgb[:, ::-1], mask[:, ::-1]
    # The layer's colours are already weighted by coverage (drawn over black), so the shrunk
    # colours are divided by the shrunk coverage: then ``scene * (1 - alpha) + rgb * alpha`` holds.
    rgb = cv2.resize(np.ascontiguousarray(rgb).astype(np.float32), (W, H), interpolation=cv2.INTER_AREA)
    alpha = cv2.resize(mask.astype(np.float32) / 255.0, (W, H), interpolation=cv2.INTER_AREA)
    rgb = np.clip(rgb / np.maximum(alpha, 1e-3)[..., None], 0, 255)
    return rgb.astype(np.uint8), np.clip(alpha, 0.0, 1.0)


def sample_cameras(seed: int, num_cameras: int, style: RenderStyle = _DEMO) -> List[CameraSpec]:
    """The cameras of a dataset with generator seed `seed`."""
    cams = [sample_camera(np.random.default_rng([seed, 2, c]), style) for c in range(num_cameras)]
    if style.fixed_views:
        cams = [replace(cam, view_p=tuple(float(v == c % len(VIEWS)) for v in range(len(VIEWS))))
                for c, cam in enumerate(cams)]
    return cams
