"""Your own tracklets: ``root/train/``, ``root/query/``, ``root/gallery/`` (train optional).

Each subset folder describes its tracklets in one of three ways:

* a list file ``tracklets.txt``: lines ``folder pid camid`` (folder relative to the subset
  folder, no spaces; camid a non-negative camera label, used as is; ``#`` starts a comment line);
* one folder per tracklet named ``<pid>_c<camera>_<anything>`` (camera 1-based, as in
  Market-1501 names: ``0007_c2_morning`` is person 7, camera id 1);
* loose crops named ``<prefix>_c<camera>_t<track>_f<frame>.<ext>``, the names
  ``tools/tracks_to_reid.py`` gives its crops (``MOT17-02_c1_t000003_f000012.jpg``): the crops
  sharing ``<prefix>_c<camera>_t<track>`` are one tracklet, ordered by frame. The pid is the
  prefix when it is an integer (``0007_c1_t000003_f000012.jpg``), else -1 (identity unknown).

Without a list file, tracklet folders and loose crops may sit side by side. Pid -1 marks
tracklets of unknown identity: in query/gallery they are ignored when ranking (``junk_pids``);
a train folder must be all labelled or all unknown (then ``has_labels`` is False and the pids
are not relabelled: only learning without labels can use it).
"""
from __future__ import annotations

import os
import re
from collections import defaultdict
from typing import Dict, List, Tuple

from reid.data.datasets.base import DatasetFormatError, check_id, find_dataset_dir
from reid.data.image_io import is_image_file
from reid.utils.path_kinds import folder_problem
from reid.utils.text_files import text_lines

from .tracklets import VIDEO_DATASET_REGISTRY, Tracklet, VideoReIDDataset, check_tracklet, list_frames, natural_key

LAYOUT = """\
  <root>/
      train/     (optional)   0007_c1_walk/000001.jpg ...   or tracklets.txt, or loose crops
      query/                  <pid>_c<camera>_<anything>/<frames>
      gallery/                MOT17-02_c1_t000003_f000012.jpg ... (one tracklet per _c<cam>_t<track>)"""

LIST_FILE = "tracklets.txt"
UNKNOWN_PID = -1
_FOLDER_RE = re.compile(r"^(-?\d+)_c(\d+)(?:_.*)?$", re.S)
_CROP_RE = re.compile(r"^(?P<key>(?P<prefix>.*?)_c(?P<cam>\d+)_t\d+)_f\d+\.[^.]+$", re.S)
_INT_RE = re.compile(r"-?\d+")


def _camera(text: str, where: str) -> int:
    """0-based camera id of a 1-based camera number `text`."""
    cam = check_id(text, "camera number", where)
    if cam < 1:
        raise DatasetFormatError(f"{where}: camera c{cam} must be 1 or more (cameras are numbered from 1 in names).")
    return cam - 1


def read_tracklet_list(folder: str) -> List[Tracklet]:
    """Tracklets of ``folder/tracklets.txt`` (``folder pid camid`` lines)."""
    path = os.path.join(folder, LIST_FILE)
    out = []
    for lineno, line in text_lines(path, "Tracklet list"):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        where = f"{path}, line {lineno}"
        fields = text.split()
        if len(fields) != 3 or not _INT_RE.fullmatch(fields[1]) or not fields[2].isdigit():
            raise DatasetFormatError(f"{where}: {text[:120]!r} is not 'folder pid camid' (pid an integer, camid "
                                     "a non-negative integer); fix or remove the line.")
        track_dir = os.path.join(folder, fields[0])
        problem = folder_problem(track_dir)
        if problem is not None:
            raise DatasetFormatError(f"{where}: tracklet folder {track_dir!r} {problem}; fix the path (relative "
                                     "to the list's folder) or remove the line.")
        frames = check_tracklet(list_frames(track_dir), f"{track_dir!r} ({where})")
        out.append((frames, check_id(fields[1], "person id", where), check_id(fields[2], "camera id", where)))
    return out


def group_crops(folder: str, names: List[str]) -> List[Tracklet]:
    """Loose crops of `folder` grouped into tracklets by ``<prefix>_c<cam>_t<track>``."""
    groups: Dict[str, List[str]] = defaultdict(list)
    meta: Dict[str, Tuple[int, int]] = {}
    for name in names:
        m = _CROP_RE.match(name)
        path = os.path.join(folder, name)
        if m is None:
            raise DatasetFormatError(f"Cannot group crop {path!r} into a tracklet: expected a name such as "
                                     "MOT17-02_c1_t000003_f000012.jpg (or put tracklets in folders <pid>_c<camera>_"
                                     "<anything>); rename or remove it.")
        key, prefix = m.group("key"), m.group("prefix")
        pid = check_id(prefix, "person id", repr(path)) if _INT_RE.fullmatch(prefix) else UNKNOWN_PID
        meta[key] = (pid, _camera(m.group("cam"), repr(path)))
        groups[key].append(path)
    return [(tuple(sorted(groups[k], key=lambda p: natural_key(os.path.basename(p)))), *meta[k])
            for k in sorted(groups, key=natural_key)]


def scan_subset(folder: str) -> List[Tracklet]:
    """Tracklets of one subset folder: its list file, else its tracklet folders and loose crops."""
    if os.path.lexists(os.path.join(folder, LIST_FILE)):
        return read_tracklet_list(folder)
    with os.scandir(folder) as it:
        entries = [e for e in it if not e.name.startswith(".")]
    out = []
    for name in sorted((e.name for e in entries if e.is_dir()), key=natural_key):
        path = os.path.join(folder, name)
        m = _FOLDER_RE.match(name)
        if m is None:
            raise DatasetFormatError(f"Folder {path!r} is not a tracklet folder named <pid>_c<camera>_<anything> "
                                     "(e.g. 0007_c2_walk); rename it or list the tracklets in tracklets.txt.")
        frames = check_tracklet(list_frames(path), repr(path))
        out.append((frames, check_id(m.group(1), "person id", repr(path)), _camera(m.group(2), repr(path))))
    crops = [e.name for e in entries if e.is_file() and is_image_file(e.name)]
    return out + group_crops(folder, crops)


@VIDEO_DATASET_REGISTRY.register("video_folder")
class VideoFolderDataset(VideoReIDDataset):
    """A user's tracklets in train/query/gallery folders; see the module docstring."""

    name = "video_folder"
    junk_pids = (UNKNOWN_PID,)

    def __init__(self, root: str = "datasets") -> None:
        self.dataset_dir = find_dataset_dir(root, ("",), ("query", "gallery"), "video folder", LAYOUT)
        train_dir = os.path.join(self.dataset_dir, "train")
        train = scan_subset(train_dir) if os.path.isdir(train_dir) else []
        unknown = sum(t[1] == UNKNOWN_PID for t in train)
        if 0 < unknown < len(train):
            raise DatasetFormatError(f"{train_dir}: {unknown} of {len(train)} train tracklets have no identity "
                                     "(pid -1); label them or move them out, a train folder is all labelled or "
                                     "all unlabelled.")
        #: False when the train tracklets carry no identities (learning without labels only).
        self.has_labels = unknown == 0
        query = scan_subset(os.path.join(self.dataset_dir, "query"))
        gallery = scan_subset(os.path.join(self.dataset_dir, "gallery"))
        super().__init__(train, query, gallery, relabel=self.has_labels)
