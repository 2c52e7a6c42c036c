"""What a re-ID model does to a tracker: the same detections tracked with motion only and with
each appearance model, scored by TrackEval.

Changing the re-ID model changes only association, so the detections of each sequence are read
once and every model embeds the same boxes (the crops of a frame in one batch). Each model's
features go to BoxMOT's tracker in the tracker environment (reid/tracking/tracker_env.py) with
the appearance threshold calibrated for that model (reid/tracking/appearance_threshold.py), and TrackEval
scores every run against the ground truth (reid/tracking/scoring.py). Motion only is the
baseline each model is compared with.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence as Seq, Tuple

import numpy as np

from .appearance import AppearanceModel, embed_rows, label_folder
from .appearance_threshold import calibrate_from_ground_truth, match_to_ground_truth
from .mot_files import MOTRows, read_detections, read_gt
from .options import DEFAULT_TRACKER, DETECTION_SOURCES, TRACKER_NAMES
from .scoring import ScoredSequence, score_results
from .sequences import Sequence, identity_scope
from .tracker_env import run_side

MOTION_ONLY = "motion only"
Log = Callable[[str], None]


@dataclass(frozen=True)
class TrackerKind:
    """How this toolkit drives one of BoxMOT's trackers."""

    threshold_option: Optional[str]  # the tracker's cosine-distance gate for appearance; None: a weight, no gate
    motion_options: Optional[Dict[str, Any]]  # the options that turn appearance off; None: it needs appearance
    appearance_options: Dict[str, Any]


TRACKERS: Dict[str, TrackerKind] = {
    "botsort": TrackerKind("appearance_thresh", {"use_embeddings": False}, {"use_embeddings": True}),
    "deepocsort": TrackerKind(None, {"use_embeddings": False}, {"use_embeddings": True}),
    "strongsort": TrackerKind("max_cos_dist", None, {}),
    # BoostTrack(++) and Hybrid-SORT weigh appearance into their costs, without a cosine gate
    "boosttrack": TrackerKind(None, {"use_embeddings": False}, {"use_embeddings": True}),
    "hybridsort": TrackerKind(None, {"use_embeddings": False}, {"use_embeddings": True}),
}
assert tuple(TRACKERS) == TRACKER_NAMES, "options.TRACKER_NAMES lists the trackers driven here"


def check_tracker(name: str) -> TrackerKind:
    """The driving rules of tracker `name`; a one-line ValueError listing the valid names."""
    if name not in TRACKERS:
        raise ValueError(f"Unknown tracker {name!r}; valid: {', '.join(TRACKERS)}.")
    return TRACKERS[name]


def sequence_detections(sequence: Sequence, source: str) -> MOTRows:
    """The boxes to track in `sequence`: det/det.txt (`source` "det") or its ground-truth
    pedestrians (class 1, 'consider' 1) as perfect detections ("gt")."""
    if source == "gt":
        if sequence.gt_path is None:
            raise ValueError(f"{sequence.root}: no gt/gt.txt for --detections gt; use det/det.txt (--detections det).")
        gt = read_gt(sequence.gt_path, sequence)
        kept = gt.select((gt.cls == 1) & (gt.conf == 1))
        return MOTRows(kept.frame, np.full(len(kept), -1, np.int64), kept.boxes, np.ones(len(kept)),
                       np.full(len(kept), -1, np.int64), np.full(len(kept), -1.0))
    if sequence.det_path is None:
        raise ValueError(f"{sequence.root}: no det/det.txt; add the detector's boxes there, or pass --detections gt "
                         "to track the ground-truth boxes.")
    rows = read_detections(sequence.det_path, sequence)
    bad = np.flatnonzero((rows.conf < 0) | (rows.conf > 1))
    if len(bad):
        raise ValueError(f"{sequence.det_path}: detection confidence {rows.conf[bad[0]]:g} (frame "
                         f"{rows.frame[bad[0]]}) is outside [0, 1], which the trackers require; rescale the "
                         "confidences to [0, 1] (e.g. a logistic of DPM scores), or pass --detections gt.")
    return rows


