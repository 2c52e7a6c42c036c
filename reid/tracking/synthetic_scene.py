"""Where the people of synthetic multi-camera sequences are: timelines, boxes, visibility, detections.

The drawing and the files are reid.tracking.synthetic_sequences's job; this module draws no pixel.

People walk through the cameras of one scene: they cross each other, occlude each other, leave
a camera and come back to it or appear in another one. Frames are synchronised (frame k is the same instant in every camera) and the
ground truth uses GLOBAL ids (one person = one id in every camera).

Geometry (per camera, in pixels): a person's feet stand on a ground band; depth d in [0, 1]
runs from far (feet at 0.42 H, 0.17 H tall) to near (feet at 0.98 H, 0.55 H tall), so lower
on the image is bigger. A box is the person's whole figure box (aspect 1:2, as the crops),
integer pixels, and may stick out of the image. Nearer people (lower box bottom; ties: the
higher id) are drawn last. Visibility is the fraction of the box that is inside the image and
not covered by the boxes of people drawn after it (MOTChallenge's box-based definition).

Detections: each ground-truth box is missed with probability
``miss_rate + (1 - miss_rate) * (1 - visibility) ** 2`` (so occluded people are missed more);
a detected box is the visible-in-image part of the gt box with every edge moved by Gaussian
noise (std `jitter` pixels for a 100-pixel-tall person, proportional to the height); its
confidence grows with visibility. False positives: a Poisson number per frame (mean
`false_positives`), person-sized boxes at random places with low confidences.

Everything comes from `seed`: the same settings give byte-identical files on one machine.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from .scene_settings import SequenceSettings

VIEW_NAMES = ("front", "back", "side")

# Random streams: every draw comes from np.random.default_rng([seed, STREAM, ...]); the drawing
# module uses 20, 21, 24 and 25.
_S_TIMELINE, _S_DETECT = 22, 23

# Ground band, as fractions of the image height (see the module docstring).
_FAR_FOOT, _NEAR_FOOT, _FAR_H, _NEAR_H = 0.42, 0.98, 0.17, 0.55
_ASPECT = 0.5  # box width / height, as the demo's 128 x 64 crops
_DEPTH_HEIGHTS = 4.0  # the far-to-near walk is as long as 4 body heights
_SPEED = (1.0, 1.6)  # walking speed in body heights per second


@dataclass(frozen=True)
class Visit:
    """One walk of one person through one camera: a path sampled densely in time."""

    pid: int  # global id, 1-based
    camera: int  # 0-based
    times: np.ndarray  # seconds from frame 1, increasing
    x: np.ndarray  # foot centre, pixels
    depth: np.ndarray  # 0 far .. 1 near


@dataclass(frozen=True)
class CameraTruth:
    """Ground truth of one camera, one row per visible-in-image person and frame, sorted by
    (frame, drawing order): far people first."""

    camera: int  # 1-based
    frame: np.ndarray  # int64, 1-based
    pid: np.ndarray  # int64, global ids
    boxes: np.ndarray  # int64 [N, 4]: left, top, width, height (may stick out of the image)
    visibility: np.ndarray  # float64 in [0, 1]
    view: np.ndarray  # int64 index into VIEW_NAMES
    facing_left: np.ndarray  # bool, side views walking left
    visit: np.ndarray  # int64 index of the row's Visit in plan_visits' list


# ----------------------------------------------------------------------------------------- #
# geometry and planning
# ----------------------------------------------------------------------------------------- #
def _person_height(depth: np.ndarray, height: int) -> np.ndarray:
    return (_FAR_H + depth * (_NEAR_H - _FAR_H)) * height


def _foot_y(depth: np.ndarray, height: int) -> np.ndarray:
    return (_FAR_FOOT + depth * (_NEAR_FOOT - _FAR_FOOT)) * height


def _waypoints(rng: np.random.Generator, s: SequenceSettings) -> np.ndarray:
    """A walk as (x, depth) waypoints: across the view (most), or from the far end towards the
    camera and out at a side (front views), or the reverse (back views)."""
    W = s.width
    outside = lambda d: 0.35 * _person_height(np.asarray(d), s.height) + 2  # noqa: E731  (box fully out)
    kind = rng.choice(3, p=[0.6, 0.2, 0.2])
    if kind == 0:
        d0, d1 = rng.uniform(0, 1, 2)
        pts = [(-outside(d0), d0), (W + outside(d1), d1)]
    else:
        x0 = rng.uniform(0.15, 0.85) * W
        d_mid = rng.uniform(0.6, 0.95)
        x_mid = x0 + rng.uniform(-0.12, 0.12) * W
        exit_x = -outside(d_mid) if x_mid < W / 2 else W + outside(d_mid)
        pts = [(x0, 0.0), (x_mid, d_mid), (exit_x, d_mid)]
        if kind == 2:
            pts = pts[::-1]
    pts = np.asarray(pts, np.float64)
    return pts[::-1].copy() if kind == 0 and rng.random() < 0.5 else pts


def _walk(rng: np.random.Generator, s: SequenceSettings) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(times from 0, x, depth) along a random walk at a constant walking speed; far people
    cover fewer pixels per second, as in a perspective view."""
    pts = _waypoints(rng, s)
    u = np.linspace(0, 1, 64)[:, None]
    path = np.concatenate([a + (b - a) * u[(1 if i else 0):] for i, (a, b) in enumerate(zip(pts[:-1], pts[1:]))])
    x, depth = path[:, 0], path[:, 1]
    mid_h = _person_height((depth[1:] + depth[:-1]) / 2, s.height)
    step = np.hypot(np.diff(x) / mid_h, np.diff(depth) * _DEPTH_HEIGHTS)  # in body heights
    times = np.concatenate([[0.0], np.cumsum(step / rng.uniform(*_SPEED))])
    return times, x, depth


