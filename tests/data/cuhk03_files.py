"""Writes a tiny CUHK03 release in the official layouts for the CUHK03 tests.

* ``cuhk-03.mat``: MATLAB 7.3 = HDF5 with a 512-byte MATLAB header block. The cells
  ``labeled`` and ``detected`` are ``[1 x pairs]`` datasets of object references (MATLAB stores
  arrays column-major, so the HDF5 shape is the reverse of MATLAB's); each points to a pair's
  ``[10 x identities]`` reference array under ``#refs#``, whose entries point to ``[3, W, H]``
  uint8 images, or to an empty array (its dims, ``MATLAB_empty`` = 1). ``testsets`` is
  ``[1 x splits]`` references to ``[2 x n]`` doubles (pair, person; 1-based).
* ``cuhk03_new_protocol_config_<set>.mat``: MATLAB v5 (scipy.io.savemat) with ``filelist``
  (cell of names), ``labels``, ``camId`` and 1-based ``train_idx`` / ``query_idx`` /
  ``gallery_idx``, built by the rule of the published protocol: test identities have at least
  two images in each view; one query per view, the rest gallery.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import h5py
import numpy as np
import scipy.io

#: Identities per camera pair of the fixture (the release has 843, 440, 77, 58, 49).
PAIR_SIZES = (4, 3, 2, 2, 2)
IMAGE_SETS = ("labeled", "detected")
#: Filled cells (1..10) of every identity unless listed in FILLED_EXCEPTIONS.
DEFAULT_CELLS = (1, 2, 3, 6, 7, 8)
#: (set, pair, person) -> filled cells: full identities, one seen by only one view, and
#: a detected set that differs from the labeled one in two cells (as the release does).
FILLED_EXCEPTIONS = {
    ("labeled", 1, 1): (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
    ("detected", 1, 1): (1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
    ("labeled", 2, 3): (1, 2),
    ("detected", 2, 3): (1, 2),
    ("labeled", 3, 2): (1, 2, 6, 7),
    ("detected", 3, 2): (1, 2, 3, 6, 7, 9),
    ("labeled", 5, 1): (1, 2, 3, 6, 7, 8, 9),
    ("detected", 5, 1): (1, 2, 3, 6, 7, 8),
}
#: Classic test splits: (pair, person), 1-based.
TESTSETS = (
    ((1, 2), (2, 1), (4, 2)),
    ((1, 4), (3, 1), (5, 2)),
    ((2, 2), (3, 2), (5, 1)),
)
#: New protocol: this many test identities.
NUM_NEW_TEST = 4


def filled_cells(image_set: str, pair: int, person: int) -> Tuple[int, ...]:
    return FILLED_EXCEPTIONS.get((image_set, pair, person), DEFAULT_CELLS)


def global_pid(pair: int, person: int) -> int:
    """The person's number over all pairs, 1-based (the split files' labels)."""
    return sum(PAIR_SIZES[: pair - 1]) + person


def crop_image(image_set: str, pair: int, person: int, cell: int) -> np.ndarray:
    """The H x W x 3 RGB image of one cell; H != W and every image differs."""
    rng = np.random.default_rng([IMAGE_SETS.index(image_set), pair, person, cell])
    return rng.integers(0, 256, (6 + cell, 3 + pair, 3), dtype=np.uint8)



def file_order(image_set: str) -> List[Tuple[int, int, int]]:
    """(pair, person, cell) of every image in the file's order (pair, then person, then cell)."""
    return [(p, i, c) for p, n in enumerate(PAIR_SIZES, 1) for i in range(1, n + 1)
            for c in filled_cells(image_set, p, i)]


def name_of(pair: int, person: int, cell: int) -> str:
    return f"{pair}_{person:03d}_{1 if cell <= 5 else 2}_{cell:02d}.png"


_MATLAB_HEADER = b"MATLAB 7.3 MAT-file, Platform: GLNXA64, Created on: Mon Jan  1 00:00:00 2024 HDF5 schema 1.00 ."


