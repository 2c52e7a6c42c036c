"""Link per-camera tracks into one identity per person across the cameras of a scene.

Takes each sequence's tracks (a tracker's MOTChallenge result files, ours or any tracker's, one
<sequence name>.txt per sequence in --tracks DIR; or --tracks gt: each sequence's ground truth with
its ids made camera-local, to measure the linking alone), pools one appearance feature per tracklet
(up to --crops-per-tracklet crops over its time, weighted by detection confidence, box inside the
image, box not covered by others, box height) and merges tracklets of the cameras of one scene
(seqinfo.ini scene=) by average-linkage clustering on cosine distance below a threshold:
--threshold D, or the distance at false-accept rate --far F (F 0.01 unless told) calibrated from the
ground truth when every sequence has it (as tools/track.py does), else the model's (thresholds.json
of the run, or the exported file's). Tracklets of one camera that overlap in time are never one person; --max-gap and
--transitions add time and camera-pair limits. A person no other camera saw keeps an identity of
their own.

Takes video files instead of sequence folders with --video (docs/tracking.md, "Videos in, pictures
out"); --save-video / --save-frames draw each sequence with its global ids into <output>/tracks/.

Writes <output>/tracks/<sequence name>.txt (global ids), <output>/identities.json and, when every
sequence has ground truth, <output>/metrics.json (multi-camera IDF1/IDP/IDR per scene: the cameras
concatenated in time, as AI City's MTMC evaluation; and per-camera metrics; scored by TrackEval).
See docs/tracking.md, "One identity across cameras".

Examples:
    python tools/make_sequences.py --output datasets/synth_mot --frames 40 --size 320x180
    # the linking alone: ground-truth tracklets, a trained run's calibrated threshold
    python tools/link_cameras.py --sequences datasets/synth_mot --tracks gt --run output/demo \\
        --output output/links
    # a tracker's results, a threshold of your choosing, at most 30 s between cameras
    python tools/link_cameras.py --sequences datasets/synth_mot --tracks output/track/results \\
        --weights model.pth --threshold 0.4 --max-gap 30 --output output/links
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Tuple

from reid.tracking.options import TRACKER_PYTHON_HELP

from .args import float_in, int_in, overrides, parse_args, tool_parser
from .interrupts import run_stoppable
from .model_args import add_model_arguments, check_model_arguments
from .sequence_args import (add_convention_argument, add_input_arguments, add_picture_arguments,
                            add_threads_argument, with_threads)

#: The false accept rate whose calibrated threshold is used when neither --threshold nor --far is given.
DEFAULT_FAR = 1e-2


def _calibrated_distance(args: argparse.Namespace, far: float, predictor=None) -> Tuple[float, str]:
    """The cosine distance threshold at `far` calibrated for the model (1 - its similarity) and where it
    is from: the thresholds.json beside its checkpoint (read before the model loads), or the thresholds
    the exported file that `predictor` runs carries."""
    from reid.inference.decision_thresholds import calibrated_similarity, model_similarity
    from reid.inference.loading import resolve_model

    other = "pass --threshold D (a cosine distance in (0, 2])"
    if predictor is not None:
        similarity, path, description = model_similarity(predictor, far, other=other)
    else:
        cfg, weights = resolve_model(args.run, args.config_file, args.weights, overrides(args) or None)
        similarity, path, description = calibrated_similarity(cfg, weights, far, other=other)
    print(f"threshold: cosine distance {1.0 - similarity:.4f} from {path}; {description}")
    return 1.0 - similarity, f"{path}; {description}"


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    add_input_arguments(p, "a MOTChallenge sequence, a folder of them, or a folder of such folders")
    p.add_argument("--tracks", required=True, metavar="DIR",
                   help="folder of per-camera result files <sequence name>.txt, or 'gt' (ground truth, ids made "
                        "camera-local)")
    p.add_argument("--output", required=True, metavar="DIR", help="folder for tracks/, identities.json, metrics.json")
    p.add_argument("--crops-per-tracklet", type=int_in(1, 1000), default=8, metavar="N",
                   help="crops pooled into a tracklet's feature, spread over its time (default: 8)")
    p.add_argument("--pooling", choices=("auto", "quality", "model"), default="auto",
                   help="how a tracklet's crops become one feature: quality, weighted by detection confidence, "
                        "visibility and size; model, the model's own temporal pooling (MODEL.VIDEO.TEMPORAL, PyTorch); "
                        "auto (default): model for a model trained on tracklets (video datasets), else quality")
    decide = p.add_mutually_exclusive_group()
    decide.add_argument("--threshold", type=float_in(0, 2, "a cosine distance", open_low=True), default=None, metavar="D",
                        help="link identities whose average cosine distance is below D, in (0, 2]")
    decide.add_argument("--far", type=float_in(0, 1, "a false accept rate", open_low=True, open_high=True), default=None, metavar="F",
                        help=f"the distance calibrated at false accept rate F: from the ground truth when every "
                             "sequence has it (its tracklets' pairs of different people), else thresholds.json next "
                             f"to --run / --weights (default: {DEFAULT_FAR:g} when --threshold is not given)")
    p.add_argument("--calibration", choices=("auto", "gt", "model"), default="auto",
                   help="where the threshold at --far comes from without --threshold: gt, the sequences' ground truth; "
                        "model, the model's thresholds.json (or its exported file's); auto (default): gt when every "
                        "sequence has it, else model")
    p.add_argument("--max-gap", type=float_in(0, None, "a number of seconds"), default=None, metavar="SECONDS",
                   help="tracklets of two cameras further apart in time are not linked (default: no limit)")
    p.add_argument("--transitions", metavar="FILE", default=None,
                   help='JSON of the camera pairs people walk between: {"transitions": [{"cameras": [1, 2], '
                        '"min_seconds": 0, "max_seconds": 60}]}; pairs not listed are not linked')
    p.add_argument("--no-metrics", action="store_true", help="do not score against the ground truth")
    p.add_argument("--tracker-python", metavar="PYTHON",
                   help=f"{TRACKER_PYTHON_HELP}, for the scores (docs/tracking.md)")
    add_picture_arguments(p, "<output>/tracks")
    add_model_arguments(p)
    add_convention_argument(p)
    add_threads_argument(p)
    return p


def main(argv=None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args)
    if not (args.run or args.weights or args.config_file):
        parser.error("name the appearance model: --run DIR, --weights FILE or --config-file FILE")

    def work() -> None:
        from reid.export.options import is_exported_file
        from reid.tracking.appearance import load_appearance_models
        from reid.tracking.cross_camera import LinkSettings, link_cameras, trackeval_score
        from reid.tracking.linking import load_transitions
        from reid.tracking.outputs import claim_output
        from reid.tracking.sequences import find_sequences
        from reid.tracking.tracker_env import tracker_python
        from reid.tracking.annotated import write_result_pictures
        from reid.tracking.videos import VIDEO_FOLDER, find_videos, video_ground_truth, video_sequences

        videos = find_videos(args.video, need="gt" if args.tracks == "gt" else None) if args.video else None
        sequences = None if videos else find_sequences(args.sequences)
        cameras = list(range(1, len(videos) + 1)) if videos else [s.camera for s in sequences]
        transitions = load_transitions(args.transitions).check_cameras(cameras, args.transitions) \
            if args.transitions else None
        # Without --threshold: the ground truth's threshold where every sequence has one (as track.py's), else the
        # model's calibrated one, checked as tools/search.py --far checks it: a checkpoint's before the model loads
        # (a refused one costs nothing), an exported file's once it is open (the file carries it).
        far, exported = DEFAULT_FAR if args.far is None else args.far, is_exported_file(args.weights or "")
        truth = all(video_ground_truth(v) for v in videos) if videos else all(s.gt_path for s in sequences)
        if args.calibration == "gt" and not truth:
            raise ValueError("--calibration gt: not every sequence has ground truth (gt/gt.txt, or <name>.gt.txt "
                             "beside a video); pass --calibration model or --threshold D.")
        from_truth = args.threshold is None and truth and args.calibration != "model"
        early = None
        if args.threshold is None and not from_truth and not exported:
            early = _calibrated_distance(args, far)
        inputs = (videos or [args.sequences]) + ([args.tracks] if args.tracks != "gt" else [])
        lock = claim_output(args.output, "link_cameras", inputs=inputs,
                            writes=["tracks", "multicamera", "scoring", VIDEO_FOLDER],
                            reports=["identities.json", "metrics.json"])
        try:
            if videos:
                sequences = video_sequences(videos, args.output)
            model = load_appearance_models(weights=[args.weights] if args.weights else [], run=args.run,
                                           config_file=args.config_file, opts=overrides(args) or None,
                                           device=args.device, input_convention=args.input_convention)[0]
            threshold = args.threshold if args.threshold is not None or from_truth else \
                (early or _calibrated_distance(args, far, model.predictor))[0]
            settings = LinkSettings(threshold, args.crops_per_tracklet, args.max_gap, transitions, far,
                                    args.pooling).check()
            scored = not args.no_metrics and all(s.gt_path for s in sequences)
            python = tracker_python(args.tracker_python) if scored else None

            def score(entries, results, workdir):
                return trackeval_score(entries, results, workdir, python)

            link_cameras(sequences, args.tracks, model, args.output, settings, score=score,
                         metrics=not args.no_metrics,
                         fallback=lambda: _calibrated_distance(args, far, model.predictor))
            if args.save_video or args.save_frames:
                pictures = write_result_pictures(sequences, os.path.join(args.output, "tracks"), args.save_video,
                                                 args.save_frames)
                print(f"wrote {len(pictures)} pictures of the tracks with their global ids")
        finally:
            lock.release()

    left = (f"{args.output} holds no identities.json (any tracks/ written so far are each "
            "whole); run the same command again to link them all.")
    return run_stoppable(with_threads(args.threads, work), left)


if __name__ == "__main__":
    sys.exit(main())