def check_boxes(sequences: Seq[Sequence], boxes: Seq[MOTRows], source: str, log: Callable[[str], None]) -> None:
    """One line when no sequence has a box to track (scores of zero, exit 0, would look like a result);
    a note naming the sequences without any."""
    empty = [s for s, rows in zip(sequences, boxes) if not len(rows)]
    what = "det/det.txt" if source == "det" else "pedestrian boxes in gt/gt.txt"
    if empty and len(empty) == len(sequences):
        other = "or pass --detections gt to track the ground truth" if source == "det" else "or track det/det.txt"
        raise ValueError(f"no sequence has a box to track (their {what} hold none, e.g. {empty[0].root}); give the "
                         f"detector's boxes, {other}.")
    if empty:
        log(f"note: {len(empty)} of {len(sequences)} sequences have no box to track ({what} empty): "
            + ", ".join(s.name for s in empty))


def _npz(path: str, rows: MOTRows, features: Optional[np.ndarray]) -> str:
    xyxy = np.c_[rows.boxes[:, :2], rows.boxes[:, :2] + rows.boxes[:, 2:]]
    arrays = {"frame": rows.frame, "boxes": xyxy.astype(np.float32), "scores": rows.conf.astype(np.float32)}
    if features is not None:
        arrays["features"] = features
    tmp = path + ".tmp.npz"
    np.savez(tmp, **arrays)
    os.replace(tmp, path)
    return path


@dataclass
class RunResult:
    """One tracker run over every sequence: with one appearance model, or motion only."""

    label: str
    identity: Dict[str, Any]
    threshold: Dict[str, Any]
    results: Dict[str, str]  # sequence name -> MOT result file
    embed_seconds: float
    track_seconds: float
    frames: int
    metrics: Optional[Dict[str, Dict[str, float]]] = None

    def speed(self) -> Dict[str, float]:
        """Frames, seconds of embedding and of tracking, frames/s over both, and the model's share."""
        total = self.embed_seconds + self.track_seconds
        return {"frames": self.frames, "embedding_seconds": self.embed_seconds, "tracker_seconds": self.track_seconds,
                "frames_per_second": self.frames / total if total > 0 else float("inf"),
                "appearance_share": self.embed_seconds / total if total > 0 else 0.0}


def gate_threshold(kind: TrackerKind, model: AppearanceModel, sequences: Seq[Sequence], detections: Seq[MOTRows],
                   features: Seq[np.ndarray], given: Optional[float], far: float,
                   calibrated: Optional[Callable[[AppearanceModel, float], Optional[Dict[str, Any]]]]
                   ) -> Dict[str, Any]:
    """The appearance threshold for `model` and where it came from (the module docstring's order)."""
    if kind.threshold_option is None:
        return {"option": None, "distance": None, "source": "this tracker weights appearance, it has no threshold"}
    out: Dict[str, Any] = {"option": kind.threshold_option}
    if given is not None:
        return {**out, "distance": float(given), "source": "given (--appearance-threshold or --tracker-option)"}
    if all(s.gt_path for s in sequences):
        ids, frames = [], []
        scopes: Dict[str, int] = {}
        for seq, rows in zip(sequences, detections):
            gt = read_gt(seq.gt_path, seq)
            gt = gt.select((gt.cls == 1) & (gt.conf == 1))
            matched = match_to_ground_truth(rows, gt)
            base = scopes.setdefault(identity_scope(seq), len(scopes)) << 32  # ids unique within their scope
            ids.append(np.where(matched >= 0, matched + base, -1))
            frames.append(rows.frame)
        found = calibrate_from_ground_truth(features, ids, frames, far)
        if found["distance"] is not None:
            return {**out, **found}
        out["note"] = f"not calibrated from the ground truth: {found['reason']}"
    if calibrated is not None:
        found = calibrated(model, far)
        if found is not None:
            return {**out, **found}
    return {**out, "distance": None, "source": "the tracker's default (not calibrated)"}