def plan_visits(settings: SequenceSettings) -> List[Visit]:
    """Every person's timeline: walks through cameras with gaps between them (walking out of
    view and back, or to another camera). The gaps are sized so that on average
    `people_per_frame` people are in view of each camera; the first walk may begin before
    frame 1, so the scene starts populated. Visits that end before frame 1 or begin after the
    last frame are left out."""
    s = settings.check()
    end = (s.frames - 1) / s.frame_rate
    occupancy = s.people_per_frame * s.cameras / s.identities  # share of time a person is in view
    visits: List[Visit] = []
    for pid in range(1, s.identities + 1):
        rng = np.random.default_rng([s.seed, _S_TIMELINE, pid])
        cam = int(rng.integers(s.cameras))
        times, x, depth = _walk(rng, s)
        t = -rng.uniform(0, 1) * times[-1] / occupancy
        while t <= end:
            if t + times[-1] >= 0:
                visits.append(Visit(pid, cam, t + times, x, depth))
            same = s.cameras == 1 or rng.random() < 0.35
            # Leaving a view and coming back takes a moment; reaching another camera longer.
            gap = max(times[-1] * (1 - occupancy) / occupancy * rng.uniform(0.5, 1.5), 0.5 if same else 1.0)
            t += times[-1] + gap
            if not same:
                cam = int((cam + rng.integers(1, s.cameras)) % s.cameras)
            times, x, depth = _walk(rng, s)
    return visits


def box_visibility(boxes: np.ndarray, width: int, height: int) -> np.ndarray:
    """Visible fraction of each box of one frame, given in drawing order (far first): the part
    inside the ``width x height`` image not covered by any later box, over the box area.

    Exact for any real boxes (left, top, width, height): the covered area is summed over the
    cells of the grid that all the box edges make.
    """
    b = np.asarray(boxes, np.float64).reshape(-1, 4)
    x1, y1 = b[:, 0], b[:, 1]
    x2, y2 = x1 + b[:, 2], y1 + b[:, 3]
    vis = np.zeros(len(b))
    for i in range(len(b)):
        cx1, cy1 = max(x1[i], 0.0), max(y1[i], 0.0)
        cx2, cy2 = min(x2[i], float(width)), min(y2[i], float(height))
        if cx2 <= cx1 or cy2 <= cy1:
            continue
        ox1, oy1 = np.clip(x1[i + 1:], cx1, cx2), np.clip(y1[i + 1:], cy1, cy2)
        ox2, oy2 = np.clip(x2[i + 1:], cx1, cx2), np.clip(y2[i + 1:], cy1, cy2)
        keep = (ox2 > ox1) & (oy2 > oy1)
        ox1, oy1, ox2, oy2 = ox1[keep], oy1[keep], ox2[keep], oy2[keep]
        xs = np.unique(np.concatenate([[cx1, cx2], ox1, ox2]))
        ys = np.unique(np.concatenate([[cy1, cy2], oy1, oy2]))
        mx, my = (xs[1:] + xs[:-1]) / 2, (ys[1:] + ys[:-1]) / 2
        covered = ((ox1[:, None, None] <= mx[None, None, :]) & (mx[None, None, :] < ox2[:, None, None])
                   & (oy1[:, None, None] <= my[None, :, None]) & (my[None, :, None] < oy2[:, None, None])).any(0)
        hidden = float((covered * np.diff(ys)[:, None] * np.diff(xs)[None, :]).sum())
        vis[i] = ((cx2 - cx1) * (cy2 - cy1) - hidden) / (b[i, 2] * b[i, 3])
    return np.clip(vis, 0.0, 1.0)


