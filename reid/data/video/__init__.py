"""Video re-ID datasets: tracklets (frame paths, pid, camid), one parser per dataset, each registered
in VIDEO_DATASET_REGISTRY with its official train/query/gallery protocol."""
from __future__ import annotations

from typing import Any

from .dukemtmc_video import DukeMTMCVideoReID
from .ilidsvid import ILIDSVID
from .mars import MARS
from .prid2011 import PRID2011
from .synthetic_video import SyntheticVideoDataset
from .tracklets import (
    VIDEO_DATASET_REGISTRY,
    Tracklet,
    VideoReIDDataset,
    check_tracklet,
)
from .video_folder import VideoFolderDataset


def build_video_dataset(name: str, root: str = "datasets", **kwargs: Any) -> VideoReIDDataset:
    """Build the video dataset registered as `name` from folder `root`.

    `kwargs` go to the dataset's constructor (``split_id`` for iLIDS-VID and PRID2011,
    ``keep_junk`` for MARS). An unknown name raises an UnknownNameError (a KeyError and a
    ValueError) listing the valid names. It lives here, not in tracklets.py, because the
    parsers register on import of this package and tracklets.py must not import it back.
    """
    return VIDEO_DATASET_REGISTRY.get(name)(root=root, **kwargs)

__all__ = [
    "DukeMTMCVideoReID",
    "ILIDSVID",
    "MARS",
    "PRID2011",
    "SyntheticVideoDataset",
    "Tracklet",
    "VIDEO_DATASET_REGISTRY",
    "VideoFolderDataset",
    "VideoReIDDataset",
    "build_video_dataset",
    "check_tracklet",
]
