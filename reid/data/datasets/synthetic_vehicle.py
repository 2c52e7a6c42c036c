"""Procedural drawing of vehicle-like crops for the synthetic dataset (DATASETS.SYNTHETIC.OBJECT vehicle).

Identity evidence (kept consistent across cameras): body colour (12 hues or white/black/grey, as
in the people's garments), body type (sedan, hatchback, SUV, van, pickup) and its proportions, a
two-tone roof, a stripe along the body, a roof rack, a rear spoiler, a door decal (seen from the
side only), the rim colour and the shape of the lights. Camera nuisance comes from the people's
cameras (synthetic_render.CameraSpec): background, illumination, blur, noise, scale, position and
occluders; each camera's preferred view (front / back / side) becomes the vehicle's front / rear /
side, and a side view faces left or right.

Drawn at twice the output size and shrunk with area averaging, like the people; every draw comes
from the numpy Generator passed in, so an image is a pure function of its seed. The people's
drawing (synthetic_render.py) is untouched: their images stay byte-identical.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import cv2
import numpy as np

from .synthetic_render import (
    _DEMO, _SS, VIEWS, CameraSpec, Colour, RenderStyle, _Layer, _garment_colour, _jitter_colour, apply_camera_look,
    composite,
)

#: Bump when the vehicle drawing changes: it is part of the vehicle datasets' cache key.
VEHICLE_RENDER_VERSION = 1
#: Body types and their proportions: (body height, cabin height, cabin start, cabin end) as
#: fractions of the vehicle's length; the cabin spans [start, end] of the length, front at 0.
BODY_TYPES = {
    "sedan": (0.2, 0.15, 0.28, 0.72),
    "hatchback": (0.21, 0.16, 0.3, 0.92),
    "suv": (0.27, 0.18, 0.24, 0.94),
    "van": (0.3, 0.2, 0.12, 0.97),
    "pickup": (0.24, 0.17, 0.22, 0.55),
}
_RIMS = ((200, 200, 205), (60, 60, 65), (210, 180, 90), (150, 150, 160))
_GLASS = (40, 55, 70)
_TYRE = (22, 22, 24)


@dataclass(frozen=True)
class VehicleSpec:
    """Appearance of one vehicle (lengths are fractions of its drawn length)."""

    body: Colour
    body_type: str
    length: float  # of the frame width in a side view
    width: float  # front/rear width, of the frame width
    roof: Colour  # the body colour unless two-tone
    stripe: Optional[Colour]
    rack: bool
    spoiler: bool
    decal: Optional[Colour]
    decal_shape: int  # 0 disc, 1 square
    rims: Colour
    round_lights: bool


def sample_vehicle(rng: np.random.Generator, style: RenderStyle = _DEMO) -> VehicleSpec:
    """Draw a random vehicle; a third are white, black or grey, as on real roads."""
    body = _garment_colour(rng, 0.35, style)
    opt = lambda p: _garment_colour(rng, 0.3, style) if rng.random() < p else None  # noqa: E731
    two_tone = opt(0.2)
    return VehicleSpec(
        body=body,
        body_type=list(BODY_TYPES)[int(rng.integers(len(BODY_TYPES)))],
        length=float(rng.uniform(0.82, 0.95)),
        width=float(rng.uniform(0.58, 0.72)),
        roof=two_tone if two_tone is not None else body,
        stripe=opt(0.3),
        rack=bool(rng.random() < 0.25),
        spoiler=bool(rng.random() < 0.2),
        decal=opt(0.25),
        decal_shape=int(rng.integers(2)),
        rims=_RIMS[int(rng.integers(len(_RIMS)))],
        round_lights=bool(rng.random() < 0.5),
    )


def _draw_side(L: _Layer, v: VehicleSpec, body: Colour, x0: float, ground: float, length: float) -> None:
    """Side view facing right (the front at x0 + length)."""
    bh, ch, c0, c1 = BODY_TYPES[v.body_type]
    wheel_r = 0.085 * length
    bottom = ground - 0.6 * wheel_r
    top = bottom - bh * length
    roof_y = top - ch * length
    front = x0 + length
    cab_rear, cab_front = front - c1 * length, front - c0 * length
    L.rect(x0, top, front, bottom, body)
    lean = 0.05 * length
    L.poly([(cab_rear, top), (cab_front + lean, top), (cab_front - lean, roof_y), (cab_rear + 0.3 * lean, roof_y)],
           v.roof)
    inset = 0.18 * ch * length
    mid = (cab_rear + cab_front) / 2
    for a, b in ((cab_rear + inset, mid - 0.5 * inset), (mid + 0.5 * inset, cab_front - 0.2 * inset)):
        L.poly([(a, top - 0.15 * inset), (b + 0.6 * lean, top - 0.15 * inset), (b - 0.2 * lean, roof_y + inset),
                (a + 0.3 * lean, roof_y + inset)], _GLASS)
    if v.stripe is not None:
        L.rect(x0, top + 0.35 * bh * length, front, top + 0.5 * bh * length, v.stripe)
    if v.decal is not None:
        c, r = (mid, top + 0.5 * bh * length), 0.06 * length
        L.ellipse(c, (r, r), v.decal) if v.decal_shape == 0 else L.rect(c[0] - r, c[1] - r, c[0] + r, c[1] + r, v.decal)
    if v.rack:
        L.rect(cab_rear, roof_y - 0.02 * length, cab_front - lean, roof_y - 0.008 * length, (70, 70, 75))
    if v.spoiler:
        L.rect(x0 - 0.01 * length, top - 0.035 * length, x0 + 0.08 * length, top - 0.015 * length, body)
    L.rect(front - 0.03 * length, top + 0.15 * bh * length, front, top + 0.35 * bh * length, (250, 245, 210))
    L.rect(x0, top + 0.15 * bh * length, x0 + 0.025 * length, top + 0.35 * bh * length, (200, 30, 30))
    for wx in (x0 + 0.2 * length, front - 0.2 * length):
        L.ellipse((wx, ground - wheel_r), (wheel_r, wheel_r), _TYRE)
        L.ellipse((wx, ground - wheel_r), (0.55 * wheel_r, 0.55 * wheel_r), v.rims)


def _draw_end(L: _Layer, v: VehicleSpec, body: Colour, cx: float, ground: float, width: float, length: float,
              front: bool) -> None:
    """Front or rear view, centred on cx; the body is `width` wide, as tall as in the side view."""
    bh, ch, _, _ = BODY_TYPES[v.body_type]
    half = width / 2
    tyre_h = 0.09 * length
    bottom = ground - 0.5 * tyre_h
    top = bottom - bh * length
    roof_y = top - ch * length
    for s in (-1, 1):  # tyres under the body's corners
        L.rect(cx + s * 0.78 * half - 0.1 * half, ground - tyre_h, cx + s * 0.78 * half + 0.1 * half, ground, _TYRE)
    L.rect(cx - half, top, cx + half, bottom, body)
    L.poly([(cx - 0.92 * half, top), (cx + 0.92 * half, top), (cx + 0.75 * half, roof_y), (cx - 0.75 * half, roof_y)],
           v.roof)
    glass_top = roof_y + 0.12 * ch * length
    L.poly([(cx - 0.82 * half, top - 0.06 * ch * length), (cx + 0.82 * half, top - 0.06 * ch * length),
            (cx + 0.7 * half, glass_top), (cx - 0.7 * half, glass_top)], _GLASS)
    if v.stripe is not None:  # a stripe along the body shows as a band over the bonnet / boot
        L.rect(cx - 0.12 * half, top, cx + 0.12 * half, top + 0.3 * bh * length, v.stripe)
    if v.rack:
        L.rect(cx - 0.7 * half, roof_y - 0.02 * length, cx + 0.7 * half, roof_y - 0.008 * length, (70, 70, 75))
    if v.spoiler and not front:
        L.rect(cx - 0.8 * half, top - 0.04 * length, cx + 0.8 * half, top - 0.015 * length, body)
    light = (250, 245, 210) if front else (200, 30, 30)
    ly = top + 0.3 * bh * length
    for s in (-1, 1):
        lx = cx + s * 0.72 * half
        if v.round_lights:
            L.ellipse((lx, ly), (0.12 * half, 0.12 * half), light)
        else:
            L.rect(lx - 0.16 * half, ly - 0.07 * half, lx + 0.16 * half, ly + 0.07 * half, light)
    if front:  # the grille
        L.rect(cx - 0.4 * half, ly - 0.06 * half, cx + 0.4 * half, ly + 0.12 * half, (35, 35, 38))
    L.rect(cx - 0.2 * half, bottom - 0.25 * bh * length, cx + 0.2 * half, bottom - 0.1 * bh * length,
          (235, 235, 235))  # the plate: the same for every vehicle, no identity in it


def draw_vehicle(v: VehicleSpec, view: str, rng: np.random.Generator, h: int, w: int, scale: float,
                 cx: float, ground: float) -> _Layer:
    """The vehicle alone on an ``h x w`` layer: `view` one of VIEWS ("back" = the rear), its size
    `scale` x the frame width (side view), centred on `cx`, wheels on the line y = `ground`."""
    if view not in VIEWS:
        raise ValueError(f"view {view!r} is not one of {', '.join(VIEWS)}; pick one of them")
    L = _Layer(h, w)
    body = _jitter_colour(v.body, rng, 6)
    length = scale * v.length * w
    if view == "side":
        _draw_side(L, v, body, cx - length / 2, ground, length)
    else:
        _draw_end(L, v, body, cx, ground, scale * v.width * w, length, front=view == "front")
    return L


def render_vehicle(v: VehicleSpec, cam: CameraSpec, rng: np.random.Generator,
                   size: Tuple[int, int] = (64, 64)) -> np.ndarray:
    """One ``H x W x 3`` uint8 RGB crop of vehicle `v` seen by `cam`; all randomness from `rng`."""
    H, W = int(size[0]), int(size[1])
    h, w = H * _SS, W * _SS
    view = VIEWS[rng.choice(3, p=np.asarray(cam.view_p) / sum(cam.view_p))]
    scale = float(np.clip(cam.scale * rng.uniform(0.9, 1.08), 0.6, 1.0))
    cx = w / 2 + rng.uniform(-0.06, 0.06) * w
    ground = h * (0.78 + rng.uniform(-0.06, 0.08))
    img = composite(draw_vehicle(v, view, rng, h, w, scale, cx, ground), view, cx, cam, rng)
    if rng.random() < cam.occluder_p:  # a pole or another vehicle's edge at one side
        x = int(rng.uniform(0.0, 0.85) * w)
        img[:, x : x + int(rng.uniform(0.06, 0.15) * w)] = np.array(_jitter_colour(cam.occluder, rng, 10), np.float32)
    img = cv2.resize(img, (W, H), interpolation=cv2.INTER_AREA)
    return apply_camera_look(img, cam, rng)


__all__ = ["BODY_TYPES", "VEHICLE_RENDER_VERSION", "VehicleSpec", "draw_vehicle", "render_vehicle", "sample_vehicle"]
