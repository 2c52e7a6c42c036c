"""The appearance threshold a tracker uses with a re-ID model, calibrated rather than guessed.

BoT-SORT accepts an appearance match when the cosine distance between a track's feature and a
detection's is below ``appearance_thresh`` (StrongSORT: ``max_cos_dist``); BoxMOT's defaults were
tuned for its own models, and another model's distances live on another scale (a random model
puts everyone near distance 0). So the threshold is calibrated per model:

* with ground truth: each detection takes the ground-truth id it overlaps best (IoU >= 0.5,
  one-to-one per frame, Hungarian), at most ``max_detections`` matched detections are drawn
  (seeded), and the threshold is the cosine distance at false-accept rate `far` among pairs of
  different people, as ``reid.evaluation.thresholds.calibrate`` measures it (pairs within one
  frame are the same person only with itself, so each (sequence, frame) is its own "camera");
* else from the model's thresholds.json (``reid.inference.decision_thresholds.calibrated_similarity``);
* else the tracker's own default, reported as not calibrated.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence as Seq

import numpy as np
from scipy.optimize import linear_sum_assignment

from .mot_files import MOTRows

MATCH_IOU = 0.5


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU ``[len(a), len(b)]`` (float64) of MOT boxes (left, top, width, height); 0 for two boxes
    without area (torchvision's 0 / 0)."""
    # Imported here: torch takes seconds to import, and the trackers' command lines load this module.
    import torch
    from torchvision.ops import box_convert, box_iou as corner_iou

    corners = [box_convert(torch.as_tensor(x, dtype=torch.float64).reshape(-1, 4), "xywh", "xyxy") for x in (a, b)]
    return np.nan_to_num(corner_iou(*corners).numpy(), nan=0.0)


def match_to_ground_truth(dets: MOTRows, gt: MOTRows, min_iou: float = MATCH_IOU) -> np.ndarray:
    """The gt track id of each detection (one-to-one per frame, highest total IoU, each match at
    least `min_iou`); -1 for a detection that matches no gt box."""
    ids = np.full(len(dets), -1, dtype=np.int64)
    for frame in np.intersect1d(dets.frame, gt.frame):
        d_idx = np.flatnonzero(dets.frame == frame)
        g_idx = np.flatnonzero(gt.frame == frame)
        iou = box_iou(dets.boxes[d_idx], gt.boxes[g_idx])
        rows, cols = linear_sum_assignment(-iou)
        good = iou[rows, cols] >= min_iou
        ids[d_idx[rows[good]]] = gt.track_id[g_idx[cols[good]]]
    return ids


def calibrate_from_ground_truth(features: Seq[np.ndarray], ids: Seq[np.ndarray], frames: Seq[np.ndarray],
                                far: float, max_detections: int = 2000, seed: int = 0) -> Dict[str, Any]:
    """The cosine-distance threshold at FAR `far` from detections matched to ground truth, over
    sequences given as parallel lists (features ``[N, D]``, gt ids (-1 = none), frame numbers).
    Ids are taken as given: the caller makes them unique where two sequences' id 1 are two people
    (``reid.tracking.tracker_runs`` prefixes them by :func:`reid.tracking.sequences.identity_scope`). Returns ``{"distance", "tar", "num_impostor", "num_genuine", "source"}``
    or, when the pairs cannot resolve `far`, ``{"distance": None, "reason"}``."""
    from reid.evaluation.thresholds import calibrate

    feats: List[np.ndarray] = []
    pids: List[np.ndarray] = []
    cams: List[np.ndarray] = []
    offset = 0
    for f, i, fr in zip(features, ids, frames):
        keep = np.asarray(i) >= 0
        feats.append(np.asarray(f)[keep])
        pids.append(np.asarray(i)[keep])
        cams.append(np.asarray(fr)[keep] + offset)  # one "camera" per (sequence, frame)
        offset += int(np.max(fr, initial=0)) + 1
    f = np.concatenate(feats) if feats else np.zeros((0, 1), np.float32)
    p = np.concatenate(pids) if pids else np.zeros(0, np.int64)
    c = np.concatenate(cams) if cams else np.zeros(0, np.int64)
    if len(f) > max_detections:
        pick = np.sort(np.random.default_rng(seed).choice(len(f), max_detections, replace=False))
        f, p, c = f[pick], p[pick], c[pick]
    if len(np.unique(p)) < 2:
        return {"distance": None, "reason": "fewer than two ground-truth people matched by detections"}
    try:
        record = calibrate(f, f, p, p, c, c, fars=[far], source="detections matched to the ground truth")
    except ValueError as e:  # e.g. no genuine pair: every person seen once
        return {"distance": None, "reason": str(e)}
    entry = record["thresholds"].get(f"{far:g}")
    if entry is None:
        return {"distance": None, "reason": f"{record['num_impostor']} pairs of different people cannot resolve "
                                            f"FAR {far:g}"}
    return {"distance": float(entry["distance"]), "tar": float(entry["tar"]), "num_impostor": record["num_impostor"],
            "num_genuine": record["num_genuine"], "source": "ground truth", "far": far}


def tracklet_identities(rows: MOTRows, gt: MOTRows, local_ids: np.ndarray) -> np.ndarray:
    """The ground-truth id of each tracklet of `rows` (one per id of the sorted `local_ids`): the id that
    more than half of its boxes match (:func:`match_to_ground_truth`); -1 where none does (a tracklet
    that a tracker's id switch made of two people is no one's, not the larger part's)."""
    matched = match_to_ground_truth(rows, gt)
    track = np.searchsorted(local_ids, rows.track_id)
    out = np.full(len(local_ids), -1, np.int64)
    ok = matched >= 0
    if not ok.any():
        return out
    pairs, counts = np.unique(np.c_[track[ok], matched[ok]], axis=0, return_counts=True)
    order = np.lexsort((-counts, pairs[:, 0]))  # each tracklet's most matched id first
    pairs, counts = pairs[order], counts[order]
    first = np.r_[True, pairs[1:, 0] != pairs[:-1, 0]]
    best, ids, votes = pairs[first, 0], pairs[first, 1], counts[first]
    majority = votes * 2 > np.bincount(track, minlength=len(local_ids))[best]
    out[best[majority]] = ids[majority]
    return out


__all__ = ["MATCH_IOU", "box_iou", "calibrate_from_ground_truth", "match_to_ground_truth", "tracklet_identities"]
