"""Video files as MOTChallenge sequences: ``--video FILE ...`` (or a folder of videos) wherever the
tracking tools take ``--sequences``.

Each video is decoded once by OpenCV (FFmpeg underneath) into a sequence folder the tool owns,
``<output>/videos/<video name>/`` (seqinfo.ini, img1/000001.jpg ...), so every later step (crops,
the tracker's camera-motion compensation, annotated output) reads frames exactly as it reads a
MOTChallenge sequence. Beside each video its detections (``<name>.det.txt``, det.txt's rows) and,
where there is one, its ground truth (``<name>.gt.txt``) are copied in as det/det.txt and gt/gt.txt.
The videos given in one call are the cameras 1, 2, ... in that order (a folder's sorted by name),
and the videos of one folder are one scene (their ground truths share person ids).

A decoded folder records the sizes and times of the files it came from and is used again while
they are unchanged; decoding goes to a hidden folder renamed into place when complete, so a run
stopped mid-video leaves nothing that looks decoded.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
from typing import Callable, Dict, List, Optional, Sequence as Seq

from reid.utils.native_stderr import captured_stderr
from reid.utils.path_kinds import check_file, check_folder, file_problem, is_missing

from .sequences import MAX_SIDE, SEQINFO, Sequence, SequenceError, read_sequence

#: File endings read as videos when a folder is given.
VIDEO_EXTS = (".mp4", ".avi", ".mkv", ".mov", ".webm", ".m4v", ".mpg", ".mpeg", ".wmv")
#: The folder under a tool's --output holding the decoded videos.
VIDEO_FOLDER = "videos"
#: What a decoded folder records of its sources; a folder without it is not the tool's and is never replaced.
SOURCE_FILE = "source.json"
#: Frames per second beyond this are a broken container header, not a camera.
MAX_FPS = 1000.0
JPEG_QUALITY = 95
BESIDE = {"det": ".det.txt", "gt": ".gt.txt"}
Log = Callable[[str], None]


def video_name(path: str) -> str:
    """The sequence name of video `path`: its file name without the ending."""
    return os.path.splitext(os.path.basename(path))[0]


def find_videos(paths: Seq[str], need: Optional[str] = None) -> List[str]:
    """The video files of `paths` (files, or folders whose files with a :data:`VIDEO_EXTS` ending are
    taken, sorted), in order; one line for a missing path, a folder without videos, two videos of one
    name, or a video without the boxes `need` names beside it ("det": ``<name>.det.txt``, "gt":
    ``<name>.gt.txt``, None: none needed). Nothing is decoded yet."""
    found: List[str] = []
    for path in paths:
        if os.path.isdir(path):
            check_folder(path, "Video folder", "name a folder of video files.")
            inside = sorted(e.path for e in os.scandir(path) if e.is_file() and e.name.lower().endswith(VIDEO_EXTS))
            if not inside:
                raise SequenceError(f"--video {path}: a folder with no video file ({', '.join(VIDEO_EXTS)}); name the "
                                    "videos, or the folder that holds them.")
            found += inside
        else:
            found.append(check_file(path, "Video", "name a video file (.mp4, .avi, ...) or a folder of them.",
                                    missing_hint="check the path."))
    names: Dict[str, str] = {}
    for path in found:
        other = names.setdefault(video_name(path), path)
        if other != path:
            raise SequenceError(f"--video {other} and {path} would both be sequence {video_name(path)!r} (their "
                                "results share one file name); rename one of them.")
    for video in found:
        _check_detections(video, need)
    return found


def video_ground_truth(video: str) -> Optional[str]:
    """The ground truth beside `video` (``<name>.gt.txt``), or None."""
    path = os.path.splitext(video)[0] + BESIDE["gt"]
    return path if os.path.isfile(path) else None


def _stamp(path: str) -> Optional[List[int]]:
    """Size and modification time of `path` (None when nothing is there): what a decoded folder is checked against."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _sources(video: str, camera: int, scene: str) -> Dict[str, object]:
    stem = os.path.splitext(video)[0]
    return {"video": os.path.abspath(video), "camera": camera, "scene": scene, "stamps": {
        kind: _stamp(p) for kind, p in {"video": video, **{k: stem + end for k, end in BESIDE.items()}}.items()}}


def _check_detections(video: str, need: Optional[str]) -> None:
    """One line when the boxes the tool will track (`need`: "det" or "gt") are not beside `video`."""
    if need is None:
        return
    stem = os.path.splitext(video)[0]
    problem = file_problem(stem + BESIDE[need])
    if problem is not None and not is_missing(problem):  # a FIFO, a folder, a device where the text file goes
        raise SequenceError(f"{stem + BESIDE[need]} {problem}; put the MOTChallenge text file there, or remove it.")
    if problem is not None:
        what, other = (("its detections", f"or pass --detections gt to track its ground truth ({stem}.gt.txt)")
                       if need == "det" else ("its ground truth", "or track its detections (--detections det)"))
        raise SequenceError(f"{video}: no {stem + BESIDE[need]} beside it ({what}, MOTChallenge rows "
                            f"frame,id,x,y,w,h,conf); write them there, {other}.")


