"""Writes tiny releases of the video re-ID datasets, laid out and named like the real ones.

Every frame is the same few-byte image (only names and folders matter to the parsers); the .mat
files are real MATLAB files written by scipy, with doubles as MATLAB saves them.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Sequence, Tuple

import cv2
import numpy as np
from scipy.io import savemat

_IMAGES: Dict[str, bytes] = {}


def _image(ext: str) -> bytes:
    if ext not in _IMAGES:
        ok, buf = cv2.imencode(ext, np.full((8, 4, 3), 127, np.uint8))
        assert ok
        _IMAGES[ext] = buf.tobytes()
    return _IMAGES[ext]


def write_frames(folder: str, names: Sequence[str]) -> List[str]:
    """Write a tiny image per name into `folder` (created); returns the paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name in names:
        path = os.path.join(folder, name)
        with open(path, "wb") as f:
            f.write(_image(os.path.splitext(name)[1]))
        paths.append(path)
    return paths


# ------------------------------------------------------------------------------------------ MARS
#: (pid, camera 1-based, tracklet number, frames) per track, in info-file order.
MARS_TRAIN = [(1, 1, 1, 3), (1, 2, 1, 2), (3, 1, 2, 4)]
MARS_TEST = [(2, 1, 1, 3), (2, 2, 1, 2), (4, 3, 1, 2), (4, 1, 2, 2), (0, 1, 1, 2), (-1, 2, 1, 1)]
#: 1-based rows of MARS_TEST that are queries.
MARS_QUERY_IDX = [1, 3]


def mars_name(pid: int, cam: int, track: int, frame: int) -> str:
    """A MARS frame name: ``0001C1T0001F001.jpg``; the junk person is ``00-1``."""
    return f"{'00-1' if pid == -1 else f'{pid:04d}'}C{cam}T{track:04d}F{frame:03d}.jpg"


def write_mars(root: str) -> Dict[str, object]:
    """A MARS folder ``root/mars``; returns its paths and name lists."""
    folder = os.path.join(str(root), "mars")
    info_dir = os.path.join(folder, "info")
    os.makedirs(info_dir)
    out: Dict[str, object] = {"dir": folder}
    for subset, tracks in (("train", MARS_TRAIN), ("test", MARS_TEST)):
        names, rows = [], []
        for pid, cam, track, count in tracks:
            start = len(names) + 1
            names += [mars_name(pid, cam, track, f) for f in range(1, count + 1)]
            rows.append([start, len(names), pid, cam])
        for name in names:
            write_frames(os.path.join(folder, f"bbox_{subset}", name[:4]), [name])
        with open(os.path.join(info_dir, f"{subset}_name.txt"), "w") as f:
            f.write("".join(n + "\n" for n in names))
        savemat(os.path.join(info_dir, f"tracks_{subset}_info.mat"),
                {f"track_{subset}_info": np.array(rows, np.float64)})
        out[f"{subset}_names"] = names
        out[f"{subset}_rows"] = rows
    savemat(os.path.join(info_dir, "query_IDX.mat"), {"query_IDX": np.array([MARS_QUERY_IDX], np.float64)})
    return out


# ------------------------------------------------------------------------------------- iLIDS-VID
#: Person numbers present in both cameras (not contiguous, as in the release).
ILIDS_PEOPLE = [1, 2, 4, 5, 7, 9]


def ilids_frames(cam: int, person: int) -> int:
    """How many frames person `person` has in camera `cam` (differs, so counts can be checked)."""
    return 2 + (person + cam) % 3


def ilids_splits() -> np.ndarray:
    """10 rows of 1-based indices into ILIDS_PEOPLE: row 0 in order, row 1 fixed, others seeded."""
    rng = np.random.default_rng(5)
    rows = [np.arange(1, 7), np.array([6, 4, 2, 1, 3, 5])] + [rng.permutation(6) + 1 for _ in range(8)]
    return np.stack(rows).astype(np.float64)


def write_ilidsvid(root: str, people: Sequence[int] = ILIDS_PEOPLE) -> str:
    """An iLIDS-VID folder ``root/ilids-vid``; returns it."""
    folder = os.path.join(str(root), "ilids-vid")
    for cam in (1, 2):
        for p in people:
            # frame numbers start where the original videos put them, not at 1
            names = [f"cam{cam}_person{p:03d}_{317 + k:05d}.png" for k in range(ilids_frames(cam, p))]
            write_frames(os.path.join(folder, "i-LIDS-VID", "sequences", f"cam{cam}", f"person{p:03d}"), names)
    split_dir = os.path.join(folder, "train-test people splits")
    os.makedirs(split_dir)
    savemat(os.path.join(split_dir, "train_test_splits_ilidsvid.mat"), {"ls_set": ilids_splits()})
    return folder


