"""Tiny MOTChallenge sequences written by hand for the tracking tests."""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

import cv2
import numpy as np

WIDTH, HEIGHT = 96, 64


def frame_pixels(seed: int) -> np.ndarray:
    """The BGR pixels of a frame: random, so that any crop is unique."""
    return np.random.default_rng(seed).integers(0, 256, (HEIGHT, WIDTH, 3), dtype=np.uint8)


def write_sequence(folder: str, length: int = 4, gt: Optional[str] = None, det: Optional[str] = None,
                   ext: str = ".png", extra: Optional[Dict[str, str]] = None, seed: int = 0,
                   frames: Optional[Sequence[int]] = None) -> str:
    """A sequence folder: seqinfo.ini (plus `extra` keys), frames 1..length (or `frames`), gt/det text."""
    os.makedirs(os.path.join(folder, "img1"), exist_ok=True)
    keys = {"name": os.path.basename(folder), "imDir": "img1", "frameRate": "10", "seqLength": str(length),
            "imWidth": str(WIDTH), "imHeight": str(HEIGHT), "imExt": ext, **(extra or {})}
    with open(os.path.join(folder, "seqinfo.ini"), "w") as f:
        f.write("[Sequence]\n" + "".join(f"{k}={v}\n" for k, v in keys.items()))
    for i in (frames if frames is not None else range(1, length + 1)):
        assert cv2.imwrite(os.path.join(folder, "img1", f"{i:06d}{ext}"), frame_pixels(seed * 1000 + i))
    for sub, text in (("gt", gt), ("det", det)):
        if text is not None:
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
            with open(os.path.join(folder, sub, f"{sub}.txt"), "w") as f:
                f.write(text)
    return folder
