"""Frames of a sequence and the boxes cut from them: each frame image is read once for all its boxes.

Boxes partly outside the image are clipped to it (MOT ground truth keeps people who walk out of
the picture); a frame whose size is not the one seqinfo.ini declares is refused, since every box
of that sequence would then be cut from the wrong place.
"""
from __future__ import annotations

from typing import Iterator, List, Tuple

import numpy as np

from .sequences import Sequence, SequenceError


def clip_boxes(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """MOT boxes ``[N, 4]`` (left, top, width, height) as integer pixel ranges ``[N, 4]`` (x0, y0,
    x1, y1) clipped to a ``width`` x ``height`` image: ``image[y0:y1, x0:x1]`` is the crop.

    Coordinates are taken as 0-based array positions, as trackers and detectors write them
    (MOTChallenge's own ground truth counts from 1: its crops sit one pixel off, which a re-ID
    model's resize does not notice; the scores compare boxes in one convention and are unaffected)."""
    x0 = np.clip(np.floor(boxes[:, 0]), 0, width)
    y0 = np.clip(np.floor(boxes[:, 1]), 0, height)
    x1 = np.clip(np.ceil(boxes[:, 0] + boxes[:, 2]), 0, width)
    y1 = np.clip(np.ceil(boxes[:, 1] + boxes[:, 3]), 0, height)
    return np.stack([x0, y0, x1, y1], axis=1).astype(np.int64)


def read_frame(sequence: Sequence, frame: int) -> np.ndarray:
    """Frame `frame` of `sequence` as BGR uint8 (OpenCV's order); one line naming the file when
    it is unreadable or not the size seqinfo.ini declares."""
    import cv2

    path = sequence.frame_path(int(frame))
    image = cv2.imread(path, cv2.IMREAD_COLOR)
    if image is None:
        raise OSError(f"{path}: not a readable image; replace the frame (every frame of a sequence is read).")
    if image.shape[:2] != (sequence.height, sequence.width):
        raise SequenceError(f"{path}: {image.shape[1]}x{image.shape[0]} pixels, but seqinfo.ini of "
                            f"{sequence.name} says imWidth x imHeight = {sequence.width}x{sequence.height}; "
                            "correct seqinfo.ini.")
    return image


def frame_crops(sequence: Sequence, frames: np.ndarray, pixels: np.ndarray
                ) -> Iterator[Tuple[int, np.ndarray, List[np.ndarray]]]:
    """For each frame of `frames`, in increasing order: ``(frame, row indices, BGR crops)`` of the
    rows in that frame, cut as ``image[y0:y1, x0:x1]`` of their `pixels` (:func:`clip_boxes`)."""
    order = np.argsort(frames, kind="stable")
    sorted_frames = np.asarray(frames)[order]
    starts = np.flatnonzero(np.r_[True, sorted_frames[1:] != sorted_frames[:-1]]) if len(order) else []
    ends = list(starts[1:]) + [len(order)]
    for start, end in zip(starts, ends):
        rows = order[start:end]
        image = read_frame(sequence, int(sorted_frames[start]))
        yield int(sorted_frames[start]), rows, [image[y0:y1, x0:x1] for x0, y0, x1, y1 in pixels[rows]]


__all__ = ["clip_boxes", "frame_crops", "read_frame"]
