"""Draw synthetic multi-camera MOTChallenge sequences: test and demo data for tracking.

People of the demo's synthetic dataset (its identity distribution and camera looks) walk
through the cameras of one scene, crossing and occluding each other, leaving and coming back,
and appearing in other cameras. Writes one sequence per camera, <output>/<scene>-c<k>/ with
seqinfo.ini, img1/000001.jpg..., gt/gt.txt (global ids: one person = one id in every camera;
visibility after occlusion and the image border) and det/det.txt (noisy detections: misses,
more when occluded; false positives; jittered boxes; a confidence), plus
<output>/sequences.json with the settings and per-camera counts. The same seed gives the same
files, byte for byte.

Examples:
    # the default set: 2 cameras x 150 frames of 640x360
    python tools/make_sequences.py --output datasets/synth_mot
    # a tiny set (seconds), three cameras, cleaner detections
    python tools/make_sequences.py --output /tmp/tiny --cameras 3 --frames 40 --size 320x180 \\
        --miss-rate 0.05 --false-positives 0.2 --jitter 1
    # a crowded scene: more people per frame needs more identities
    python tools/make_sequences.py --output datasets/crowd --identities 40 --people-per-frame 12
    # cameras the demo model was not trained on (a domain shift, for tools/adapt.py)
    python tools/make_sequences.py --output datasets/synth_shift --style shift

See docs/tracking.md.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import List, Optional, Tuple

from reid.tracking.scene_settings import SequenceSettings

from .args import parse_args, tool_parser
from .interrupts import run_stoppable


def _size(text: str) -> Tuple[int, int]:
    match = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 640x360")
    return int(match.group(1)), int(match.group(2))


def build_parser() -> argparse.ArgumentParser:
    d = SequenceSettings()  # its defaults, shown by --help
    p = tool_parser(__doc__)
    p.add_argument("--output", required=True, metavar="DIR", help="folder for the sequences (created)")
    p.add_argument("--cameras", type=int, default=d.cameras, help=f"cameras of the scene, 1-8 (default {d.cameras})")
    p.add_argument("--identities", type=int, default=d.identities,
                   help=f"people in the scene (default {d.identities})")
    p.add_argument("--frames", type=int, default=d.frames, help=f"frames per camera, synchronised (default {d.frames})")
    p.add_argument("--size", type=_size, default=(d.width, d.height), metavar="WxH",
                   help=f"frame size (default {d.width}x{d.height})")
    p.add_argument("--people-per-frame", type=float, default=d.people_per_frame,
                   help=f"mean people in view per camera (default {d.people_per_frame:g})")
    p.add_argument("--frame-rate", type=float, default=d.frame_rate, help=f"frames per second (default {d.frame_rate:g})")
    p.add_argument("--miss-rate", type=float, default=d.miss_rate,
                   help=f"detections: miss probability of a fully visible person (default {d.miss_rate:g})")
    p.add_argument("--false-positives", type=float, default=d.false_positives,
                   help=f"detections: mean false boxes per frame (default {d.false_positives:g})")
    p.add_argument("--jitter", type=float, default=d.jitter,
                   help=f"detections: box edge noise std in pixels for a 100-pixel-tall person (default {d.jitter:g})")
    p.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    p.add_argument("--style", default=d.style, choices=("demo", "shift", "views"),
                   help=f"how people and cameras are drawn (default {d.style}: the demo model's training domain); "
                        "shift: another domain (other garment hues, paler; dim backgrounds; darker, colour-cast, "
                        "blurrier, noisier cameras, seeded per camera), on which the demo model has not trained; "
                        "views: shift plus one side of the people per camera (DATASETS.SYNTHETIC.STYLE's domains)")
    p.add_argument("--scene", default=d.scene, help=f"scene name: folders are <scene>-c<k> (default {d.scene})")
    p.add_argument("--overwrite", action="store_true", help="replace existing sequence folders of the same names")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parse_args(parser, argv)

    def work() -> None:
        from reid.tracking.synthetic_sequences import SUMMARY_FILE, make_sequences

        settings = SequenceSettings(
            cameras=args.cameras, identities=args.identities, frames=args.frames, width=args.size[0],
            height=args.size[1], people_per_frame=args.people_per_frame, frame_rate=args.frame_rate,
            miss_rate=args.miss_rate, false_positives=args.false_positives, jitter=args.jitter, seed=args.seed,
            scene=args.scene, style=args.style).check()
        log = (lambda _: None) if args.quiet else (lambda m: print(m, file=sys.stderr, flush=True))
        summary = make_sequences(args.output, settings, overwrite=args.overwrite, log=log)
        print(f"wrote {len(summary['sequences'])} sequences and {SUMMARY_FILE} to {args.output}")

    return run_stoppable(work, "each sequence folder is whole or absent (drawn aside, renamed when done) and "
                               "sequences.json is written last; run the same command with --overwrite.")


if __name__ == "__main__":
    sys.exit(main())