def thresholds_file(model: AppearanceModel, far: float) -> Optional[Dict[str, Any]]:
    """The distance at FAR `far` calibrated for `model` (the thresholds.json beside its checkpoint, or the
    thresholds its exported file carries), or None (no calibration, or one that does not hold for these
    weights and features)."""
    if model.predictor is None:
        return None
    from reid.inference.decision_thresholds import model_similarity

    try:
        similarity, path, description = model_similarity(model.predictor, far)
    except ValueError:
        return None
    return {"distance": 1.0 - similarity, "source": path, "far": far, "description": description}


def track_runs(sequences: Seq[Sequence], models: Seq[Optional[AppearanceModel]], tracker: str, output: str,
               python: str, detections: str = "det", appearance_threshold: Optional[float] = None, far: float = 1e-2,
               tracker_options: Optional[Dict[str, Any]] = None,
               calibrated: Optional[Callable[[AppearanceModel, float], Optional[Dict[str, Any]]]] = thresholds_file,
               progress: Optional[Callable[[str, Dict[str, Any]], None]] = None, log: Log = print,
               boxes: Optional[Seq[MOTRows]] = None) -> List[RunResult]:
    """Track every sequence with each of `models` (None = motion only) and score the runs when every
    sequence has ground truth. Result files go to ``output/<label>/<sequence>.txt``, the tracker's
    inputs to ``output/features/<label>/``. `boxes`: the sequences' detections when already read
    (:func:`sequence_detections`)."""
    kind = check_tracker(tracker)
    folders = [label_folder(MOTION_ONLY if m is None else m.label) for m in models]
    if len(set(folders)) != len(folders):
        raise ValueError(f"two runs would write into one folder ({', '.join(folders)}); give the models other labels.")
    if detections not in DETECTION_SOURCES:
        raise ValueError(f"--detections {detections!r}: choose one of {', '.join(DETECTION_SOURCES)}.")
    if boxes is None:
        boxes = [sequence_detections(s, detections) for s in sequences]
    frames = int(sum(s.length for s in sequences))
    runs: List[RunResult] = []
    for model in models:
        label = MOTION_ONLY if model is None else model.label
        if model is None and kind.motion_options is None:
            raise ValueError(f"--tracker {tracker} needs an appearance model and has no motion-only mode; leave "
                             f"--no-reid out, or use --tracker botsort or deepocsort for motion only.")
        folder = os.path.join(output, label_folder(label))
        inputs = os.path.join(output, "features", label_folder(label))
        os.makedirs(folder, exist_ok=True)
        os.makedirs(inputs, exist_ok=True)
        t0 = time.perf_counter()
        features = [None if model is None else embed_rows(s, rows, model, _stage(progress, label, s.name))
                    for s, rows in zip(sequences, boxes)]
        embed_seconds = time.perf_counter() - t0
        options = dict(kind.motion_options if model is None else kind.appearance_options)
        threshold: Dict[str, Any] = {}
        if model is not None:
            given = (tracker_options or {}).get(kind.threshold_option, appearance_threshold)
            threshold = gate_threshold(kind, model, sequences, boxes, features, given, far, calibrated)
            if threshold.get("distance") is not None:
                options[kind.threshold_option] = float(threshold["distance"])
        # the user's settings apply to every run, except those that decide appearance: the baseline stays motion only
        appearance_keys = set(kind.appearance_options) | set(kind.motion_options or {}) | {kind.threshold_option}
        options.update({k: v for k, v in (tracker_options or {}).items() if model is not None or k not in appearance_keys})
        tracker_inputs = [_npz(os.path.join(inputs, s.name + ".npz"), rows, f)
                          for s, rows, f in zip(sequences, boxes, features)]
        results, seconds = run_tracker(sequences, tracker_inputs, tracker, options, folder, python,
                                       os.path.join(inputs, "job.json"),
                                       None if progress is None else (lambda line, label=label: progress(label, line)))
        identity = {"label": label} if model is None else {"label": label, **model.identity}
        runs.append(RunResult(label, identity, threshold, results, embed_seconds, seconds, frames))
        log(f"{label}: tracked {len(sequences)} sequences ({frames} frames) in {embed_seconds + seconds:.1f} s"
            + (f"; appearance threshold {threshold['distance']:.4f} ({threshold['source']})"
               if threshold.get("distance") is not None else ""))
    if all(s.gt_path for s in sequences):
        entries = [ScoredSequence(s.name, s.gt_path, s.length) for s in sequences]
        for run in runs:
            run.metrics = score_results(entries, run.results, os.path.join(output, "features", "scoring"), python)
    return runs


