"""Synthetic multi-camera MOTChallenge sequences: test and demo data for tracking.

People drawn by the synthetic dataset's renderer (the same identity distribution as the demo's
crops, so a model trained on ``make demo`` recognises them) walk through the cameras of one
scene: they cross each other, occlude each other, leave a camera and come back to it or appear
in another one. Where everyone is, the ground truth and the detections come from
reid.tracking.synthetic_scene (its docstring gives the geometry, the visibility and the
detection noise); this module draws the frames, each camera with its own CameraSpec look
(background, gain, colour cast, blur, noise), and writes the MOTChallenge files.

Everything comes from the seed: the same settings give byte-identical files on one machine.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict
from typing import Callable, Dict

import numpy as np

from reid.data.datasets.synthetic_render import (
    STYLES, IdentitySpec, apply_camera_look, draw_background, draw_person, sample_cameras, sample_identity,
)
from reid.data.datasets.synthetic import write_jpeg
from reid.utils.file_io import atomic_write_text, build_folder_atomically, check_output_folder

from .appearance_threshold import box_iou
from .mot_files import MOTRows, write_detections, write_gt, write_seqinfo
from .synthetic_scene import (
    VIEW_NAMES, CameraTruth, SequenceSettings, Visit, box_visibility, ground_truth, noisy_detections, plan_visits,
)

#: File with the settings and per-camera counts, next to the sequence folders.
SUMMARY_FILE = "sequences.json"
JPEG_QUALITY = 90

# Random streams: every draw comes from np.random.default_rng([seed, STREAM, ...]); the scene
# module uses 22 and 23.
_S_CAMERA_BG, _S_IDENTITY, _S_PERSON, _S_FRAME = 20, 21, 24, 25


# ----------------------------------------------------------------------------------------- #
# drawing and writing
# ----------------------------------------------------------------------------------------- #
def _paste(frame: np.ndarray, rgb: np.ndarray, alpha: np.ndarray, left: int, top: int) -> None:
    """Alpha-blend a sprite into `frame` (float32) at (left, top), clipped at the border."""
    H, W = frame.shape[:2]
    h, w = alpha.shape
    x0, y0, x1, y1 = max(left, 0), max(top, 0), min(left + w, W), min(top + h, H)
    if x1 <= x0 or y1 <= y0:
        return
    a = alpha[y0 - top:y1 - top, x0 - left:x1 - left, None]
    region = frame[y0:y1, x0:x1]
    region *= 1 - a
    region += rgb[y0 - top:y1 - top, x0 - left:x1 - left] * a


def render_frames(settings: SequenceSettings, truth: CameraTruth, identities: Dict[int, IdentitySpec],
                  write: Callable[[int, np.ndarray], None]) -> None:
    """Draw every frame of one camera (uint8 RGB) and hand it to ``write(frame, image)``."""
    s = settings.check()
    cam = sample_cameras(s.seed, s.cameras, STYLES[s.style])[truth.camera - 1]
    background = draw_background(cam, np.random.default_rng([s.seed, _S_CAMERA_BG, truth.camera]),
                                 (s.height, s.width))
    rows = np.searchsorted(truth.frame, np.arange(1, s.frames + 2))
    for k in range(1, s.frames + 1):
        img = background.copy()
        for r in range(rows[k - 1], rows[k]):  # already in drawing order, far first
            left, top, w, h = (int(v) for v in truth.boxes[r])
            pid = int(truth.pid[r])
            rng = np.random.default_rng([s.seed, _S_PERSON, truth.camera, k, pid])
            rgb, alpha = draw_person(identities[pid], VIEW_NAMES[truth.view[r]], rng, (h, w),
                                     facing_left=bool(truth.facing_left[r]))
            _paste(img, rgb.astype(np.float32), alpha, left, top)
        write(k, apply_camera_look(img, cam, np.random.default_rng([s.seed, _S_FRAME, truth.camera, k]),
                                   jitter=False))


# The boxes are whole pixels, and box_visibility is exact: more digits than mot_files' defaults.
_GT_FORMAT = "%d,%d,%d,%d,%d,%d,%d,%d,%.5f"
_DET_FORMAT = "%d,%d,%.2f,%.2f,%.2f,%.2f,%.3f,%d,%d,%d"


def _write_files(folder: str, s: SequenceSettings, name: str, truth: CameraTruth, det_rows: np.ndarray) -> None:
    """gt/gt.txt (consider 1, class 1: pedestrian), det/det.txt (`det_rows`: frame, x, y, w, h, conf)
    and seqinfo.ini of one camera in `folder`."""
    n, m = len(truth.frame), len(det_rows)
    write_gt(os.path.join(folder, "gt", "gt.txt"), MOTRows(truth.frame, truth.pid, truth.boxes, np.ones(n),
                                                           np.ones(n, np.int64), truth.visibility), _GT_FORMAT)
    write_detections(os.path.join(folder, "det", "det.txt"),
                     MOTRows(det_rows[:, 0].astype(np.int64), np.full(m, -1, np.int64), det_rows[:, 1:5],
                             det_rows[:, 5], np.full(m, -1, np.int64), np.full(m, -1.0)), _DET_FORMAT)
    write_seqinfo(os.path.join(folder, "seqinfo.ini"), name, s.frame_rate, s.frames, s.width, s.height,
                  camera=truth.camera, scene=s.scene)


def _overlapping_pairs(truth: CameraTruth) -> int:
    """Pairs of people whose boxes overlap (IoU > 0) in at least one frame."""
    pairs = set()
    starts = np.flatnonzero(np.diff(truth.frame, prepend=-1))
    for a, b in zip(starts, np.append(starts[1:], len(truth.frame))):
        x = truth.boxes[a:b]
        i, j = np.nonzero(np.triu(box_iou(x, x) > 0, 1))
        pids = truth.pid[a:b]
        pairs.update(zip(np.minimum(pids[i], pids[j]).tolist(), np.maximum(pids[i], pids[j]).tolist()))
    return len(pairs)


def _camera_summary(truth: CameraTruth, det_false: np.ndarray, frames: int) -> Dict[str, object]:
    visits_per_id = {int(p): len(np.unique(truth.visit[truth.pid == p])) for p in np.unique(truth.pid)}
    return {
        "ids": sorted(visits_per_id),
        "gt_boxes": int(len(truth.frame)),
        "mean_people_per_frame": round(len(truth.frame) / frames, 2),
        "occluded_boxes": int((truth.visibility < 1).sum()),
        "boxes_under_half_visible": int((truth.visibility < 0.5).sum()),
        "overlapping_pairs": _overlapping_pairs(truth),
        "reentering_ids": sorted(p for p, n in visits_per_id.items() if n > 1),
        "detections": int(len(det_false)),
        "false_positives": int(det_false.sum()),
    }


def sequence_name(settings: SequenceSettings, camera: int) -> str:
    """Folder name of camera `camera` (1-based): ``<scene>-c<camera>``."""
    return f"{settings.scene}-c{camera}"


def make_sequences(output: str, settings: SequenceSettings = SequenceSettings(), overwrite: bool = False,
                   log: Callable[[str], None] = lambda _: None) -> Dict[str, object]:
    """Write one MOTChallenge sequence per camera under `output` (``<scene>-c<k>/`` with
    seqinfo.ini, img1/, gt/gt.txt, det/det.txt) and ``sequences.json`` (settings and per-camera
    counts); returns that summary.

    Each sequence folder appears whole (built aside, then renamed). An existing one is an error
    unless `overwrite`, which replaces folders that hold a seqinfo.ini (nothing else is removed).
    """
    check_output_folder(output)
    s = settings.check()
    names = [sequence_name(s, c) for c in range(1, s.cameras + 1)]
    for name in names:
        path = os.path.join(output, name)
        if os.path.lexists(path):
            if not overwrite:
                raise FileExistsError(f"{path} exists; remove it, pass --overwrite, or choose another --output")
            if not os.path.isfile(os.path.join(path, "seqinfo.ini")):
                raise FileExistsError(f"{path} exists and is not a sequence folder (no seqinfo.ini); move it away "
                                      "or choose another --output")
    if os.path.isfile(os.path.join(output, SUMMARY_FILE)):
        os.remove(os.path.join(output, SUMMARY_FILE))  # written last: a folder without it was not finished
    start = time.time()
    visits = plan_visits(s)
    truths = ground_truth(s, visits)
    style = STYLES[s.style]
    identities = {p: sample_identity(np.random.default_rng([s.seed, _S_IDENTITY, p]), style)
                  for p in range(1, s.identities + 1)}
    cameras = {}
    for truth, name in zip(truths, names):
        det_rows, det_false = noisy_detections(s, truth)

        def build(tmp: str, truth: CameraTruth = truth, det_rows: np.ndarray = det_rows, name: str = name) -> None:
            for sub in ("img1", "gt", "det"):
                os.makedirs(os.path.join(tmp, sub))
            render_frames(s, truth, identities,
                          lambda k, img: write_jpeg(os.path.join(tmp, "img1", f"{k:06d}.jpg"), img, JPEG_QUALITY))
            _write_files(tmp, s, name, truth, det_rows)

        final = os.path.join(output, name)
        if os.path.lexists(final):
            shutil.rmtree(final)
        build_folder_atomically(final, build, "seqinfo.ini")
        cameras[name] = _camera_summary(truth, det_false, s.frames)
        log(f"{name}: {s.frames} frames, {len(cameras[name]['ids'])} ids, {len(truth.frame)} boxes "
            f"({time.time() - start:.1f} s)")
    seen = [set(c["ids"]) for c in cameras.values()]
    summary = {
        "settings": asdict(s),
        "sequences": cameras,
        "ids_in_several_cameras": sorted(p for p in set().union(*seen) if sum(p in x for x in seen) > 1),
        "visibility": "box-based: the part of the box inside the image and not covered by nearer people's boxes",
    }
    atomic_write_text(os.path.join(output, SUMMARY_FILE), json.dumps(summary, indent=2) + "\n")
    return summary


# The scene's names are re-exported: one import gives a caller everything it needs.
__all__ = ["CameraTruth", "SUMMARY_FILE", "SequenceSettings", "Visit", "box_visibility", "ground_truth",
           "make_sequences", "noisy_detections", "plan_visits", "render_frames", "sequence_name"]
