"""Pictures of what a tracker (and the model behind it) did: each frame with every track's box, id
and colour drawn, as a video a person can watch (``--save-video``) or as frame images
(``--save-frames``).

A track keeps its colour in every frame and, after tools/link_cameras.py, in every camera (the
colour follows the global id). Files are written under a hidden name and renamed when complete,
so a run stopped mid-sequence leaves no video or frame folder that looks finished.
"""
from __future__ import annotations

import colorsys
import os
import shutil
from typing import List, Optional, Sequence as Seq, Tuple

import numpy as np

from .frames import clip_boxes, read_frame
from .mot_files import MOTRows, read_results
from .sequences import Sequence

#: The container and codec of --save-video (OpenCV's FFmpeg writes MPEG-4 Part 2 without extra codecs).
VIDEO_EXT, FOURCC = ".mp4", "mp4v"
#: Box outline in pixels.
THICKNESS = 2
_GOLDEN = 0.618033988749895


def id_colour(track_id: int) -> Tuple[int, int, int]:
    """A BGR colour for `track_id`: hues a golden-ratio step apart, so neighbouring ids differ at a glance."""
    hue = (int(track_id) * _GOLDEN) % 1.0
    r, g, b = colorsys.hsv_to_rgb(hue, 0.85, 1.0)
    return int(b * 255), int(g * 255), int(r * 255)


def draw_tracks(image: np.ndarray, rows: MOTRows) -> np.ndarray:
    """`image` (BGR, changed in place and returned) with each row's box outlined in its id's colour and
    the id written on a patch of that colour above the box (inside it when the box touches the top)."""
    import cv2

    height, width = image.shape[:2]
    for (x0, y0, x1, y1), track in zip(clip_boxes(rows.boxes, width, height), rows.track_id):
        colour = id_colour(int(track))
        cv2.rectangle(image, (int(x0), int(y0)), (max(int(x1) - 1, int(x0)), max(int(y1) - 1, int(y0))), colour,
                      THICKNESS)
        text = str(int(track))
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.4, 1)
        top = int(y0) - th - base - 2 if y0 >= th + base + 2 else int(y0)
        cv2.rectangle(image, (int(x0), top), (int(x0) + tw + 4, top + th + base + 2), colour, cv2.FILLED)
        cv2.putText(image, text, (int(x0) + 2, top + th + 1), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1,
                    cv2.LINE_AA)
    return image


def _frames(sequence: Sequence, rows: MOTRows):
    """Every frame of `sequence`, in order, with `rows`' tracks drawn on it."""
    order = np.argsort(rows.frame, kind="stable")
    frames = rows.frame[order]
    for frame in range(1, sequence.length + 1):
        lo, hi = np.searchsorted(frames, [frame, frame + 1])
        yield frame, draw_tracks(read_frame(sequence, frame), rows.select(order[lo:hi]))


def _hidden(path: str) -> str:
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.partial{os.path.splitext(name)[1]}")


def write_video(sequence: Sequence, rows: MOTRows, path: str) -> str:
    """`sequence` with `rows`' tracks drawn, as an MPEG-4 video at the sequence's frame rate; returns `path`."""
    import cv2

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = _hidden(path)
    writer = cv2.VideoWriter(tmp, cv2.VideoWriter_fourcc(*FOURCC), float(sequence.frame_rate),
                             (sequence.width, sequence.height))
    try:
        if not writer.isOpened():
            raise OSError(f"{path}: OpenCV cannot write {FOURCC} video here (an opencv build without FFmpeg?); use "
                          "--save-frames instead.")
        for _, image in _frames(sequence, rows):
            writer.write(image)
    except BaseException:
        writer.release()
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    writer.release()
    os.replace(tmp, path)
    return path


def write_frames(sequence: Sequence, rows: MOTRows, folder: str) -> str:
    """`sequence` with `rows`' tracks drawn, as ``folder/000001.jpg ...``; returns `folder`."""
    import cv2

    tmp = _hidden(folder.rstrip(os.sep))
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        for frame, image in _frames(sequence, rows):
            if not cv2.imwrite(os.path.join(tmp, f"{frame:06d}.jpg"), image):
                raise OSError(f"{folder}: frame {frame} could not be written; check the free disk space.")
        if os.path.isdir(folder):
            shutil.rmtree(folder)  # the previous run's pictures of this sequence, in the tool's own folder
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def write_pictures(sequence: Sequence, rows: MOTRows, folder: str, video: bool, frames: bool) -> List[str]:
    """The pictures asked for of one sequence's tracks, named after it in `folder`: ``<name>.mp4``
    (`video`) and ``<name>/`` frame images (`frames`). Returns the paths written."""
    written: List[Optional[str]] = [
        write_video(sequence, rows, os.path.join(folder, sequence.name + VIDEO_EXT)) if video else None,
        write_frames(sequence, rows, os.path.join(folder, sequence.name)) if frames else None]
    return [p for p in written if p]


def write_result_pictures(sequences: Seq[Sequence], folder: str, video: bool, frames: bool) -> List[str]:
    """:func:`write_pictures` of each sequence's result file ``folder/<name>.txt``, into `folder`."""
    return [path for s in sequences for path in
            write_pictures(s, read_results(os.path.join(folder, s.name + ".txt"), s), folder, video, frames)]


__all__ = ["FOURCC", "VIDEO_EXT", "draw_tracks", "id_colour", "write_frames", "write_pictures", "write_result_pictures",
           "write_video"]
