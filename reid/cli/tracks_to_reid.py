"""Turn MOTChallenge sequences into re-ID training data: crops of ground-truth boxes, or of a tracker's tracklets.

With ground truth (each sequence's gt/gt.txt), the boxes of the chosen classes with the
`consider` flag 1, enough visibility and height, from every n-th frame, become a Market-1501
folder: bounding_box_train/, query/, bounding_box_test/ (identities split between train and test,
seeded; one query per test identity and camera), plus the same items as list files train.txt,
query.txt, gallery.txt ('path pid camid') and summary.json. Sequences whose seqinfo.ini name the
same scene= are cameras of one scene with global track ids; otherwise each sequence has its own ids.
The camera of a crop is its sequence's (seqinfo.ini camera=, else its place among its siblings).

With --tracks DIR (one <sequence name>.txt of tracker results per sequence, as TrackEval lays
them out), the tracklets' crops go to crops/ with crops.txt (for DATASETS.UNLABELLED.LIST) and
tracklets.csv; UDA.TRACKLET_REGEX keeps each tracklet in one cluster (see docs/datasets.md).

Examples:
    python tools/tracks_to_reid.py --sequences MOT17/train --output datasets/mot17-reid
    python tools/train.py --config-file configs/Market1501/resnet50_circle.yml \\
        DATASETS.ROOT datasets/mot17-reid OUTPUT_DIR output/mot17-reid
    # no ground truth: a tracker's results
    python tools/tracks_to_reid.py --sequences videos/ --tracks tracker_out/ --output datasets/my-crops
"""
from __future__ import annotations

import argparse
import sys

from .args import float_in, int_in, parse_args, tool_parser
from .interrupts import run_stoppable


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(__doc__)
    p.add_argument("--sequences", required=True, metavar="DIR",
                   help="a MOTChallenge sequence, a folder of them, or a folder of such folders (train/ test/)")
    p.add_argument("--output", required=True, metavar="DIR", help="folder to create (must not exist, or be empty)")
    p.add_argument("--tracks", metavar="DIR", default=None,
                   help="a tracker's result files (<sequence name>.txt): unlabelled crops with tracklet ids")
    p.add_argument("--classes", type=int_in(-1), nargs="+", default=[1], metavar="C",
                   help="gt classes kept (default: 1, pedestrian)")
    p.add_argument("--min-visibility", type=float_in(0, 1, "a fraction"), default=0.3, help="gt visibility at least (default: 0.3)")
    p.add_argument("--min-height", type=int_in(1, 100000), default=32, help="box height in pixels, clipped (default: 32)")
    p.add_argument("--frame-step", type=int_in(1, 100000), default=5, help="every n-th frame (default: 5)")
    p.add_argument("--train-fraction", type=float_in(0, 1, "a fraction"), default=0.5,
                   help="share of identities for training, the rest for query/gallery (default: 0.5)")
    p.add_argument("--seed", type=int_in(0), default=0, help="seed of the identity split and the queries (default: 0)")
    p.add_argument("--format", choices=("jpg", "png"), default="jpg", help="crop files (default: jpg)")
    return p


def main(argv=None) -> int:
    args = parse_args(build_parser(), argv)

    def work() -> None:
        from reid.tracking.sequences import find_sequences
        from reid.tracking.to_reid import CropSettings, gt_to_reid, tracks_to_crops

        settings = CropSettings(tuple(args.classes), args.min_visibility, args.min_height, args.frame_step,
                                args.train_fraction, args.seed, "." + args.format).check()
        sequences = find_sequences(args.sequences)
        if args.tracks:
            tracks_to_crops(sequences, args.tracks, args.output, settings)
        else:
            gt_to_reid(sequences, args.output, settings)

    return run_stoppable(work, f"nothing is in {args.output}: it is built aside and renamed when complete; "
                               "run the same command again.")


if __name__ == "__main__":
    sys.exit(main())
