"""The inputs and pictures of the tracking tools: ``--sequences DIR`` or ``--video FILE ...``, and
``--save-video`` / ``--save-frames`` (reid/tracking/videos.py, reid/tracking/annotated.py)."""
from __future__ import annotations

import argparse


def add_input_arguments(p: argparse.ArgumentParser, sequences_help: str) -> None:
    """``--sequences DIR`` or ``--video FILE [FILE ...]``, one of them required."""
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--sequences", metavar="DIR", help=sequences_help)
    given.add_argument("--video", nargs="+", metavar="FILE",
                       help="video files or folders of them instead of --sequences, cameras 1, 2, ... in this order: "
                            "each with its detections beside it as <name>.det.txt (and its ground truth, if any, as "
                            "<name>.gt.txt); decoded once into <output>/videos/")


def add_picture_arguments(p: argparse.ArgumentParser, where: str) -> None:
    """``--save-video`` and ``--save-frames``: every sequence with its tracks drawn, into `where`."""
    p.add_argument("--save-video", action="store_true",
                   help=f"write each sequence with every track's box, id and colour drawn: {where}/<sequence>.mp4")
    p.add_argument("--save-frames", action="store_true",
                   help=f"the same pictures as frame images: {where}/<sequence>/000001.jpg ...")


def add_convention_argument(p: argparse.ArgumentParser) -> None:
    """``--input-convention``: how to feed an exported file that records none (another exporter's)."""
    p.add_argument("--input-convention", choices=("raw", "boxmot"), default=None,
                   help="an exported file that records no input convention (not written by tools/export.py) is "
                        "refused unless named: raw (RGB pixels 0-255) or boxmot (RGB / 255, ImageNet mean and std)")
