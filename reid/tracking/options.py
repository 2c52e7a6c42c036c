"""What a user chooses when tracking: names only, so that a program's ``--help`` answers without
loading numpy or torch."""
from typing import Tuple

from .boxmot_compat import NEWEST, OLDEST, VERSION_VARIABLE

#: BoxMOT's trackers that take an appearance model (``reid.tracking.tracker_runs.TRACKERS`` drives each).
TRACKER_NAMES: Tuple[str, ...] = ("botsort", "deepocsort", "strongsort", "boosttrack", "hybridsort")
DEFAULT_TRACKER = "botsort"
#: What a sequence's boxes come from: its det/det.txt, or its ground truth as perfect detections.
DETECTION_SOURCES: Tuple[str, ...] = ("det", "gt")
#: What ``--tracker-python`` takes, for the tools' ``--help``.
TRACKER_PYTHON_HELP = (f"a Python with boxmot[trackeval] {OLDEST} to {NEWEST} (default: the tracker environment, "
                       f"made once, with BoxMOT {NEWEST} or ${VERSION_VARIABLE})")

__all__ = ["DEFAULT_TRACKER", "DETECTION_SOURCES", "TRACKER_NAMES", "TRACKER_PYTHON_HELP"]
