"""One identity across cameras: per-camera tracks in, per-camera tracks with global ids out, scored.

:func:`link_cameras` reads each sequence's tracks (a tracker's result file, or the ground truth
made camera-local: :func:`gt_tracklets`), pools one feature per tracklet
(reid/tracking/tracklets.py), links the tracklets of each scene's cameras into identities
(reid/tracking/linking.py; the sequences of one ``scene`` are its cameras, other scenes hold other
people) and writes, under the output folder:

* ``tracks/<sequence name>.txt``: the input rows with each track id replaced by its global id;
* ``identities.json``: each global id with its tracklets (sequence, camera, local id, frames);
* when every sequence has ground truth: ``metrics.json`` scored by TrackEval, the multi-camera
  IDF1/IDP/IDR of each scene and the per-camera metrics. The multi-camera score is AI City's
  MTMC protocol: the cameras of a scene, concatenated in time (:func:`concatenate_cameras`), are one
  sequence whose ground truth and results carry global ids (``multicamera/<scene>-gt.txt``,
  ``multicamera/<scene>.txt``), so an identity split across cameras, or two people merged, costs
  IDF1 as an identity switch inside one camera does.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence as Seq, Tuple

import numpy as np

from reid.utils.file_io import atomic_write_text, check_output_folder

from .appearance import AppearanceModel
from .appearance_threshold import calibrate_from_ground_truth, tracklet_identities
from .linking import Transitions, link_tracklets
from .mot_files import MOTRows, read_gt, read_results, result_files, write_gt, write_results
from .sequences import Sequence, identity_scope
from .tracklets import DEFAULT_CROPS, Tracklets, check_pooling, tracklet_features

Log = Callable[[str], None]
#: ``score(entries, results, workdir)``: entries ``(name, gt file, length)``, results name -> result
#: file; returns name (and "COMBINED") -> metric name -> value. By default TrackEval's.
Scorer = Callable[[List[Tuple[str, str, int]], Dict[str, str], str], Dict[str, Dict[str, float]]]

#: ``--tracks gt``: each sequence's ground truth as its per-camera tracks.
GT_TRACKS = "gt"
#: MOTChallenge's pedestrian class: the ground-truth boxes used as tracklets with ``--tracks gt``.
PEDESTRIAN = 1
MULTI_CAMERA_METRICS = ("IDF1", "IDP", "IDR")


@dataclass(frozen=True)
class LinkSettings:
    """How tracklets are linked (reid/tracking/linking.py)."""

    threshold: Optional[float]                # cosine distance below which identities may merge, (0, 2]; None:
    #                                           calibrated at `far` from the ground truth (link_cameras)
    crops_per_tracklet: int = DEFAULT_CROPS   # crops pooled into a tracklet's feature
    max_gap: Optional[float] = None           # seconds; tracklets of two cameras further apart: not linked
    transitions: Optional[Transitions] = None  # allowed camera pairs and travel times
    far: float = 1e-2                         # false-accept rate of a threshold calibrated from the ground truth
    pooling: str = "auto"                     # a tracklet's crops: "quality" weights, the "model"'s own, or auto

    def check(self) -> "LinkSettings":
        """Self, or one line naming the setting that cannot work."""
        if not 0.0 < self.far < 1.0:
            raise ValueError(f"false accept rate {self.far} must lie in (0, 1) (e.g. 0.01).")
        if self.threshold is not None and not 0.0 < self.threshold <= 2.0:
            raise ValueError(f"threshold {self.threshold} must be a cosine distance in (0, 2] (e.g. 0.5).")
        if self.crops_per_tracklet < 1:
            raise ValueError(f"crops per tracklet {self.crops_per_tracklet} must be >= 1.")
        if self.max_gap is not None and not self.max_gap >= 0:
            raise ValueError(f"max gap {self.max_gap} must be a number of seconds >= 0.")
        return self


def gt_tracklets(sequence: Sequence) -> MOTRows:
    """The ground truth of `sequence` as per-camera tracks: the pedestrian boxes it marks to be
    considered, each track id renumbered 1, 2, ... in this camera, so that a linker never sees the
    global ids; conf 1 (a ground-truth box is certain)."""
    if sequence.gt_path is None:
        raise FileNotFoundError(f"{os.path.join(sequence.root, 'gt', 'gt.txt')}: no ground truth for --tracks gt; "
                                "give a tracker's results with --tracks DIR instead.")
    rows = read_gt(sequence.gt_path, sequence)
    rows = rows.select((rows.conf > 0) & (rows.cls == PEDESTRIAN))
    local = np.unique(rows.track_id, return_inverse=True)[1].reshape(-1) + 1
    return MOTRows(rows.frame, local.astype(np.int64), rows.boxes, np.ones(len(rows)), rows.cls, rows.visibility)


def read_camera_tracks(sequences: Seq[Sequence], tracks: str) -> List[MOTRows]:
    """Each sequence's tracks: ``tracks`` is :data:`GT_TRACKS` or a folder with one
    ``<sequence name>.txt`` per sequence (TrackEval's layout) and no other result file."""
    if tracks == GT_TRACKS:
        return [gt_tracklets(s) for s in sequences]
    if not os.path.isdir(tracks):  # say what else --tracks may be
        raise FileNotFoundError(f"--tracks {tracks}: not a folder; name a folder of <sequence name>.txt result "
                                f"files, or '{GT_TRACKS}' for each sequence's ground truth.")
    files = result_files(sequences, tracks)
    return [read_results(p, s) for p, s in zip(files, sequences)]


def concatenate_cameras(parts: Seq[Tuple[MOTRows, int]]) -> MOTRows:
    """The rows of several cameras as one sequence, one camera after the other: the rows of part
    ``k`` (``(rows, length in frames)``) get frame ``frame + sum of the lengths of parts 0..k-1``.
    Ids are kept (global ids stay one person across the cameras)."""
    offsets = np.cumsum([0] + [int(length) for _, length in parts])[:-1]
    shifted = []
    for (rows, length), offset in zip(parts, offsets):
        if len(rows) and (rows.frame.min() < 1 or rows.frame.max() > length):
            raise ValueError(f"frames {rows.frame.min()}..{rows.frame.max()} lie outside the camera's 1..{length}; "
                             "give each camera's own length.")
        shifted.append(MOTRows(rows.frame + offset, rows.track_id, rows.boxes, rows.conf, rows.cls, rows.visibility))
    return MOTRows.concatenate(shifted)


def _identities(sequences: Seq[Sequence], tracklets: Tracklets, global_id: np.ndarray) -> List[Dict]:
    out: List[Dict] = []
    for g in np.unique(global_id):
        members = np.flatnonzero(global_id == g)
        out.append({"id": int(g), "scene": sequences[int(tracklets.sequence[members[0]])].scene,
                    "cameras": sorted({int(c) for c in tracklets.camera[members]}),
                    "tracklets": [{"sequence": sequences[int(tracklets.sequence[t])].name,
                                   "camera": int(tracklets.camera[t]), "local_id": int(tracklets.local_id[t]),
                                   "frames": [int(tracklets.first[t]), int(tracklets.last[t])],
                                   "num_boxes": int(tracklets.num_boxes[t])} for t in members]})
    return out


def trackeval_score(entries: List[Tuple[str, str, int]], results: Dict[str, str], workdir: str,
                    python: Optional[str] = None) -> Dict[str, Dict[str, float]]:
    """TrackEval's scores in percent (reid/tracking/scoring.py) of `entries` ``(name, gt file, length)``;
    `python`: the tracker environment's (default: made on first use)."""
    from .scoring import ScoredSequence, score_results

    return score_results([ScoredSequence(n, g, int(length)) for n, g, length in entries], results, workdir, python)


def score_cameras(sequences: Seq[Sequence], result_files: Seq[str], output: str,
                  score: Optional[Scorer] = None) -> Dict:
    """metrics.json's content: per-camera metrics of each sequence's gt against its global-id
    results, and per scene the multi-camera metrics of the cameras concatenated in time."""
    score = score or trackeval_score
    per_camera = score([(s.name, s.gt_path, s.length) for s in sequences],
                       {s.name: p for s, p in zip(sequences, result_files)}, os.path.join(output, "scoring", "cameras"))
    folder = os.path.join(output, "multicamera")
    os.makedirs(folder, exist_ok=True)
    entries, results = [], {}
    # only a declared scene's ground truth has global ids; other sequences' ids 1 are other people
    declared = sorted({s.scene for s in sequences if identity_scope(s).startswith("scene:")})
    for scene in declared:
        members = [(s, p) for s, p in zip(sequences, result_files) if s.scene == scene]
        gt = concatenate_cameras([(read_gt(s.gt_path, s), s.length) for s, _ in members])
        res = concatenate_cameras([(read_results(p, s), s.length) for s, p in members])
        name = f"{scene}-multicamera"
        write_gt(os.path.join(folder, f"{name}-gt.txt"), gt)
        results[name] = write_results(os.path.join(folder, f"{name}.txt"), res)
        entries.append((name, os.path.join(folder, f"{name}-gt.txt"), sum(s.length for s, _ in members)))
    multi = score(entries, results, os.path.join(output, "scoring", "multicamera")) if entries else {}
    return {"scorer": "TrackEval",
            "multi_camera": {name: multi[name] for name, _, _ in entries},
            "multi_camera_combined": multi.get("COMBINED"),
            "per_camera": per_camera,
            "protocol": "multi-camera (scenes declared in seqinfo.ini, whose gt ids are global): each scene's cameras "
                        "concatenated in time into one sequence with global ids "
                        "(AI City MTMC); per camera: each sequence's gt against its global-id results"}


def ground_truth_threshold(sequences: Seq[Sequence], rows: Seq[MOTRows], tracklets: Tracklets,
                           far: float) -> Dict[str, Any]:
    """The cosine distance at FAR `far` between tracklet features of different people, each tracklet
    taking the ground-truth id most of its boxes match (ids unique per scene, as :func:`identity_scope`
    says), pairs across sequences; ``{"distance": None, "reason"}`` when the tracklets cannot resolve it."""
    features, ids, cameras = [], [], []
    scopes: Dict[str, int] = {}
    for k, (seq, r) in enumerate(zip(sequences, rows)):
        gt = read_gt(seq.gt_path, seq)
        gt = gt.select((gt.conf > 0) & (gt.cls == PEDESTRIAN))
        mine = tracklets.sequence == k
        found = tracklet_identities(r, gt, tracklets.local_id[mine])
        base = scopes.setdefault(identity_scope(seq), len(scopes)) << 32
        features.append(tracklets.features[mine])
        ids.append(np.where(found >= 0, found + base, -1))
        cameras.append(np.zeros(int(mine.sum()), np.int64))  # one "camera" per sequence: pairs across them
    found = calibrate_from_ground_truth(features, ids, cameras, far)
    if found.get("source"):
        found["source"] = "ground truth (tracklets matched to it)"
    return found


def _threshold(settings: LinkSettings, sequences: Seq[Sequence], rows: Seq[MOTRows], tracklets: Tracklets,
               fallback: Optional[Callable[[], Tuple[float, str]]], log: Log) -> Dict[str, Any]:
    """The linking threshold and where it came from: given, else the ground truth's, else `fallback`'s."""
    if settings.threshold is not None:
        return {"distance": settings.threshold, "source": "given"}
    note = "not every sequence has ground truth"
    if all(s.gt_path for s in sequences):
        found = ground_truth_threshold(sequences, rows, tracklets, settings.far)
        if found["distance"] is not None:
            log(f"threshold: cosine distance {found['distance']:.4f} at FAR {settings.far:g} from the ground truth "
                f"({found['num_impostor']} pairs of different people's tracklets)")
            return found
        note = f"not calibrated from the ground truth: {found['reason']}"
    if fallback is None:
        raise ValueError(f"no linking threshold: {note}; pass --threshold D (a cosine distance in (0, 2]).")
    distance, source = fallback()
    return {"distance": distance, "source": source, "note": note}


def link_cameras(sequences: Seq[Sequence], tracks: str, model: AppearanceModel, output: str,
                 settings: LinkSettings, score: Optional[Scorer] = None, metrics: bool = True,
                 log: Log = print, fallback: Optional[Callable[[], Tuple[float, str]]] = None) -> Dict:
    """Link the tracklets of `tracks` (:func:`read_camera_tracks`) across the cameras of each
    scene and write the module docstring's files under `output`; returns identities.json's
    content (with ``metrics`` when scored).

    The threshold is `settings.threshold`; without one it is calibrated at `settings.far` from the
    ground truth when every sequence has it (:func:`ground_truth_threshold`), else
    ``fallback() -> (distance, source)`` gives it (the model's calibrated thresholds)."""
    settings.check()
    check_output_folder(output)
    pooling = check_pooling(settings.pooling, model)
    log(f"tracklet features: {model.label}'s crops pooled by "
        + (f"the model's own {model.frames.method} pooling" if pooling == "model" else "the hand-set quality weights"))
    rows = read_camera_tracks(sequences, tracks)
    parts = []
    for k, (seq, r) in enumerate(zip(sequences, rows)):
        parts.append(tracklet_features(seq, r, model, k, settings.crops_per_tracklet, pooling=pooling))
        log(f"{seq.name} (camera {seq.camera}, scene {seq.scene}): {len(parts[-1])} tracklets, {len(r)} boxes")
    tracklets = Tracklets.concatenate(parts)
    threshold = _threshold(settings, sequences, rows, tracklets, fallback, log)
    scene_of = np.array([sequences[int(k)].scene for k in tracklets.sequence], dtype=object)
    global_id = np.zeros(len(tracklets), np.int64)
    next_id = 1
    for scene in sorted(set(scene_of)):  # other scenes are other people: linked apart
        members = np.flatnonzero(scene_of == scene)
        labels = link_tracklets(tracklets.select(members), threshold["distance"], settings.max_gap,
                                settings.transitions)
        global_id[members] = labels + next_id
        next_id += int(labels.max()) + 1 if len(labels) else 0
    os.makedirs(os.path.join(output, "tracks"), exist_ok=True)
    result_files = []
    for k, (seq, r) in enumerate(zip(sequences, rows)):
        mine = tracklets.sequence == k
        # local ids of a sequence's tracklets are sorted (np.unique), so a row finds its tracklet by search
        ids = global_id[mine][np.searchsorted(tracklets.local_id[mine], r.track_id)]
        out = MOTRows(r.frame, ids, r.boxes, r.conf, r.cls, r.visibility)
        result_files.append(write_results(os.path.join(output, "tracks", f"{seq.name}.txt"), out))
    identities = _identities(sequences, tracklets, global_id)
    multi = sum(len(i["cameras"]) > 1 for i in identities)
    record = {"tracks": os.path.abspath(tracks) if tracks != GT_TRACKS else GT_TRACKS,
              "model": model.identity, "threshold": threshold["distance"], "threshold_source": threshold,
              "crops_per_tracklet": settings.crops_per_tracklet, "pooling": pooling, "max_gap": settings.max_gap,
              "transitions": None if settings.transitions is None else
              [{"cameras": list(k), "min_seconds": v[0], "max_seconds": v[1]}
               for k, v in sorted(settings.transitions.pairs.items())],
              "num_tracklets": len(tracklets), "num_identities": len(identities),
              "identities_in_several_cameras": int(multi), "identities": identities}
    atomic_write_text(os.path.join(output, "identities.json"), json.dumps(record, indent=1, default=float))
    log(f"{len(tracklets)} tracklets -> {len(identities)} identities ({multi} seen by several cameras); "
        f"wrote {os.path.join(output, 'tracks')} and identities.json")
    if metrics and all(s.gt_path for s in sequences):
        scores = score_cameras(sequences, result_files, output, score)
        atomic_write_text(os.path.join(output, "metrics.json"), json.dumps(scores, indent=1, default=float))
        for name, values in scores["multi_camera"].items():
            log(f"{name}: " + ", ".join(f"{m} {values[m]:.2f}" for m in MULTI_CAMERA_METRICS if m in values))
        if not scores["multi_camera"]:
            log("no multi-camera score: no sequence declares its scene (seqinfo.ini scene=), so their gt ids are not "
                "known to be global; per-camera metrics only")
        record["metrics"] = scores
    elif metrics:
        log("no metrics.json: not every sequence has ground truth (gt/gt.txt)")
    return record


__all__ = ["GT_TRACKS", "LinkSettings", "PEDESTRIAN", "concatenate_cameras", "ground_truth_threshold", "gt_tracklets",
           "link_cameras",
           "read_camera_tracks", "score_cameras", "trackeval_score"]