# -------------------------------------------------------------------------------------- PRID2011
def prid_frames(cam: str, person: int) -> int:
    """How many frames person `person` has in camera `cam` (few: 400 folders are written)."""
    return 1 + (person % 7 == 0 if cam == "cam_a" else person % 5 == 0)


def write_prid2011(root: str, num_a: int = 203, num_b: int = 205) -> str:
    """A PRID2011 folder ``root/prid2011`` (no splits file); returns it."""
    folder = os.path.join(str(root), "prid2011")
    for cam, num in (("cam_a", num_a), ("cam_b", num_b)):
        for p in range(1, num + 1):
            names = [f"{k:04d}.png" for k in range(1, prid_frames(cam, p) + 1)]
            write_frames(os.path.join(folder, "prid_2011", "multi_shot", cam, f"person_{p:04d}"), names)
    return folder


def prid_json_splits() -> List[Dict[str, List[str]]]:
    """10 splits: split k tests people whose number is odd/even as k is (train: the others)."""
    people = [f"person_{p:04d}" for p in range(1, 201)]
    return [{"train": [n for i, n in enumerate(people) if i % 2 != k % 2],
             "test": [n for i, n in enumerate(people) if i % 2 == k % 2]} for k in range(10)]


def write_prid_json(folder: str, splits: object) -> str:
    path = os.path.join(folder, "splits_prid2011.json")
    with open(path, "w") as f:
        json.dump(splits, f)
    return path


# ---------------------------------------------------------------------------- DukeMTMC-VideoReID
#: subset -> [(pid, tracklet, camera, frames)]
DUKE = {
    "train": [(1, 1, 6, 3), (1, 2, 2, 2), (5, 1, 1, 12)],
    "query": [(2, 1, 3, 2), (7, 1, 8, 1)],
    "gallery": [(2, 2, 4, 3), (7, 3, 5, 2), (9, 1, 1, 2)],
}


def write_duke(root: str) -> str:
    """A DukeMTMC-VideoReID folder ``root/dukemtmc-videoreid/DukeMTMC-VideoReID``; returns it."""
    folder = os.path.join(str(root), "dukemtmc-videoreid", "DukeMTMC-VideoReID")
    x = 0
    for subset, tracks in DUKE.items():
        for pid, track, cam, count in tracks:
            names = []
            for f in range(1, count + 1):
                x += 1
                names.append(f"{pid:04d}_C{cam}_F{f:04d}_X{x:05d}.jpg")
            write_frames(os.path.join(folder, subset, f"{pid:04d}", f"{track:04d}"), names)
    return folder


# ---------------------------------------------------------------------------------- video folder
def write_video_folder(root: str) -> Tuple[str, Dict[str, List[str]]]:
    """A user folder: train as tracklets.txt, query as tracklet folders, gallery as loose crops."""
    folder = os.path.join(str(root), "mine")
    train = os.path.join(folder, "train")
    write_frames(os.path.join(train, "walk_a"), ["9.jpg", "10.jpg", "1.jpg"])
    write_frames(os.path.join(train, "walk_b"), ["a.jpg", "b.jpg"])
    with open(os.path.join(train, "tracklets.txt"), "w") as f:
        f.write("# folder pid camid\nwalk_a 12 0\n\nwalk_b 30 3\n")
    write_frames(os.path.join(folder, "query", "0007_c2_morning"), ["f2.jpg", "f1.jpg"])
    write_frames(os.path.join(folder, "query", "0012_c1"), ["x.png"])
    crops = ["MOT17-02_c1_t000003_f000012.jpg", "MOT17-02_c1_t000003_f000009.jpg",
             "MOT17-02_c2_t000003_f000001.jpg", "0007_c1_t000001_f10.jpg", "0007_c1_t000001_f9.jpg"]
    write_frames(os.path.join(folder, "gallery"), crops)
    return folder, {"crops": crops}


def assert_one_line(error: BaseException, *parts: str) -> str:
    """The message of `error`, checked to be one line that contains every one of `parts`."""
    message = str(error)
    assert "\n" not in message, message
    for part in parts:
        assert part in message, (part, message)
    return message
