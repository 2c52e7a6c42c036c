"""DukeMTMC-VideoReID (Wu et al., CVPR 2018): 1,812 identities, 8 cameras, one tracklet per folder.

Layout (searched as ``root/dukemtmc-videoreid/DukeMTMC-VideoReID``, ``root/DukeMTMC-VideoReID``,
``root/dukemtmc-videoreid``, then ``root`` itself)::

    <root>/dukemtmc-videoreid/DukeMTMC-VideoReID/
        train/0001/0001/0001_C6_F0001_X00001.jpg ...   <pid>/<tracklet>/<frames>
        query/...
        gallery/...

The person id is the pid folder's number; the camera is the ``C<n>`` field of the frame names
(1..8, the same for every frame of a tracklet); frames are ordered by their names, whose ``F``
field is the frame number. The release's own split is the protocol (no alternatives): train 702
ids / 2,196 tracklets, query 702 tracklets, gallery 2,636 tracklets of 1,110 ids (published
counts, not checked here against the release).
"""
from __future__ import annotations

import os
import re
from typing import List

from reid.data.datasets.base import DatasetFormatError, find_dataset_dir

from .tracklets import VIDEO_DATASET_REGISTRY, Tracklet, VideoReIDDataset, check_tracklet, list_frames
from .two_cameras import person_folders

LAYOUT = """\
  <root>/dukemtmc-videoreid/DukeMTMC-VideoReID/   (or <root>/DukeMTMC-VideoReID/, or <root> itself)
      train/0001/0001/0001_C6_F0001_X00001.jpg ...
      query/<pid>/<tracklet>/...
      gallery/<pid>/<tracklet>/..."""

SUBSETS = ("train", "query", "gallery")
NUM_CAMS = 8
_FRAME_RE = re.compile(r"^\d+_C(\d+)_F\d+")
_HINT = "frames are named like 0001_C6_F0001_X00001.jpg; remove or rename the file."


def tracklet_camera(frames: tuple, folder: str) -> int:
    """The 0-based camera of the frames of one tracklet folder; one-line errors for a name that
    does not parse, a camera outside 1..8, or frames of different cameras."""
    cams = set()
    for path in frames:
        m = _FRAME_RE.match(os.path.basename(path))
        if m is None:
            raise DatasetFormatError(f"Cannot read the camera of frame {path!r}: {_HINT}")
        cams.add(int(m.group(1)))
    if len(cams) > 1:
        raise DatasetFormatError(f"Tracklet folder {folder!r} mixes cameras {sorted(cams)}; a tracklet comes from "
                                 "one camera: move the other frames to their own tracklet folder.")
    cam = cams.pop()
    if not 1 <= cam <= NUM_CAMS:
        raise DatasetFormatError(f"Tracklet folder {folder!r}: camera C{cam} is outside C1..C{NUM_CAMS}; check "
                                 "that it belongs to DukeMTMC-VideoReID.")
    return cam - 1


def load_duke_subset(folder: str) -> List[Tracklet]:
    """Tracklets of one subset folder (``<pid>/<tracklet>/<frames>``)."""
    out = []
    for pid_name in person_folders(folder):
        if not pid_name.isdigit():
            raise DatasetFormatError(f"Folder {os.path.join(folder, pid_name)!r} is not a person id folder such "
                                     "as '0001'; remove or rename it.")
        pid_dir = os.path.join(folder, pid_name)
        for track in person_folders(pid_dir):
            track_dir = os.path.join(pid_dir, track)
            frames = check_tracklet(list_frames(track_dir), repr(track_dir))
            out.append((frames, int(pid_name), tracklet_camera(frames, track_dir)))
    return out


@VIDEO_DATASET_REGISTRY.register("dukemtmc_videoreid")
class DukeMTMCVideoReID(VideoReIDDataset):
    """DukeMTMC-VideoReID from its release folder; see the module docstring."""

    name = "dukemtmc_videoreid"
    candidates = ("dukemtmc-videoreid/DukeMTMC-VideoReID", "DukeMTMC-VideoReID", "dukemtmc-videoreid", "")

    def __init__(self, root: str = "datasets") -> None:
        self.dataset_dir = find_dataset_dir(root, self.candidates, SUBSETS, "DukeMTMC-VideoReID", LAYOUT)
        super().__init__(*(load_duke_subset(os.path.join(self.dataset_dir, s)) for s in SUBSETS))
