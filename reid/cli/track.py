"""Track MOTChallenge sequences with BoxMOT's trackers and a re-ID model of this toolkit, and see
what the model does to tracking: HOTA, DetA, AssA, IDF1, IDSW and MOTA from TrackEval, for
motion only and for each model, with each model's difference to motion only.

The same detections (det/det.txt, or the ground truth's boxes with --detections gt) are
tracked once per model; each model embeds the crops of a frame in one batch, and the tracker's
appearance threshold is calibrated for that model (from the ground truth when there is one,
else from the model's thresholds.json) and reported. BoxMOT and TrackEval run in a separate
Python environment, made once on first use (docs/tracking.md).

Writes, under --output: <model>/<sequence>.txt (MOT result files), metrics.json (per sequence
and overall, thresholds, speed), summary.md (the table) and tracking_gain.png; with --save-video
/ --save-frames, <model>/<sequence>.mp4 / <model>/<sequence>/ with every track drawn. Video files
(--video, detections beside each as <name>.det.txt) are decoded into videos/ first.

Examples:
    # motion only against the demo model, on the synthetic multi-camera sequences
    python tools/make_sequences.py --output datasets/synth_mot
    python tools/track.py --sequences datasets/synth_mot --run output/demo --output output/track
    # several models in one table (checkpoints and exported files), DeepOCSORT
    python tools/track.py --sequences MOT17/train --weights a.pth osnet.onnx --tracker deepocsort --output out/t
    # motion only
    python tools/track.py --sequences datasets/synth_mot --no-reid --output output/track_motion
    # video files (cam1.mp4 with cam1.det.txt beside it, ...), an annotated video of each run
    python tools/track.py --video videos/lobby --run output/demo --output output/track_lobby --save-video

See docs/tracking.md.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional

from reid.inference.options import BACKEND_NAMES
from reid.tracking.options import DEFAULT_TRACKER, DETECTION_SOURCES, TRACKER_NAMES, TRACKER_PYTHON_HELP

from .args import float_in, int_in, parse_args, tool_parser
from .errors import error_text
from .interrupts import run_stoppable
from .model_args import add_model_arguments, check_model_arguments
from .sequence_args import (add_convention_argument, add_input_arguments, add_picture_arguments,
                            add_threads_argument, with_threads)



def _option(text: str) -> Any:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. use_cmc=false)")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value
    except RecursionError:  # 50,000 nested brackets: no tracker setting is that deep
        raise argparse.ArgumentTypeError(f"{key}=...: a value nested too deep to be a tracker setting") from None


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    add_input_arguments(p, "a MOTChallenge sequence folder, or a folder of them (MOT17/train, ...)")
    p.add_argument("--output", required=True, metavar="DIR", help="folder for the results, metrics and plot")
    add_model_arguments(p, override_example="TEST.IMS_PER_BATCH 64", many_weights=True)
    add_convention_argument(p)
    p.add_argument("--no-reid", action="store_true", help="motion only (the baseline; always run beside models)")
    p.add_argument("--tracker", default=None, choices=TRACKER_NAMES,
                   help=f"BoxMOT tracker (default: --tracker-config's, else {DEFAULT_TRACKER})")
    p.add_argument("--tracker-config", metavar="FILE",
                   help="tracker_settings.json of tools/tune_tracker.py: its tracker and settings (--tracker-option "
                        "given beside it wins)")
    p.add_argument("--detections", default="det", choices=DETECTION_SOURCES,
                   help="det: each sequence's det/det.txt (default); gt: its ground-truth boxes")
    p.add_argument("--backend", default=None, choices=BACKEND_NAMES,
                   help="torch, onnxruntime or openvino (default: an .onnx file's own; a checkpoint exported to "
                        "onnxruntime on a CPU from 2000 crops on when it is installed and TEST.FLIP / TEST.AMP are off, "
                        "else torch; a .pt2 file runs with torch)")
    p.add_argument("--input-size", nargs=2, type=int_in(16, 1024), metavar=("H", "W"),
                   help="crop size handed to the model (default: the model's)")
    p.add_argument("--appearance-threshold", type=float_in(0, 2, "a cosine distance", open_low=True), metavar="D",
                   help="cosine-distance gate for appearance matches instead of the calibrated one")
    p.add_argument("--far", type=float_in(0, 1, "a false-accept rate", open_low=True, open_high=True), default=1e-2,
                   help="false-accept rate at which the appearance threshold is calibrated (default: 0.01)")
    p.add_argument("--tracker-option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                   help="a BoxMOT tracker setting, e.g. use_cmc=false or track_buffer=60 (repeatable); checked "
                        "against the tracker's settings in BoxMOT's configs/trackers/<name>.yaml")
    p.add_argument("--tracker-python", metavar="PYTHON",
                   help=TRACKER_PYTHON_HELP)
    add_threads_argument(p)
    add_picture_arguments(p, "<output>/<model>")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


class _Bars:
    """One progress bar per (model, sequence), fed by the tracker environment's progress lines."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.bars: Dict[Any, Any] = {}

    def __call__(self, label: str, line: Dict[str, Any]) -> None:
        if self.quiet or "sequence" not in line:
            return
        from tqdm import tqdm

        stage = line.get("stage", "tracking")
        key = (label, line["sequence"], stage)
        bar = self.bars.get(key)
        if bar is None and "frame" in line:
            bar = self.bars[key] = tqdm(total=line["length"], desc=f"{label} | {line['sequence']} | {stage}",
                                        unit="frame", file=sys.stderr, leave=False)
        if bar is not None and "frame" in line:
            bar.update(line["frame"] - bar.n)
        if line.get("done") and bar is not None:
            self.bars.pop(key).close()


