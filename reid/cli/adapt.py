"""Adapt a re-ID model to a site from the site's own videos, without labels, and see what it changed.

One command runs the whole recipe (docs/adapt.md), each stage into its own folder of --output:
  1-track-before/  the sequences tracked with the model (tools/track.py's files in track/) and their
                   cameras linked into identities (tools/link_cameras.py's files in links/)
  2-crops/         the tracker's tracklets as unlabelled crops with tracklet and camera ids (unlabelled/)
  3-adapt/         the model trained on them without labels (adapted/: a tools/train.py run of the
                   model's own config plus UDA settings; --opts KEY VALUE ... change any of them)
  4-track-after/   stage 1 again with the adapted model: same tracker, settings and detections
  report.json, report.md   HOTA and IDF1 per sequence and combined (TrackEval) and the multi-camera
                   IDF1, before and after, with the differences (where the sequences have ground truth)

Stopped anywhere (Ctrl-C, SIGTERM, a full disk), the same command continues: complete stages are
skipped, a stopped training continues exactly where it stopped (tools/train.py --resume); a command
with other settings than the recorded ones is refused, naming the setting.

Examples:
    # cameras the demo model was not trained on, and the recipe on them
    python tools/make_sequences.py --output datasets/synth_shift --style shift
    python tools/adapt.py --sequences datasets/synth_shift --run output/demo --output output/adapt
    # video files (cam1.mp4 with cam1.det.txt beside it, ...), StrongSORT, 20 epochs
    python tools/adapt.py --video videos/lobby --weights model.pth --tracker strongsort --epochs 20 \\
        --output output/adapt_lobby
    # any training setting: --opts KEY VALUE ... (applied last)
    python tools/adapt.py --sequences datasets/synth_shift --run output/demo --output output/adapt2 \\
        --opts UDA.EPS 0.45 DATALOADER.NUM_WORKERS 0
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, List, Optional, Sequence

from reid.inference.options import BACKEND_NAMES
from reid.tracking.options import DEFAULT_TRACKER, DETECTION_SOURCES, TRACKER_NAMES, TRACKER_PYTHON_HELP

from .args import command_line, float_in, int_in, parse_args, tool_parser
from .errors import error_text
from .interrupts import run_stoppable
from .model_args import CONFIG_HELP, RUN_HELP
from .sequence_args import add_input_arguments, add_threads_argument
from .track import _Bars, _option

DEFAULT_EPOCHS = 10  # reid.adapt.DEFAULT_EPOCHS (not imported: --help answers before torch loads)
#: Keys whose values are the recipe's own (where stage 3 reads and writes, what it starts from).
RECIPE_KEYS = ("OUTPUT_DIR", "MODEL.WEIGHTS", "DATASETS.NAMES", "DATASETS.UNLABELLED.LIST", "DATASETS.UNLABELLED.DIR")


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    add_input_arguments(p, "a MOTChallenge sequence folder, or a folder of them (the cameras of the site)")
    p.add_argument("--output", required=True, metavar="DIR",
                   help="folder for the stages and the report (new, empty, or an earlier run's of this tool)")
    model = p.add_argument_group("model to adapt (one of: --run DIR | --weights FILE | --config-file FILE "
                                 "[--weights FILE])")
    model.add_argument("--run", metavar="DIR", help=RUN_HELP)
    model.add_argument("--weights", metavar="FILE", help="a checkpoint of this toolkit (it stores its config), or "
                                                         "with --config-file a foreign one")
    model.add_argument("--config-file", metavar="FILE", help=CONFIG_HELP)
    p.add_argument("--tracker", default=DEFAULT_TRACKER, choices=TRACKER_NAMES,
                   help=f"BoxMOT tracker of both tracking stages (default: {DEFAULT_TRACKER})")
    p.add_argument("--detections", default="det", choices=DETECTION_SOURCES,
                   help="det: each sequence's det/det.txt (default); gt: its ground-truth boxes")
    p.add_argument("--tracker-option", type=_option, action="append", default=[], metavar="KEY=VALUE",
                   help="a BoxMOT tracker setting, e.g. use_cmc=false (repeatable); as tools/track.py takes it")
    p.add_argument("--tracker-python", metavar="PYTHON",
                   help=TRACKER_PYTHON_HELP)
    p.add_argument("--link-threshold", type=float_in(0, 2, "a cosine distance", open_low=True), metavar="D",
                   help="link tracklets across cameras below this cosine distance (default: calibrated at 1%% false "
                        "accepts from the ground truth, else from the model's thresholds.json)")
    p.add_argument("--crops-per-tracklet", type=int_in(1, 1000), default=8, metavar="N",
                   help="crops pooled into a tracklet's feature for linking (default: 8)")
    p.add_argument("--frame-step", type=int_in(1, 100000), default=5, metavar="N",
                   help="a crop from every N-th frame of each tracklet for training (default: 5)")
    p.add_argument("--min-height", type=int_in(1, 100000), default=32, metavar="PIXELS",
                   help="crops at least this tall (after clipping to the frame) for training (default: 32)")
    p.add_argument("--epochs", type=int_in(1, 10000), default=DEFAULT_EPOCHS,
                   help=f"epochs of training without labels (default: {DEFAULT_EPOCHS}; each one pass over the crops)")
    p.add_argument("--opts", nargs="+", default=[], metavar="KEY VALUE",
                   help="training config overrides, applied last (e.g. UDA.EPS 0.45 DATALOADER.NUM_WORKERS 0)")
    p.add_argument("--device", default=None,
                   help="'cpu', 'cuda', 'cuda:N' or 'auto' for tracking and training (default: the model's MODEL.DEVICE)")
    p.add_argument("--backend", default=None, choices=BACKEND_NAMES,
                   help="runtime of the model in the tracking stages (default: as tools/track.py chooses it)")
    add_threads_argument(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars or stage lines (errors and the summary stay)")
    return p


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not (args.run or args.weights or args.config_file):
        parser.error("name the model to adapt: --run DIR, --weights FILE or --config-file FILE")
    if args.run and args.config_file:
        parser.error("--run and --config-file both name a config: the run has its own config.yaml")
    if len(args.opts) % 2:
        parser.error(f"--opts takes KEY VALUE pairs; got {len(args.opts)} words: {' '.join(args.opts)}")
    owned = sorted(set(args.opts[0::2]) & set(RECIPE_KEYS))
    if owned:
        parser.error(f"--opts {owned[0]}: the recipe sets it (its stages' folders and the model named by "
                     "--run / --weights); leave it out")


def main(argv: Optional[List[str]] = None, hooks: Sequence[Any] = ()) -> int:
    """Run (or continue) the recipe; returns the exit code. `hooks`: training hooks for stage 3, as
    ``reid.cli.train.main`` takes them."""
    parser = build_parser()
    args = parse_args(parser, argv)
    _check(parser, args)
    log = (lambda _: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))

    def work() -> int:
        from reid.adapt import AdaptRequest, ModelSpec, StageStopped, run_recipe, summary_line

        request = AdaptRequest(
            output=args.output, sequences=args.sequences, videos=args.video,
            model=ModelSpec(args.run, args.weights, args.config_file), tracker=args.tracker,
            detections=args.detections, tracker_options=dict(args.tracker_option),
            link_threshold=args.link_threshold, crops_per_tracklet=args.crops_per_tracklet,
            frame_step=args.frame_step, min_height=args.min_height, epochs=args.epochs, opts=list(args.opts),
            device=args.device, backend=args.backend, threads=args.threads, tracker_python=args.tracker_python,
            command=command_line(argv, "tools/adapt.py"), progress=_Bars(args.quiet), log=log)
        try:
            report = run_recipe(request, hooks)
        except StageStopped as e:
            print(error_text(e), file=sys.stderr)
            return e.exit_code
        print(summary_line(report))
        print(f"wrote {os.path.join(args.output, 'report.md')} and report.json")
        return 0

    left = (f"the stages completed so far stay in {args.output} (each with its done.json); run the same command "
            "again to continue from the stage that was stopped.")
    return run_stoppable(work, left)


if __name__ == "__main__":
    sys.exit(main())
