"""The part of tracking that runs in the tracker environment: BoxMOT's trackers and TrackEval's scores.

BoxMOT pins versions that conflict with this toolkit's (OpenCV < 5, gdown < 6), so its
trackers, and TrackEval beside them, run in a separate Python (reid/tracking/tracker_env.py)
that executes this file by path. It imports neither ``reid`` nor anything of ours but
``boxmot_compat.py`` beside it (what differs between the supported BoxMOT versions, standard
library only; a script's folder is on its ``sys.path``): the jobs come as one JSON file and the
detections and their re-ID features as ``.npz`` files, which this toolkit wrote after embedding
each frame's crops in one batch (so changing the re-ID model changes only the features handed
over, never the detections). The job's tracker options carry BoxMOT 25's names; an older BoxMOT
gets them in its own.

    python boxmot_side.py JOB.json

``track`` jobs write one MOTChallenge result file per sequence and print one JSON line per
progress step (``{"sequence", "frame", "length"}``) and per finished sequence (``{"done",
"seconds"}``) on stdout. ``score`` jobs run TrackEval's MotChallenge2DBox (HOTA, CLEAR,
Identity) and write the figures as JSON. An error ends with exit code 2 and one line on stderr.
"""
import json
import os
import sys
import time

import numpy as np

import boxmot_compat


def _boxmot_version():
    import boxmot

    return boxmot_compat.check_version(boxmot.__version__, "the tracker environment: ")


def _tracker(name, options, version):
    """A fresh BoxMOT tracker `name` with BoxMOT's tuned defaults and `options` (our names) over them."""
    options = boxmot_compat.to_installed(name, options, version)
    if not boxmot_compat.uses_structures(version):  # 23: the name and keyword arguments; features come with update
        from boxmot.trackers.registry import create_tracker

        _check_settings(name, options, version)
        return create_tracker(name, tracker_kwargs=dict(options), precomputed_reid=True)
    from boxmot import create_tracker
    from boxmot.trackers.specs import TrackerSpec

    spec = TrackerSpec(name=name, options=tuple(sorted((str(k), v) for k, v in options.items())))
    return create_tracker(spec)


def _check_settings(name, options, version):
    """A ValueError for a setting that BoxMOT `version`'s tracker `name` does not have: before 25 its trackers take
    any keyword and drop the unknown ones unsaid (a renamed setting would be ignored)."""
    import inspect
    from boxmot.trackers.config import load_tracker_config
    from boxmot.trackers.registry import get_tracker_class

    known = set(load_tracker_config(name))
    for klass in inspect.getmro(get_tracker_class(name)):
        if "__init__" in vars(klass):
            known.update(p.name for p in inspect.signature(klass.__init__).parameters.values()
                         if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL))
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"BoxMOT {version}'s {name} has no setting {unknown[0]!r}")


def _update(tracker, boxes, scores, features, sample_id, image, version):
    """One frame through `tracker`: its tracks as (x1 y1 x2 y2 array, ids, scores)."""
    if not boxmot_compat.uses_structures(version):
        dets = np.zeros((len(scores), 6), np.float32)  # x1 y1 x2 y2 conf cls
        if len(scores):
            dets[:, :4], dets[:, 4] = boxes, scores
        embs = None if features is None else np.ascontiguousarray(features, dtype=np.float32)
        out = np.asarray(tracker.update(dets, image, embs), dtype=np.float64).reshape(-1, 8)
        return out[:, :4], out[:, 4].astype(np.int64), out[:, 5]
    out = tracker.update(_detections(boxes, scores, features, sample_id), image)
    if not len(out):
        return np.zeros((0, 4)), np.zeros(0, np.int64), np.zeros(0)
    return out.geometry.values.numpy().astype(np.float64), out.track_ids.numpy(), out.scores.numpy()


def _detections(boxes, scores, features, sample_id):
    """One frame's boxes (x1, y1, x2, y2), scores and features as BoxMOT's Detections (25 on)."""
    import torch
    from boxmot.structures import Boxes, Detections

    return Detections(
        geometry=Boxes(torch.from_numpy(np.ascontiguousarray(boxes, dtype=np.float32))),
        scores=torch.from_numpy(np.ascontiguousarray(scores, dtype=np.float32)),
        class_ids=torch.zeros(len(scores), dtype=torch.int64),
        sample_id=sample_id,
        embeddings=None if features is None else torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)),
    )


