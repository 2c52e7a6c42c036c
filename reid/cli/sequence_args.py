"""The inputs and pictures of the tracking tools: ``--sequences DIR`` or ``--video FILE ...``, and
``--save-video`` / ``--save-frames`` (reid/tracking/videos.py, reid/tracking/annotated.py)."""
from __future__ import annotations

import argparse
from typing import Any, Callable

from .args import int_in

#: CPU threads of the tracking tools' models: one frame's crops per call, where a second thread only adds
#: hand-offs, and on a busy 2-core machine two threads collapse (torch 10.1 frames/s against 28.3 at one;
#: ONNX Runtime 75.7 against 100.2: docs/benchmarks.md, "Embedding for a tracker on a busy machine").
TRACKING_THREADS = 1


def add_input_arguments(p: argparse.ArgumentParser, sequences_help: str, required: bool = True,
                        decoded_into: str = "<output>") -> None:
    """``--sequences DIR`` or ``--video FILE [FILE ...]``, one of them required (unless `required` is False: a
    tool that takes them for some inputs only checks that itself); videos are decoded into `decoded_into`/videos/."""
    given = p.add_mutually_exclusive_group(required=required)
    given.add_argument("--sequences", metavar="DIR", help=sequences_help)
    given.add_argument("--video", nargs="+", metavar="FILE",
                       help="video files or folders of them instead of --sequences, cameras 1, 2, ... in this order: "
                            "each with its detections beside it as <name>.det.txt (and its ground truth, if any, as "
                            f"<name>.gt.txt); decoded once into {decoded_into}/videos/")


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


def add_threads_argument(p: argparse.ArgumentParser) -> None:
    """``--threads N``: the CPU threads of torch and ONNX Runtime, :data:`TRACKING_THREADS` unless told."""
    p.add_argument("--threads", type=int_in(1, 256), default=TRACKING_THREADS,
                   help=f"CPU threads of torch and ONNX Runtime (default: {TRACKING_THREADS}: a frame's few crops per "
                        "call gain little from more, and more collapse when another process is busy; "
                        "docs/benchmarks.md)")


def with_threads(threads: int, work: Callable[[], Any]) -> Callable[[], Any]:
    """`work` run with torch at `threads` CPU threads (ONNX Runtime sessions made inside take torch's count),
    the count restored after."""
    def run() -> Any:
        from reid.utils.device import torch_threads

        with torch_threads(int(threads)):
            return work()

    return run