def ground_truth(settings: SequenceSettings, visits: Sequence[Visit]) -> List[CameraTruth]:
    """Per camera: the box, visibility and view of every person in view at every frame."""
    s = settings.check()
    frame_times = np.arange(s.frames) / s.frame_rate
    truths = []
    for cam in range(s.cameras):
        cols: Dict[str, List[np.ndarray]] = {k: [] for k in ("frame", "pid", "boxes", "view", "left", "visit")}
        for vi, v in enumerate(visits):
            if v.camera != cam:
                continue
            k = np.nonzero((frame_times >= v.times[0]) & (frame_times <= v.times[-1]))[0]
            if len(k) == 0:
                continue
            t = frame_times[k]
            x, depth = np.interp(t, v.times, v.x), np.interp(t, v.times, v.depth)
            h = np.round(_person_height(depth, s.height))
            w = np.round(h * _ASPECT)
            boxes = np.stack([np.round(x - w / 2), np.round(_foot_y(depth, s.height) - h), w, h], 1).astype(np.int64)
            # Walking direction a moment later gives the view: towards the camera = front.
            x2, d2 = np.interp(t + 0.05, v.times, v.x), np.interp(t + 0.05, v.times, v.depth)
            vx, vy = x2 - x, _foot_y(d2, s.height) - _foot_y(depth, s.height)
            view = np.where(2 * vy > np.abs(vx), 0, np.where(-2 * vy > np.abs(vx), 1, 2))
            inside = ((boxes[:, 0] < s.width) & (boxes[:, 0] + boxes[:, 2] > 0)
                      & (boxes[:, 1] < s.height) & (boxes[:, 1] + boxes[:, 3] > 0))
            for key, value in (("frame", k + 1), ("pid", np.full(len(k), v.pid)), ("boxes", boxes), ("view", view),
                               ("left", (view == 2) & (vx < 0)), ("visit", np.full(len(k), vi))):
                cols[key].append(value[inside])
        if cols["frame"]:
            frame, pid, boxes = (np.concatenate(cols[k]) for k in ("frame", "pid", "boxes"))
            view, left, visit = (np.concatenate(cols[k]) for k in ("view", "left", "visit"))
        else:
            frame, pid, view, visit = (np.zeros(0, np.int64) for _ in range(4))
            boxes, left = np.zeros((0, 4), np.int64), np.zeros(0, bool)
        order = np.lexsort((pid, boxes[:, 1] + boxes[:, 3], frame))  # per frame: drawing order
        frame, pid, boxes, view, left, visit = (a[order] for a in (frame, pid, boxes, view, left, visit))
        vis = np.zeros(len(frame))
        starts = np.flatnonzero(np.diff(frame, prepend=-1))
        for a, b in zip(starts, np.append(starts[1:], len(frame))):
            vis[a:b] = box_visibility(boxes[a:b], s.width, s.height)
        truths.append(CameraTruth(cam + 1, frame.astype(np.int64), pid.astype(np.int64), boxes, vis,
                                  view.astype(np.int64), left.astype(bool), visit.astype(np.int64)))
    return truths


def noisy_detections(settings: SequenceSettings, truth: CameraTruth) -> Tuple[np.ndarray, np.ndarray]:
    """Detections of one camera: ``(rows, is_false)``, rows float64 [M, 6] = frame, left, top,
    width, height, confidence (boxes inside the image), sorted by frame then left edge; is_false
    marks the false positives."""
    s = settings.check()
    rng = np.random.default_rng([s.seed, _S_DETECT, truth.camera])
    vis = truth.visibility
    hit = rng.random(len(vis)) >= s.miss_rate + (1 - s.miss_rate) * (1 - vis) ** 2
    b = truth.boxes[hit].astype(np.float64)
    edges = np.concatenate([b[:, :2], b[:, :2] + b[:, 2:]], 1)
    edges += rng.normal(0, 1, edges.shape) * (s.jitter * b[:, 3:4] / 100.0)
    conf = np.clip(0.35 + 0.6 * vis[hit] + rng.normal(0, 0.08, len(b)), 0.05, 0.99)
    true_rows = np.column_stack([truth.frame[hit], edges, conf])
    n_false = rng.poisson(s.false_positives, s.frames)
    frames = np.repeat(np.arange(1, s.frames + 1), n_false)
    depth = rng.uniform(0, 1, len(frames))
    h = _person_height(depth, s.height) * rng.uniform(0.6, 1.1, len(frames))
    w = h * rng.uniform(0.35, 0.6, len(frames))
    x = rng.uniform(0, s.width, len(frames)) - w / 2
    bottom = _foot_y(depth, s.height)
    false_rows = np.column_stack([frames, x, bottom - h, x + w, bottom, rng.uniform(0.05, 0.6, len(frames))])
    rows = np.concatenate([true_rows, false_rows])
    is_false = np.concatenate([np.zeros(len(true_rows), bool), np.ones(len(false_rows), bool)])
    rows[:, [1, 3]] = np.clip(rows[:, [1, 3]], 0, s.width)  # detectors report boxes inside the image
    rows[:, [2, 4]] = np.clip(rows[:, [2, 4]], 0, s.height)
    rows[:, 3:5] -= rows[:, 1:3]  # corners -> width, height
    keep = (rows[:, 3] >= 2) & (rows[:, 4] >= 4)
    rows, is_false = rows[keep], is_false[keep]
    order = np.lexsort((rows[:, 1], rows[:, 0]))
    return rows[order], is_false[order]


__all__ = ["CameraTruth", "SequenceSettings", "VIEW_NAMES", "Visit", "box_visibility", "ground_truth",
           "noisy_detections", "plan_visits"]
