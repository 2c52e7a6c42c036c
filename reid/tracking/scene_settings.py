"""The settings of synthetic multi-camera sequences (``tools/make_sequences.py``'s flags, one field each).

Light on purpose (no numpy): the program's ``--help`` shows these defaults before anything is loaded.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

_MAX_OCCUPANCY = 0.85  # most of a person's time that can be spent in view


def _flag(name: str) -> str:
    """The tool's flag of a setting: width and height are --size WxH."""
    return "--size WxH" if name in ("width", "height") else "--" + name.replace("_", "-")


@dataclass(frozen=True)
class SequenceSettings:
    """What :func:`make_sequences` draws; each field is the tool's flag of the same name."""

    cameras: int = 2
    identities: int = 16
    frames: int = 150  # per camera (synchronised)
    width: int = 640
    height: int = 360
    people_per_frame: float = 6.0  # mean people in view per camera (the target density)
    frame_rate: float = 10.0
    miss_rate: float = 0.1  # detections: miss probability of a fully visible person
    false_positives: float = 0.5  # detections: mean false boxes per frame
    jitter: float = 3.0  # detections: box edge noise std, pixels for a 100-pixel-tall person
    seed: int = 0
    scene: str = "synth"
    style: str = "demo"  # the renderer's RenderStyle (identity distribution and camera looks)

    def check(self) -> "SequenceSettings":
        """`self` when every setting is usable; otherwise a one-line ValueError naming it."""
        bounds = (("cameras", 1, 8), ("identities", 1, 1000), ("frames", 1, 100_000), ("width", 64, 4096),
                  ("height", 64, 4096), ("frame_rate", 1, 120), ("false_positives", 0, 50), ("jitter", 0, 50),
                  ("seed", 0, 2**63 - 1))
        for name, low, high in bounds:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) \
                    or not math.isfinite(value) or not low <= value <= high:
                raise ValueError(f"{name} {value!r} is out of range: it must lie in [{low}, {high}] "
                                 f"({_flag(name)}); pick a value there")
        for name in ("cameras", "identities", "frames", "width", "height", "seed"):
            if int(getattr(self, name)) != getattr(self, name):
                raise ValueError(f"{name} {getattr(self, name)!r} is not a whole number; give an integer")
        if not 0 <= self.miss_rate < 1:
            raise ValueError(f"miss_rate {self.miss_rate!r} is out of range: it must lie in [0, 1) (--miss-rate); "
                             "pick a probability below 1")
        most = _MAX_OCCUPANCY * self.identities / self.cameras
        if not 0 < self.people_per_frame <= most:
            raise ValueError(f"people_per_frame {self.people_per_frame!r} is not possible with {self.identities} "
                             f"identities in {self.cameras} cameras (at most {most:.2f}: people also spend time "
                             "between cameras); raise --identities or lower --people-per-frame")
        if not re.fullmatch(r"[A-Za-z0-9_.]+", self.scene) or self.scene.strip(".") == "":
            raise ValueError(f"scene {self.scene!r} is not a usable folder name; use letters, digits, '_' and '.'")
        from reid.data.datasets.synthetic_styles import STYLES  # loads torch with reid.data: only when checked

        if self.style not in STYLES:
            raise ValueError(f"style {self.style!r} is unknown; pick one of {', '.join(sorted(STYLES))}")
        return self


__all__ = ["SequenceSettings"]