def _frame_image(seq, frame, blank):
    """The frame's BGR image where the tracker looks at pixels (the job lists the files), else `blank`."""
    if not seq.get("frames"):
        return blank
    import cv2

    image = cv2.imread(seq["frames"][frame - 1], cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError(f"{seq['frames'][frame - 1]}: not a readable image")
    return image


def track_sequence(job, seq):
    """Run one fresh tracker over one sequence; returns the result rows and the tracker's seconds."""
    data = np.load(seq["detections"])
    frames, boxes, scores = data["frame"], data["boxes"], data["scores"]
    features = data["features"] if "features" in data.files else None
    version = _boxmot_version()
    tracker = _tracker(job["tracker"], job.get("options", {}), version)
    blank = np.zeros((int(seq["height"]), int(seq["width"]), 3), np.uint8)
    order = np.argsort(frames, kind="stable")
    frames, boxes, scores = frames[order], boxes[order], scores[order]
    features = None if features is None else features[order]
    starts = np.searchsorted(frames, np.arange(1, seq["length"] + 2))
    rows, seconds = [], 0.0
    step = max(1, seq["length"] // 20)
    for frame in range(1, seq["length"] + 1):
        a, b = starts[frame - 1], starts[frame]
        t0 = time.perf_counter()  # the frame's reading (for camera-motion compensation) counts as tracking
        image = _frame_image(seq, frame, blank)
        xyxy, ids, conf = _update(tracker, boxes[a:b], scores[a:b], None if features is None else features[a:b],
                                  f"{seq['name']}:{frame}", image, version)
        seconds += time.perf_counter() - t0
        for (x1, y1, x2, y2), tid, c in zip(xyxy, ids, conf):
            rows.append((frame, int(tid), x1, y1, x2 - x1, y2 - y1, float(c)))
        if frame % step == 0 or frame == seq["length"]:
            print(json.dumps({"sequence": seq["name"], "frame": frame, "length": seq["length"]}), flush=True)
    return rows, seconds


def write_rows(path, rows):
    """MOTChallenge result lines, sorted by (frame, id), written atomically."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        for frame, tid, x, y, w, h, c in sorted(rows, key=lambda r: (r[0], r[1])):
            f.write(f"{frame},{tid},{x:.2f},{y:.2f},{w:.2f},{h:.2f},{c:.4f},-1,-1,-1\n")
    os.replace(tmp, path)


def run_track(job):
    """Track every sequence of a ``track`` job, one fresh tracker each."""
    for seq in job["sequences"]:
        rows, seconds = track_sequence(job, seq)
        write_rows(seq["output"], rows)
        print(json.dumps({"sequence": seq["name"], "done": True, "seconds": seconds, "rows": len(rows)}), flush=True)


def _mean(values):
    """TrackEval's HOTA family is an array over localisation thresholds: its mean is the figure."""
    return float(np.mean(values)) if np.ndim(values) else float(values)


def run_score(job):
    """Score a ``score`` job with TrackEval's MotChallenge2DBox; figures in percent, IDSW a count."""
    import trackeval

    eval_config = trackeval.Evaluator.get_default_eval_config()
    eval_config.update({"USE_PARALLEL": False, "PRINT_RESULTS": False, "PRINT_ONLY_COMBINED": True,
                        "PRINT_CONFIG": False, "TIME_PROGRESS": False, "DISPLAY_LESS_PROGRESS": True,
                        "OUTPUT_SUMMARY": False, "OUTPUT_EMPTY_CLASSES": False, "OUTPUT_DETAILED": False,
                        "PLOT_CURVES": False, "BREAK_ON_ERROR": True, "LOG_ON_ERROR": os.devnull})
    data_config = trackeval.datasets.MotChallenge2DBox.get_default_dataset_config()
    data_config.update({"GT_FOLDER": job["gt_folder"], "TRACKERS_FOLDER": job["trackers_folder"],
                        "OUTPUT_FOLDER": job["output_folder"], "TRACKERS_TO_EVAL": [job["tracker"]],
                        "CLASSES_TO_EVAL": ["pedestrian"], "BENCHMARK": "MOT17", "SPLIT_TO_EVAL": "train",
                        "SKIP_SPLIT_FOL": True, "TRACKER_SUB_FOLDER": "data", "OUTPUT_SUB_FOLDER": "",
                        "SEQ_INFO": {k: int(v) for k, v in job["sequences"].items()},
                        "GT_LOC_FORMAT": "{gt_folder}/{seq}/gt/gt.txt", "DO_PREPROC": True, "PRINT_CONFIG": False})
    stdout = sys.stdout
    sys.stdout = sys.stderr  # TrackEval prints its progress; stdout is ours
    try:
        evaluator = trackeval.Evaluator(eval_config)
        metrics = [trackeval.metrics.HOTA(), trackeval.metrics.CLEAR(), trackeval.metrics.Identity()]
        results, _ = evaluator.evaluate([trackeval.datasets.MotChallenge2DBox(data_config)], metrics)
    finally:
        sys.stdout = stdout
    out = {}
    for seq, by_class in results["MotChallenge2DBox"][job["tracker"]].items():
        r = by_class["pedestrian"]
        hota, clear, ident = r["HOTA"], r["CLEAR"], r["Identity"]
        out["COMBINED" if seq == "COMBINED_SEQ" else seq] = {
            "HOTA": 100 * _mean(hota["HOTA"]), "DetA": 100 * _mean(hota["DetA"]), "AssA": 100 * _mean(hota["AssA"]),
            "IDF1": 100 * float(ident["IDF1"]), "IDP": 100 * float(ident["IDP"]), "IDR": 100 * float(ident["IDR"]),
            "IDSW": int(clear["IDSW"]), "MOTA": 100 * float(clear["MOTA"]),
        }
    tmp = job["output"] + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    os.replace(tmp, job["output"])


def main(argv):
    """Run the job file argv[1]; 0, or 2 with one line on stderr."""
    with open(argv[1], encoding="utf-8") as f:
        job = json.load(f)
    try:
        {"track": run_track, "score": run_score}[job["command"]](job)
    except Exception as e:  # the caller shows this one line under its own message
        sys.stderr.write(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}\n")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