def run_tracker(sequences: Seq[Sequence], inputs: Seq[str], tracker: str, options: Dict[str, Any], folder: str,
                python: str, job_path: str, progress: Optional[Callable[[Dict[str, Any]], None]] = None
                ) -> Tuple[Dict[str, str], float]:
    """Run BoxMOT's `tracker` with `options` over `sequences` (their boxes and features in the ``.npz``
    files `inputs`) in the tracker environment; returns (sequence name -> result file in `folder`, the
    tracker's seconds). `progress` receives the environment's progress lines."""
    os.makedirs(folder, exist_ok=True)
    job = {"command": "track", "tracker": tracker, "options": options, "sequences": [
        {"name": s.name, "length": s.length, "width": s.width, "height": s.height, "detections": path,
         "output": os.path.join(folder, s.name + ".txt"),
         "frames": [s.frame_path(k) for k in range(1, s.length + 1)] if _needs_frames(tracker, options) else None}
        for s, path in zip(sequences, inputs)]}
    seconds = [0.0]

    def on_line(line: Dict[str, Any]) -> None:
        if line.get("done"):
            seconds[0] += float(line["seconds"])
        if progress is not None:
            progress(line)

    run_side(python, job, job_path, on_line)
    return {s.name: os.path.join(folder, s.name + ".txt") for s in sequences}, seconds[0]


def _stage(progress: Optional[Callable[[str, Dict[str, Any]], None]], label: str, sequence: str):
    """`progress` lines for the features of one sequence, as the tracker environment prints its own."""
    if progress is None:
        return None

    def report(done: int, total: int) -> None:
        progress(label, {"sequence": sequence, "stage": "features", "frame": done, "length": total,
                         **({"done": True} if done == total else {})})

    return report


def _needs_frames(tracker: str, options: Dict[str, Any]) -> bool:
    """Whether the tracker looks at the pixels (camera-motion compensation); else it gets a blank frame."""
    if tracker == "botsort":
        return bool(options.get("use_cmc", True))
    if tracker == "deepocsort":
        return not bool(options.get("cmc_off", False))
    if tracker == "boosttrack":
        return bool(options.get("use_cmc", True))
    return tracker == "hybridsort"  # its camera-motion compensation (cmc_method) has no off switch


def differences(runs: Seq[RunResult], metrics: Seq[str] = ("HOTA", "AssA", "IDF1", "IDSW")
                ) -> Dict[str, Dict[str, float]]:
    """Each run's COMBINED `metrics` minus motion only's (empty without a scored motion-only run)."""
    base = next((r for r in runs if r.label == MOTION_ONLY and r.metrics), None)
    if base is None:
        return {}
    ref = base.metrics["COMBINED"]
    return {r.label: {m: r.metrics["COMBINED"][m] - ref[m] for m in metrics}
            for r in runs if r.metrics and r.label != MOTION_ONLY}


def tracked_models(models: Seq[AppearanceModel], tracker: str) -> Tuple[Optional[AppearanceModel], ...]:
    """The runs of one call: motion only first (the baseline, where the tracker has a motion-only
    mode), then each model."""
    return ((None,) if check_tracker(tracker).motion_options is not None else ()) + tuple(models)


__all__ = ["DEFAULT_TRACKER", "DETECTION_SOURCES", "MOTION_ONLY", "RunResult", "TRACKERS", "TrackerKind",
           "check_boxes", "check_tracker", "differences", "gate_threshold", "run_tracker", "sequence_detections", "thresholds_file", "track_runs",
           "tracked_models"]
