"""Video files for the tracking tests: the synthetic sequences encoded as MPEG-4, their boxes beside them."""
from __future__ import annotations

import os
import shutil
from typing import List

import numpy as np


def encode_video(frames: List[np.ndarray], path: str, fps: float = 10.0) -> str:
    """BGR `frames` as an MPEG-4 file at `path`."""
    import cv2

    height, width = frames[0].shape[:2]
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (width, height))
    assert writer.isOpened()
    for frame in frames:
        writer.write(frame)
    writer.release()
    return path


def read_video(path: str) -> List[np.ndarray]:
    """Every frame of the video `path`, decoded."""
    import cv2

    capture = cv2.VideoCapture(path)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(frame)
    capture.release()
    return frames


def sequences_as_videos(sequences_folder: str, out: str, fps: float = 10.0) -> List[str]:
    """Each sequence of `sequences_folder` as ``out/<name>.mp4`` with ``<name>.det.txt`` and
    ``<name>.gt.txt`` beside it; returns the videos, sorted."""
    import cv2

    from reid.tracking.sequences import find_sequences

    os.makedirs(out, exist_ok=True)
    videos = []
    for s in find_sequences(sequences_folder):
        frames = [cv2.imread(s.frame_path(k)) for k in range(1, s.length + 1)]
        videos.append(encode_video(frames, os.path.join(out, s.name + ".mp4"), fps))
        shutil.copyfile(s.det_path, os.path.join(out, s.name + ".det.txt"))
        shutil.copyfile(s.gt_path, os.path.join(out, s.name + ".gt.txt"))
    return videos
