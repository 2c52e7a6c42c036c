"""MARS (Zheng et al., ECCV 2016): 1,261 identities, 6 cameras, about 20,000 tracklets.

Layout (searched as ``root/mars``, ``root/MARS``, then ``root`` itself)::

    <root>/mars/
        bbox_train/0001/0001C1T0001F001.jpg ...     one folder per person id (first 4 characters)
        bbox_test/0000/..., bbox_test/00-1/..., ...  0000 = distractors, 00-1 = junk
        info/train_name.txt   info/test_name.txt     one frame file name per line
        info/tracks_train_info.mat  (track_train_info)   N x 4: start, end, pid, camera
        info/tracks_test_info.mat   (track_test_info)    start/end: 1-based, inclusive lines
        info/query_IDX.mat          (query_IDX)          1-based rows of track_test_info

A frame name is ``<pid 4><C><camera><T><tracklet 4><F><frame 3>.jpg``; the junk person's names
start with ``00-1``. The info files come from the MARS evaluation code (its ``info/`` folder).

Protocol (the official MATLAB evaluation): query = the test tracks at ``query_IDX``, gallery =
every other test track (the MATLAB code ranks all test tracks, the query's own among them, but
discards same-person same-camera tracks, so its metrics are the same). Gallery tracks of pid -1
are junk (ignored when ranking) and tracks of pid 0 are distractors (always wrong matches); both
stay in the gallery and are recorded in ``junk_pids`` / ``distractor_pids``. ``keep_junk=False``
drops the junk tracks instead, as torchreid does. Published counts (recalled, not checked here
against the release): train 625 ids / 8,298 tracklets, query 1,980 tracklets, 12,180 test
tracklets in all.
"""
from __future__ import annotations

import os
import re
from typing import Dict, List, Set, Tuple

import numpy as np

from reid.data.datasets.base import DatasetFormatError, DatasetNotFoundError, find_dataset_dir

from .files import read_mat_array, read_name_list, require_file
from .tracklets import VIDEO_DATASET_REGISTRY, Tracklet, VideoReIDDataset, check_tracklet

LAYOUT = """\
  <root>/mars/                        (or <root>/MARS/, or <root> itself)
      bbox_train/0001/0001C1T0001F001.jpg ...
      bbox_test/0000/..., bbox_test/00-1/..., bbox_test/0002/...
      info/train_name.txt, info/test_name.txt
      info/tracks_train_info.mat, info/tracks_test_info.mat, info/query_IDX.mat"""

_NAME_RE = re.compile(r"^(\d{4}|00-1)C(\d)T(\d+)F(\d+)\.\w+$")
_HINT = "use the info/ files of the MARS evaluation code with the images of the same MARS release."
NUM_CAMS = 6
JUNK_PID, DISTRACTOR_PID = -1, 0


def parse_mars_names(names: List[str], list_path: str) -> Tuple[np.ndarray, np.ndarray]:
    """Person ids and 1-based cameras of MARS frame names; a bad name is a one-line error."""
    pids = np.empty(len(names), np.int64)
    cams = np.empty(len(names), np.int64)
    for i, name in enumerate(names):
        m = _NAME_RE.match(name)
        if m is None:
            raise DatasetFormatError(f"{list_path}, line {i + 1}: {name!r} is not a MARS frame name such as "
                                     f"0001C1T0001F001.jpg; {_HINT}")
        pids[i] = JUNK_PID if m.group(1) == "00-1" else int(m.group(1))
        cams[i] = int(m.group(2))
    return pids, cams