def _tracker_settings(args: argparse.Namespace) -> None:
    """--tracker and --tracker-option completed from --tracker-config (the options given beside it win)."""
    if args.tracker_config:
        from reid.tracking.tracker_options import read_settings_file

        tracker, options = read_settings_file(args.tracker_config)
        if tracker not in TRACKER_NAMES:
            raise ValueError(f"{args.tracker_config}: tracker {tracker!r} is not one of {', '.join(TRACKER_NAMES)}.")
        if args.tracker not in (None, tracker):
            raise ValueError(f"--tracker-config {args.tracker_config} holds settings of {tracker}, not of --tracker "
                             f"{args.tracker}; leave --tracker out, or tune {args.tracker} with tools/tune_tracker.py.")
        args.tracker = tracker
        args.tracker_option = list(options.items()) + args.tracker_option
    args.tracker = args.tracker or DEFAULT_TRACKER


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    try:
        _tracker_settings(args)
    except (ValueError, OSError) as e:
        print(error_text(e), file=sys.stderr)
        return 1
    check_model_arguments(parser, args, lists=("weights",), per_weights=True)
    named = bool(args.weights or args.run or args.config_file)
    if not named and not args.no_reid:
        parser.error("name a re-ID model (--weights FILE ..., --run DIR or --config-file FILE), or pass --no-reid "
                     "for motion only")
    if args.no_reid and args.tracker == "strongsort":
        parser.error("--tracker strongsort needs an appearance model and has no motion-only mode; use --tracker "
                     "botsort or deepocsort with --no-reid")
    if args.weights and len(args.weights) > 1 and (args.run or args.config_file):
        parser.error("several --weights are several models, each naming its own config; leave --run / "
                     "--config-file out (or give one --weights)")

    def work() -> None:
        from reid.tracking.appearance import label_folder, load_appearance_models
        from reid.tracking.tracker_runs import (check_boxes, check_tracker, sequence_detections, track_runs,
                                                tracked_models)
        from reid.tracking.report import REPORT_FILES, table, write_report
        from reid.tracking.sequences import find_sequences
        from reid.tracking.outputs import claim_output
        from reid.tracking.tracker_env import tracker_python
        from reid.tracking.tracker_options import check_options_in_env
        from reid.tracking.annotated import write_result_pictures
        from reid.tracking.videos import VIDEO_FOLDER, find_videos, video_sequences

        log = (lambda _: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
        if args.appearance_threshold is not None and check_tracker(args.tracker).threshold_option is None:
            raise ValueError(f"--appearance-threshold: {args.tracker} has no appearance gate (appearance is one weight "
                             "of its cost), so the value would be ignored; leave it out, or use --tracker botsort or "
                             "strongsort.")
        # Bad files fail before any work: sequences whole, videos as far as reading them takes (decoding is work).
        videos = find_videos(args.video, need=args.detections) if args.video else None
        sequences = None if videos else find_sequences(args.sequences)
        boxes = None if videos else [sequence_detections(s, args.detections) for s in sequences]
        if boxes is not None:
            check_boxes(sequences, boxes, args.detections, log)
        # Held for the whole run: another tool's results, or a second run at once, are refused before any work.
        lock = claim_output(args.output, "track", inputs=videos or [args.sequences],
                            writes=["features", VIDEO_FOLDER], reports=REPORT_FILES)
        try:
            if videos:
                sequences = video_sequences(videos, args.output, log)
                boxes = [sequence_detections(s, args.detections) for s in sequences]
                check_boxes(sequences, boxes, args.detections, log)
            # the tracker's settings are checked against its BoxMOT before any crop is embedded
            python = tracker_python(args.tracker_python, log=log)
            check_options_in_env(dict(args.tracker_option), python, args.tracker,
                                 check_tracker(args.tracker).threshold_option, log=log)
            models = load_appearance_models(args.weights or (), run=args.run, config_file=args.config_file,
                                            opts=args.opts, device=args.device, backend=args.backend,
                                            input_size=args.input_size,
                                            input_convention=args.input_convention,
                                            crops=sum(len(b) for b in boxes), log=log,
                                            weight_configs=getattr(args, "weight_configs", None)) if named else []
            runs = track_runs(sequences, tracked_models(models, args.tracker), args.tracker, args.output, python,
                              detections=args.detections, appearance_threshold=args.appearance_threshold,
                              far=args.far, tracker_options=dict(args.tracker_option), progress=_Bars(args.quiet),
                              log=log, boxes=boxes)
            pictures = [p for run in runs for p in write_result_pictures(
                sequences, os.path.join(args.output, label_folder(run.label)), args.save_video, args.save_frames)
            ] if args.save_video or args.save_frames else []
            settings = {"sequences": args.sequences or os.path.join(args.output, VIDEO_FOLDER), "videos": videos,
                        "tracker": args.tracker, "detections": args.detections, "far": args.far,
                        "tracker_config": args.tracker_config, "tracker_options": dict(args.tracker_option),
                        "sequence_names": [s.name for s in sequences]}
            paths = write_report(runs, args.output, settings)
        finally:
            lock.release()
        print(table(runs))
        if not any(r.metrics for r in runs):
            print("no scores: not every sequence has gt/gt.txt (result files written)")
        print("wrote " + ", ".join(paths) + (f" and {len(pictures)} pictures of the tracks" if pictures else ""))

    left = (f"{args.output} holds the result files finished so far, each whole, and no "
            "metrics.json or summary.md; run the same command again to redo the run.")
    return run_stoppable(with_threads(args.threads, work), left)


if __name__ == "__main__":
    sys.exit(main())