def _frame_rate(capture, video: str) -> float:
    import cv2

    fps = float(capture.get(cv2.CAP_PROP_FPS) or 0.0)
    if not (math.isfinite(fps) and 0.0 < fps <= MAX_FPS):
        raise SequenceError(f"{video}: the video states no usable frame rate ({fps:g} frames/s), which time limits "
                            "(--max-gap, transitions) need; re-mux it with one (ffmpeg -r 25 -i IN -c copy OUT).")
    return fps


def _decode(video: str, folder: str, info: Dict[str, object]) -> None:
    """Every frame of `video` as ``folder/img1/000001.jpg ...`` and seqinfo.ini; one line for a file OpenCV
    cannot read, a frame of another size, or frames larger than any camera's."""
    import cv2

    with captured_stderr() as said:  # FFmpeg's reason for a file it cannot open goes to descriptor 2
        capture = cv2.VideoCapture(video)
    try:
        if not capture.isOpened():
            # FFmpeg's last line, without its "[demuxer @ address]" prefix
            reason = re.sub(r"^\[[^]]*\]\s*", "", said.lines[-1].strip())[:200] if said.lines else ""
            why = f" ({reason})" if reason else ""
            raise SequenceError(f"{video}: not a video OpenCV can read{why}; convert it (ffmpeg -i IN OUT.mp4).")
        fps, count, size = _frame_rate(capture, video), 0, None
        os.makedirs(os.path.join(folder, "img1"))
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            count += 1
            shape = frame.shape[:2]
            if size is None:
                if max(shape) > MAX_SIDE:
                    raise SequenceError(f"{video}: frames of {shape[1]}x{shape[0]} pixels, larger than any camera's "
                                        f"(at most {MAX_SIDE}); scale the video down.")
                size = shape
            elif shape != size:
                raise SequenceError(f"{video}: frame {count} is {shape[1]}x{shape[0]} pixels, the first {size[1]}x"
                                    f"{size[0]}; re-encode it at one size (ffmpeg -i IN -vf scale=W:H OUT.mp4).")
            if not cv2.imwrite(os.path.join(folder, "img1", f"{count:06d}.jpg"), frame,
                               [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY]):
                raise OSError(f"{folder}: frame {count} of {video} could not be written; check the free disk space.")
    finally:
        capture.release()
    if not count:
        raise SequenceError(f"{video}: no frame could be decoded; check the file (ffprobe {video}).")
    with open(os.path.join(folder, SEQINFO), "w", encoding="utf-8") as f:
        # no name=: the folder's name is the video's, whatever characters it holds
        f.write(f"[Sequence]\nimDir=img1\nframeRate={fps!r}\nseqLength={count}\n"
                f"imWidth={size[1]}\nimHeight={size[0]}\nimExt=.jpg\ncamera={info['camera']}\nscene={info['scene']}\n")


def _copy_beside(video: str, folder: str) -> None:
    stem = os.path.splitext(video)[0]
    for kind, end in BESIDE.items():
        if os.path.isfile(stem + end):
            os.makedirs(os.path.join(folder, kind), exist_ok=True)
            shutil.copyfile(stem + end, os.path.join(folder, kind, kind + ".txt"))


def _recorded(folder: str) -> Optional[Dict[str, object]]:
    try:
        with open(os.path.join(folder, SOURCE_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def video_sequence(video: str, output: str, camera: int, log: Log = print) -> Sequence:
    """`video` as a sequence under ``output/videos/`` (decoded now, or the folder of an earlier run whose
    sources are unchanged); camera `camera`, scene the name of the video's folder."""
    folder_name = os.path.basename(os.path.dirname(os.path.abspath(video)))
    scene = re.sub(r"[^\w.-]", "_", folder_name) or "videos"  # an INI value: no comment or line characters
    sources = _sources(video, camera, scene)
    folder = os.path.join(output, VIDEO_FOLDER, video_name(video))
    if os.path.lexists(folder):
        recorded = _recorded(folder)
        if recorded is None:
            raise SequenceError(f"{folder} exists and was not decoded by this toolkit (no {SOURCE_FILE}), so it is not "
                                f"replaced; move it away or choose another --output folder.")
        if recorded == sources:
            return read_sequence(folder)
    log(f"decoding {video} into {folder}")
    partial = os.path.join(output, VIDEO_FOLDER, f".{video_name(video)}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # a stopped run's; hidden, in the tool's own folder
    try:
        _decode(video, partial, sources)
        _copy_beside(video, partial)
        with open(os.path.join(partial, SOURCE_FILE), "w", encoding="utf-8") as f:
            json.dump(sources, f)
        if os.path.lexists(folder):
            shutil.rmtree(folder)  # an earlier decode of a file since changed (its source.json said so)
        os.replace(partial, folder)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return read_sequence(folder)


def video_sequences(videos: Seq[str], output: str, log: Log = print) -> List[Sequence]:
    """The video files `videos` (:func:`find_videos`) as sequences under ``output/videos/``, cameras 1, 2,
    ... in order (call it while holding `output`: the decoded folders are the tool's)."""
    return [video_sequence(video, output, camera, log) for camera, video in enumerate(videos, start=1)]


__all__ = ["SOURCE_FILE", "VIDEO_EXTS", "VIDEO_FOLDER", "find_videos", "video_ground_truth", "video_name",
           "video_sequence", "video_sequences"]