def check_track_info(info: np.ndarray, names: List[str], pids: np.ndarray, cams: np.ndarray,
                     info_path: str, list_path: str) -> None:
    """Check that every row of `info` (start, end, pid, camera) names frames of `list_path` of its
    own pid and camera; the first bad row is a one-line DatasetFormatError naming both files."""
    if info.ndim != 2 or info.shape[1] != 4:
        raise DatasetFormatError(f"{info_path}: expected an N x 4 array (start, end, pid, camera), got shape "
                                 f"{tuple(info.shape)}; {_HINT}")
    start, end, pid, cam = info.T
    bad = np.flatnonzero((start < 1) | (end > len(names)) | (start > end))
    if bad.size:
        r = int(bad[0])
        raise DatasetFormatError(f"{info_path}, row {r + 1}: frames {start[r]}..{end[r]} are outside the "
                                 f"{len(names)} lines of {list_path}; {_HINT}")
    bad = np.flatnonzero((cam < 1) | (cam > NUM_CAMS))
    if bad.size:
        r = int(bad[0])
        raise DatasetFormatError(f"{info_path}, row {r + 1}: camera {cam[r]} is outside 1..{NUM_CAMS}; {_HINT}")
    lengths = end - start + 1
    row_of = np.repeat(np.arange(len(info)), lengths)
    # Line index of every frame of every row: each row's start, plus the offset inside its run.
    offsets = np.arange(row_of.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    line = start[row_of] - 1 + offsets
    wrong = np.flatnonzero((pids[line] != pid[row_of]) | (cams[line] != cam[row_of]))
    if wrong.size:
        k = int(wrong[0])
        r, n = int(row_of[k]), int(line[k])
        raise DatasetFormatError(f"{info_path}, row {r + 1} (pid {pid[r]}, camera {cam[r]}): frame {names[n]!r} "
                                 f"(line {n + 1} of {list_path}) belongs to pid {pids[n]}, camera {cams[n]}; "
                                 f"{_HINT}")


def check_images(home: str, names: List[str]) -> List[str]:
    """Paths of `names` under `home/<first 4 characters>/`; a missing one is a one-line
    DatasetNotFoundError. Each person folder is listed once (a million stat calls would not be)."""
    present: Set[str] = set()
    for folder in sorted({n[:4] for n in names}):
        path = os.path.join(home, folder)
        if os.path.isdir(path):
            with os.scandir(path) as it:
                present.update(f"{folder}/{e.name}" for e in it)
    wanted = [f"{n[:4]}/{n}" for n in names]
    missing = set(wanted) - present
    if missing:
        first = next(w for w in wanted if w in missing)
        raise DatasetNotFoundError(f"MARS image {os.path.join(home, first)!r} does not exist ({len(missing)} "
                                   f"listed images are missing under {home}); extract the complete "
                                   f"{os.path.basename(home)} folder of the MARS release.")
    return [os.path.join(home, w) for w in wanted]


def tracks_of(info: np.ndarray, paths: List[str], info_path: str) -> List[Tracklet]:
    """One tracklet per row of checked `info`: frames in name-list order, 0-based camera."""
    out = []
    for r, (start, end, pid, cam) in enumerate(info.tolist()):
        frames = check_tracklet(paths[start - 1:end], f"{info_path} row {r + 1}")
        out.append((frames, int(pid), int(cam) - 1))
    return out


def load_mars_subset(dataset_dir: str, subset: str) -> List[Tracklet]:
    """Checked tracklets of subset "train" or "test", in the order of its info file's rows."""
    info_dir = os.path.join(dataset_dir, "info")
    list_path = os.path.join(info_dir, f"{subset}_name.txt")
    info_path = os.path.join(info_dir, f"tracks_{subset}_info.mat")
    require_file(info_path, "MARS file", _HINT)
    names = read_name_list(list_path, _HINT)
    pids, cams = parse_mars_names(names, list_path)
    info = read_mat_array(info_path, f"track_{subset}_info", _HINT)
    check_track_info(info, names, pids, cams, info_path, list_path)
    paths = check_images(os.path.join(dataset_dir, f"bbox_{subset}"), names)
    return tracks_of(info, paths, info_path)


def query_rows(dataset_dir: str, num_test: int) -> np.ndarray:
    """0-based test-track rows of ``info/query_IDX.mat``, checked against `num_test` tracks."""
    path = os.path.join(dataset_dir, "info", "query_IDX.mat")
    idx = read_mat_array(path, "query_IDX", _HINT).ravel()
    bad = np.flatnonzero((idx < 1) | (idx > num_test))
    if bad.size:
        raise DatasetFormatError(f"{path}: query index {idx[bad[0]]} is outside the {num_test} tracks of "
                                 f"tracks_test_info.mat (1-based); {_HINT}")
    uniq, counts = np.unique(idx, return_counts=True)
    if (counts > 1).any():
        raise DatasetFormatError(f"{path}: query index {uniq[counts > 1][0]} is listed twice; {_HINT}")
    return idx - 1


@VIDEO_DATASET_REGISTRY.register("mars")
class MARS(VideoReIDDataset):
    """MARS from its release folder and the evaluation code's ``info/``; see the module docstring."""

    name = "mars"
    candidates = ("mars", "MARS", "")
    junk_pids = (JUNK_PID,)
    distractor_pids = (DISTRACTOR_PID,)

    def __init__(self, root: str = "datasets", keep_junk: bool = True) -> None:
        self.dataset_dir = find_dataset_dir(root, self.candidates, ("bbox_train", "bbox_test", "info"), "MARS",
                                            LAYOUT)
        train = load_mars_subset(self.dataset_dir, "train")
        test = load_mars_subset(self.dataset_dir, "test")
        rows = query_rows(self.dataset_dir, len(test))
        in_query = np.zeros(len(test), bool)
        in_query[rows] = True
        query = [test[i] for i in rows.tolist()]
        gallery = [t for t, q in zip(test, in_query.tolist()) if not q and (keep_junk or t[1] != JUNK_PID)]
        super().__init__(train, query, gallery)
        counts: Dict[str, int] = {"junk_gallery_tracklets": sum(t[1] == JUNK_PID for t in gallery),
                                  "distractor_gallery_tracklets": sum(t[1] == DISTRACTOR_PID for t in gallery)}
        self.test_notes.update(counts, junk_kept=keep_junk)
