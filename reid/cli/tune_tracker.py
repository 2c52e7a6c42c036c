"""Tune a BoxMOT tracker's settings for one re-ID model on sequences with ground truth, and see
whether the gain holds on sequences held out of the tuning.

The crops are embedded once; each trial tracks the same boxes with settings drawn (Optuna's TPE,
seeded) from the ranges BoxMOT documents for the tracker (configs/trackers/<name>.yaml in the
tracker environment) and is scored by TrackEval. Trial 0 is what tools/track.py does unasked
(BoxMOT's defaults, the model's appearance gate calibrated from the ground truth), so the tuned
settings are never worse on the tuning sequences; --test-sequences says whether they carry over.

Writes, under --output: tracker_settings.json (the best settings: tools/track.py --tracker-config
takes it), trials.json (every trial's settings and scores) and summary.md (track.py's settings
against the tuned ones, on the tuning and the held-out sequences).

Examples:
    python tools/make_sequences.py --output datasets/synth_tune --seed 1
    python tools/make_sequences.py --output datasets/synth_heldout --seed 2
    python tools/tune_tracker.py --sequences datasets/synth_tune --test-sequences datasets/synth_heldout \\
        --run output/demo --trials 30 --output output/tune
    python tools/track.py --sequences datasets/synth_heldout --run output/demo \\
        --tracker-config output/tune/tracker_settings.json --output output/track_tuned

See docs/tracking.md, "Tuning a tracker for a model".
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import List, Optional

from reid.tracking.options import DEFAULT_TRACKER, DETECTION_SOURCES, TRACKER_NAMES, TRACKER_PYTHON_HELP

from .args import float_in, int_in, parse_args, tool_parser
from .interrupts import run_stoppable
from .model_args import add_model_arguments, check_model_arguments
from .sequence_args import add_convention_argument, add_input_arguments, add_threads_argument, with_threads

SETTINGS_FILE = "tracker_settings.json"
SHOWN = ("HOTA", "IDF1", "AssA", "IDSW")


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    add_input_arguments(p, "MOTChallenge sequences with gt/gt.txt to tune on (a sequence or a folder of them)")
    p.add_argument("--test-sequences", metavar="DIR",
                   help="sequences with ground truth held out of the tuning, to score track.py's and the tuned "
                        "settings on")
    p.add_argument("--output", required=True, metavar="DIR", help="folder for the settings, trials and summary")
    add_model_arguments(p)
    add_convention_argument(p)
    add_threads_argument(p)
    p.add_argument("--no-reid", action="store_true", help="tune motion only (no appearance model)")
    p.add_argument("--tracker", default=DEFAULT_TRACKER, choices=TRACKER_NAMES,
                   help=f"BoxMOT tracker (default: {DEFAULT_TRACKER})")
    p.add_argument("--trials", type=int_in(1, 1000), default=30, metavar="N",
                   help="tracker runs at most, track.py's settings first (default: 30)")
    p.add_argument("--timeout", type=float_in(0, None, "a number of seconds", open_low=True), metavar="SECONDS",
                   help="stop starting trials after this long (default: no limit)")
    p.add_argument("--objective", choices=("HOTA", "IDF1"), default="HOTA",
                   help="TrackEval's figure to maximise over the tuning sequences (default: HOTA)")
    p.add_argument("--detections", default="det", choices=DETECTION_SOURCES,
                   help="det: each sequence's det/det.txt (default); gt: its ground-truth boxes")
    p.add_argument("--far", type=float_in(0, 1, "a false-accept rate", open_low=True, open_high=True), default=1e-2,
                   help="false-accept rate of the calibrated appearance gate of trial 0 (default: 0.01)")
    p.add_argument("--seed", type=int_in(0), default=0, help="seed of the sampler (default: 0)")
    p.add_argument("--tracker-python", metavar="PYTHON",
                   help=TRACKER_PYTHON_HELP)
    p.add_argument("--quiet", action="store_true", help="no per-trial lines")
    return p


def _row(name: str, where: str, figures: dict) -> str:
    return f"| {name} | {where} | " + " | ".join(
        f"{figures[m]:d}" if m == "IDSW" else f"{figures[m]:.2f}" for m in SHOWN) + " |"


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)
    check_model_arguments(parser, args)
    named = bool(args.weights or args.run or args.config_file)
    if named == args.no_reid:
        parser.error("name one re-ID model (--weights FILE, --run DIR or --config-file FILE), or pass --no-reid")

    def work() -> None:
        from reid.tracking.appearance import load_appearance_models
        from reid.tracking.outputs import claim_output
        from reid.tracking.sequences import find_sequences
        from reid.tracking.tracker_env import tracker_python
        from reid.tracking.tracker_options import read_spec, spec_path
        from reid.tracking.tracker_runs import check_tracker, sequence_detections
        from reid.tracking.tracker_tuning import (base_options, prepare, require_optuna, score_settings,
                                                  search_space, tune)
        from reid.tracking.videos import VIDEO_FOLDER, find_videos, video_sequences
        from reid.utils.file_io import atomic_write_text

        log = (lambda _: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
        require_optuna()
        kind = check_tracker(args.tracker)
        if args.no_reid and kind.motion_options is None:
            raise ValueError(f"--tracker {args.tracker} has no motion-only mode; name a re-ID model, or use --tracker "
                             "botsort or deepocsort with --no-reid.")
        videos = find_videos(args.video, need=args.detections) if args.video else None
        sequences = None if videos else find_sequences(args.sequences)
        held_out = find_sequences(args.test_sequences) if args.test_sequences else []
        for s in (sequences or []) + held_out:
            if not s.gt_path:
                raise ValueError(f"{s.root}: no gt/gt.txt; tuning scores every trial against the ground truth, so "
                                 "every sequence needs one.")
        inputs = (videos or [args.sequences]) + ([args.test_sequences] if args.test_sequences else [])
        lock = claim_output(args.output, "tune_tracker", inputs=inputs, writes=["trials", "features", VIDEO_FOLDER],
                            reports=[SETTINGS_FILE, "trials.json", "summary.md"])
        try:
            if videos:
                sequences = video_sequences(videos, args.output, log)
                if not all(s.gt_path for s in sequences):
                    raise ValueError("--video: every video needs its ground truth beside it (<name>.gt.txt) to be "
                                     "tuned on.")
            python = tracker_python(args.tracker_python, log=log)
            path = spec_path(python, args.tracker)
            if path is None:
                raise ValueError(f"the BoxMOT of {python} has no configs/trackers/{args.tracker}.yaml, whose ranges "
                                 "are the search space; use the tracker environment (docs/tracking.md).")
            boxes = [sequence_detections(s, args.detections) for s in sequences]
            model = None if args.no_reid else load_appearance_models(
                weights=[args.weights] if args.weights else [], run=args.run, config_file=args.config_file,
                opts=args.opts or None, device=args.device, input_convention=args.input_convention,
                crops=sum(len(b) for b in boxes), log=log)[0]
            features = os.path.join(args.output, "features")
            tuning = prepare(sequences, boxes, model, os.path.join(features, "tuning"))
            base = base_options(kind, model, tuning, args.far)
            result = tune(tuning, args.tracker, search_space(read_spec(path)), base, python,
                          os.path.join(args.output, "trials"), args.trials, args.objective, args.seed, args.timeout,
                          log)
            first = result.trials[0]["metrics"]
            best = result.best_trial
            rows = [_row("track.py's", "tuning", first), _row(f"tuned (trial {best['number']})", "tuning",
                                                              best["metrics"])]
            held: dict = {}
            if held_out:
                test = prepare(held_out, [sequence_detections(s, args.detections) for s in held_out], model,
                               os.path.join(features, "held_out"))
                for name, folder, settings in (("track.py's", "held_out_default", base_options(kind, model, test,
                                                                                                args.far)),
                                               ("tuned", "held_out_tuned", result.best)):
                    held[name] = score_settings(test, args.tracker, settings,
                                                os.path.join(args.output, "trials", folder), python)["COMBINED"]
                    rows.append(_row(name, "held out", held[name]))
            record = {"tracker": args.tracker, "options": result.best, "objective": args.objective,
                      "model": None if model is None else model.identity,
                      "tuned_on": [s.name for s in sequences], "held_out": [s.name for s in held_out],
                      "trials": len(result.trials), "tuning": {"track.py's": first, "tuned": best["metrics"]},
                      "held_out_scores": held}
            atomic_write_text(os.path.join(args.output, "trials.json"), json.dumps(result.trials, indent=1))
            head = ("settings", "sequences") + SHOWN
            summary = "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows])
            atomic_write_text(os.path.join(args.output, "summary.md"), summary + "\n")
            atomic_write_text(os.path.join(args.output, SETTINGS_FILE), json.dumps(record, indent=1))
        finally:
            lock.release()
        print(summary)
        print(f"wrote {os.path.join(args.output, SETTINGS_FILE)} (tools/track.py --tracker-config takes it), "
              "trials.json and summary.md")

    left = (f"{args.output} holds the trials finished so far and no {SETTINGS_FILE}; run the "
            "same command again.")
    return run_stoppable(with_threads(args.threads, work), left)


if __name__ == "__main__":
    sys.exit(main())