def write_mat(path: str, testsets: Sequence[Sequence[Tuple[int, int]]] = TESTSETS,
              omit: Sequence[str] = (), pair_columns: int = 10,
              replace: Optional[Dict[Tuple[str, int, int, int], np.ndarray]] = None) -> None:
    """Write the fixture's cuhk-03.mat; for error tests `omit` leaves out top-level cells and
    `replace` maps (set, pair, person, cell) to a MATLAB-shaped array stored instead of the image,
    or to a shape tuple: a chunked uint8 array of that shape with no data written (a header
    that claims far more pixels than the file holds)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    count = [0]
    with h5py.File(path, "w", userblock_size=512) as f:
        f.create_group("#refs#")

        def put(data, matlab_class: str, empty: bool = False):
            name = f"#refs#/r{count[0]}"
            count[0] += 1
            if isinstance(data, tuple):
                ds = f.create_dataset(name, shape=data, dtype=np.uint8, chunks=(1, 64, 64))
            else:
                ds = f.create_dataset(name, data=data)
            ds.attrs["MATLAB_class"] = np.bytes_(matlab_class)
            if empty:
                ds.attrs["MATLAB_empty"] = np.uint8(1)
            return ds.ref

        def put_cell(key: str, refs: List) -> None:
            ds = f.create_dataset(key, data=np.array(refs, dtype=h5py.ref_dtype).reshape(1, -1))
            ds.attrs["MATLAB_class"] = np.bytes_("cell")

        for image_set in IMAGE_SETS:
            if image_set in omit:
                continue
            pair_refs = []
            for pair, n in enumerate(PAIR_SIZES, 1):
                cells = np.empty((pair_columns, n), dtype=h5py.ref_dtype)  # MATLAB [n x 10], reversed
                for person in range(1, n + 1):
                    filled = filled_cells(image_set, pair, person)
                    for cell in range(1, pair_columns + 1):
                        if (image_set, pair, person, cell) in (replace or {}):
                            value = replace[(image_set, pair, person, cell)]
                            cells[cell - 1, person - 1] = put(value, "uint8" if isinstance(value, tuple) else "double")
                        elif cell in filled:
                            img = crop_image(image_set, pair, person, cell)
                            cells[cell - 1, person - 1] = put(np.ascontiguousarray(img.T), "uint8")
                        else:
                            cells[cell - 1, person - 1] = put(np.zeros(2, np.uint64), "double", empty=True)
                pair_refs.append(put(cells, "cell"))
            put_cell(image_set, pair_refs)
        if "testsets" not in omit:
            put_cell("testsets", [put(np.asarray(t, np.float64).T.copy(), "double") for t in testsets])
    with open(path, "r+b") as fh:
        fh.write(_MATLAB_HEADER.ljust(116) + bytes(8) + b"\x00\x02IM")


@dataclass
class NewSplit:
    """The fixture's new-protocol split of one image set, 0-based positions in file order."""

    names: List[str]
    labels: np.ndarray
    train: List[int] = field(default_factory=list)
    query: List[int] = field(default_factory=list)
    gallery: List[int] = field(default_factory=list)


def new_split(image_set: str) -> NewSplit:
    """Split by the published rule, with a fixed choice of the test identities."""
    order = file_order(image_set)
    split = NewSplit([name_of(*o) for o in order], np.array([global_pid(p, i) for p, i, _ in order]))
    ids = sorted({(p, i) for p, i, _ in order})
    eligible = [pi for pi in ids
                if sum(c <= 5 for c in filled_cells(image_set, *pi)) >= 2
                and sum(c > 5 for c in filled_cells(image_set, *pi)) >= 2]
    test = set(eligible[::2][:NUM_NEW_TEST])
    for view in (1, 2):
        for pi in sorted(test):
            rows = [k for k, (p, i, c) in enumerate(order) if (p, i) == pi and (c <= 5) == (view == 1)]
            split.query.append(rows[-1])
            split.gallery.extend(rows[:-1])
    split.train = [k for k, (p, i, _) in enumerate(order) if (p, i) not in test]
    return split


def write_split_file(path: str, split: NewSplit, drop: Sequence[str] = (), **override) -> None:
    filelist = np.empty((len(split.names), 1), dtype=object)
    for k, n in enumerate(split.names):
        filelist[k, 0] = n
    views = np.array([int(n[6]) for n in split.names], np.uint8)
    data = {
        "filelist": filelist,
        "labels": split.labels.astype(np.uint16).reshape(-1, 1),
        "camId": views.reshape(-1, 1),
        "train_idx": np.asarray(sorted(split.train), np.uint16).reshape(-1, 1) + 1,
        "query_idx": np.asarray(sorted(split.query), np.uint16).reshape(-1, 1) + 1,
        "gallery_idx": np.asarray(sorted(split.gallery), np.uint16).reshape(-1, 1) + 1,
    }
    data.update(override)
    scipy.io.savemat(path, {k: v for k, v in data.items() if k not in drop})


def make_cuhk03(root: str, folder: str = "cuhk03", splits: bool = True,
                mat_rel: str = os.path.join("cuhk03_release", "cuhk-03.mat")) -> Dict[str, Optional[str]]:
    """Write the fixture under ``root/folder``; returns the paths written."""
    base = os.path.join(root, folder) if folder else root
    mat = os.path.join(base, mat_rel)
    write_mat(mat)
    paths: Dict[str, Optional[str]] = {"dir": base, "mat": mat}
    for image_set in IMAGE_SETS:
        path = os.path.join(base, f"cuhk03_new_protocol_config_{image_set}.mat") if splits else None
        if path:
            write_split_file(path, new_split(image_set))
        paths[image_set] = path
    return paths
