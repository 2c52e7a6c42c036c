"""The rendering styles of the synthetic dataset (DATASETS.SYNTHETIC.STYLE): one domain each.

Kept apart from the drawing code (synthetic_render.py) so that a new domain is one entry here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class RenderStyle:
    """What a domain's rendering draws from: garment colours and the cameras' look.

    "demo" is the demo's dataset. "shift" is a second domain for learning without labels
    (docs/benchmarks.md): garment hues turned by half a hue step (15 degrees, between the demo's
    12 hues) and paler (saturation x 0.8); only dim textured and tiled backgrounds (value
    0.15-0.55 instead of 0.25-0.9); darker, more colour-cast, blurrier and noisier cameras.
    "views" is a shift whose cameras differ the way real ones do (issue: plain clustering then
    groups by camera): every camera sees people from one side only (camera c: VIEWS[c % 3], so
    front and back views never meet in a camera), people wear open jackets whose front shows a
    shirt (the pattern's second colour) that the back hides, and the casts are strong.
    """

    hue_offset: float = 0.0  # added to every saturated garment hue, as a fraction of the circle
    saturation: float = 1.0  # multiplies the saturation of saturated garment colours
    backgrounds: Tuple[str, ...] = ("gradient", "noise", "tiles", "stripes")
    bg_value: Tuple[float, float] = (0.25, 0.9)  # brightness range of backgrounds, floor, clutter
    gain: Tuple[float, float] = (0.72, 1.22)
    cast: Tuple[float, float] = (0.92, 1.08)
    blur: Tuple[float, float] = (0.0, 0.9)
    noise: Tuple[float, float] = (1.0, 6.0)
    fixed_views: bool = False  # camera c sees only VIEWS[c % 3] (else a dominant view 70% of the time)
    open_jackets: bool = False  # the front view shows a shirt in the second colour down the torso's middle


#: name -> style (DATASETS.SYNTHETIC.STYLE); "demo" draws exactly what RENDER_VERSION 4 drew.
STYLES: Dict[str, RenderStyle] = {
    "demo": RenderStyle(),
    "shift": RenderStyle(hue_offset=1 / 24, saturation=0.8, backgrounds=("noise", "tiles"), bg_value=(0.15, 0.55),
                         gain=(0.65, 1.05), cast=(0.86, 1.14), blur=(0.3, 1.1), noise=(2.0, 7.0)),
    "views": RenderStyle(hue_offset=1 / 24, saturation=0.8, backgrounds=("noise", "tiles", "stripes"),
                         bg_value=(0.15, 0.7), gain=(0.6, 1.1), cast=(0.75, 1.25), blur=(0.3, 1.1), noise=(2.0, 7.0),
                         fixed_views=True, open_jackets=True),
}


__all__ = ["STYLES", "RenderStyle"]
