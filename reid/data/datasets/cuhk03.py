"""CUHK03 (Li et al., "DeepReID", CVPR 2014): 1,467 identities seen by 5 pairs of camera views.

The official release is one MATLAB 7.3 (HDF5) file, ``cuhk-03.mat``, with two image sets of
the same people: ``labeled`` (hand-drawn boxes) and ``detected`` (pedestrian-detector boxes).
Each set holds 5 cells, one per camera pair (843, 440, 77, 58 and 49 identities); a pair's
cell is ``[identities x 10]``: columns 1-5 are images from the pair's first view, 6-10 from
its second, and some are empty. The HDF5 file stores each cell as references and each image
column-major (``[3, W, H]``), so a transpose gives ``H x W x 3`` RGB. ``testsets`` holds the
20 classic test splits, each ``[100 x 2]`` (pair, identity), 1-based.

First load: the chosen image set is written as PNG crops to ``<dir>/crops_<set>/`` with
``index.json`` (pair sizes, image names, classic test splits), into a temporary folder that
is renamed into place when complete. Later loads read only the crops and the index (and, for
the new protocol, the small split file), never ``cuhk-03.mat`` again. Crop names are the
ones the new-protocol split files list: ``<pair>_<person:03d>_<view>_<cell:02d>.png``
(``1_001_1_01.png`` = pair 1, person 1 of that pair, view 1, cell 1).

Identities and cameras: pid = the person's number over all pairs in file order, 1..1,467
(pair 1's persons are 1..843, pair 2's 844..1,283, ...), the numbering the split files use as
``labels``; camid = 2 x (pair - 1) + (view - 1), so the 10 views are cameras 0..9 (the release
does not say which of the campus cameras each view is).

Protocols:

* ``new`` (Zhong et al., CVPR 2017, "CUHK03-NP"): 767 training / 700 test identities from
  ``cuhk03_new_protocol_config_<set>.mat``; per test identity one query image per view, the
  rest in the gallery. Loaded: labeled 7,368 train / 1,400 query / 5,328 gallery images
  (14,096 in all), detected 7,365 / 1,400 / 5,332 (14,097).
* ``classic`` (Li et al.): split ``k`` (0..19) of ``testsets`` names 100 test identities; the
  other 1,367 train. Query = the test identities' first-view images, gallery = their
  second-view images (the cross-view direction of the original protocol). Image counts vary
  with the split. The original protocol scores single-gallery-shot CMC (one random gallery
  image per identity, repeated); this toolkit scores every gallery image (Market-1501 style),
  so R-1 is not directly comparable with single-shot numbers.
"""
from __future__ import annotations

import json
import logging
import os
import re
from typing import Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

from reid.utils.file_io import atomic_write_text, build_folder_atomically
from reid.utils.path_kinds import check_file, file_problem, is_missing

from ..image_io import MAX_IMAGE_PIXELS
from .base import DATASET_REGISTRY, DatasetFormatError, DatasetNotFoundError, Item, README_HINT, ReIDDataset

logger = logging.getLogger(__name__)

IMAGE_SETS = ("labeled", "detected")
PROTOCOLS = ("new", "classic")
MAT_NAME = "cuhk-03.mat"
#: Where ``cuhk-03.mat`` may sit inside the dataset folder (the release zip unpacks to the first).
MAT_PLACES = (os.path.join("cuhk03_release", MAT_NAME), MAT_NAME)
SPLIT_FILE = "cuhk03_new_protocol_config_{}.mat"
SPLIT_KEYS = ("train_idx", "query_idx", "gallery_idx", "labels", "filelist")
INDEX_FILE = "index.json"
INDEX_VERSION = 1
CELLS = 10  # images per identity: cells 1-5 first view, 6-10 second view
#: Folder names tried under DATASETS.ROOT, in order ("" = the root itself).
CANDIDATES = ("cuhk03", "CUHK03", "")

_NAME_RE = re.compile(r"^([1-9])_(\d{3})_([12])_(\d{2})\.png$")

#: The official page; the release is for research use under the terms stated there.
CUHK03_PAGE = "http://www.ee.cuhk.edu.hk/~xgwang/CUHK_identification.html"
OBTAIN = f"it is in cuhk03_release.zip from the CUHK03 page {CUHK03_PAGE} (research use, on accepting its terms)"
OBTAIN_SPLIT = (
    "the split files are published with the re-ranking code of Zhong et al. (CVPR 2017): "
    "https://github.com/zhunzhong07/person-re-ranking, folder evaluation/data/CUHK03/"
)


def crop_name(pair: int, person: int, cell: int) -> str:
    """File name of cell `cell` (1..10) of person `person` of camera pair `pair` (all 1-based)."""
    return f"{pair}_{person:03d}_{1 if cell <= CELLS // 2 else 2}_{cell:02d}.png"


def parse_crop_name(name: str, where: str) -> Tuple[int, int, int]:
    """``(pair, person, view)`` of a crop name; `where` names the file that listed it."""
    m = _NAME_RE.match(name)
    if m is None or not 1 <= int(m.group(4)) <= CELLS or (int(m.group(4)) <= CELLS // 2) != (m.group(3) == "1"):
        raise DatasetFormatError(
            f"{where}: image name {name!r} is not a CUHK03 crop name '<pair>_<person:03d>_<view>_<cell:02d>.png' "
            f"(view 1 = cells 01-05, view 2 = cells 06-10), e.g. 1_001_1_01.png. {README_HINT}"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


# --------------------------------------------------------------------------- #
# Reading cuhk-03.mat and writing the crops (once)
# --------------------------------------------------------------------------- #
def _layout_error(mat_path: str, what: str) -> DatasetFormatError:
    return DatasetFormatError(
        f"{mat_path}: {what}; expected the official CUHK03 cuhk-03.mat (MATLAB 7.3 / HDF5 with cells "
        f"'labeled', 'detected' and 'testsets'); get it again: {OBTAIN}."
    )


# Most elements read from one array of the .mat: the file's headers declare every shape, and an
# array is only read once its declared size is known to be sane (a crafted header could claim
# terabytes). Cells hold references (CUHK03: 5 pairs, <= 1,467 x 10 per pair); images are crops.
_MAX_REFS = 1 << 20
_MAX_SPLIT_FILE = 64 << 20


def _sized(node, max_elements: int, where: str, mat_path: str):
    """`node` when it is an HDF5 array of at most `max_elements` elements (checked before reading)."""
    import h5py

    if not isinstance(node, h5py.Dataset):
        raise _layout_error(mat_path, f"{where} is not an array")
    if node.size > max_elements:
        raise _layout_error(mat_path, f"{where} declares shape {list(node.shape)} ({node.size:,} elements, at most "
                                      f"{max_elements:,} expected)")
    return node


def _cell_refs(f, key: str, mat_path: str) -> np.ndarray:
    """The object references of a MATLAB cell, in MATLAB's (column-major) shape."""
    import h5py

    if key not in f or not isinstance(f[key], h5py.Dataset) or h5py.check_dtype(ref=f[key].dtype) is None:
        raise _layout_error(mat_path, f"no cell array {key!r}")
    return _sized(f[key], _MAX_REFS, f"cell array {key!r}", mat_path)[()].T


def _read_pair(f, ref, pair: int, mat_path: str) -> np.ndarray:
    """References ``[identities x 10]`` of one camera pair."""
    import h5py

    cell = f[ref]
    if not isinstance(cell, h5py.Dataset) or h5py.check_dtype(ref=cell.dtype) is None:
        raise _layout_error(mat_path, f"camera pair {pair} is not a cell array")
    refs = _sized(cell, _MAX_REFS, f"camera pair {pair}", mat_path)[()].T
    if refs.ndim != 2 or refs.shape[1] != CELLS:
        raise _layout_error(mat_path, f"camera pair {pair} has shape {list(refs.shape)}, not [identities x {CELLS}]")
    return refs


def _read_image(f, ref, where: str, mat_path: str) -> Optional[np.ndarray]:
    """RGB ``H x W x 3`` uint8 image of one cell, or None for an empty cell."""
    import h5py

    node = f[ref]
    if not isinstance(node, h5py.Dataset):
        raise _layout_error(mat_path, f"{where} is not an array")
    if node.attrs.get("MATLAB_empty", 0) or node.ndim < 3 or node.size == 0:
        return None  # MATLAB writes [] as its dims with MATLAB_empty = 1
    if node.dtype != np.uint8:
        raise _layout_error(mat_path, f"{where} is {node.dtype} {list(node.shape[::-1])}, not an H x W x 3 uint8 image")
    img = _sized(node, 3 * MAX_IMAGE_PIXELS, where, mat_path)[()].T
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8 or min(img.shape[:2]) < 1:
        raise _layout_error(mat_path, f"{where} is {img.dtype} {list(img.shape)}, not an H x W x 3 uint8 image")
    return np.ascontiguousarray(img)


def _read_testsets(f, mat_path: str, sizes: Sequence[int]) -> List[List[List[int]]]:
    out = []
    for k, ref in enumerate(_cell_refs(f, "testsets", mat_path).ravel()):
        a = np.asarray(_sized(f[ref], _MAX_REFS, f"test split {k + 1}", mat_path)[()]).T
        ok = a.ndim == 2 and a.shape[1] == 2 and a.size > 0 and np.all(a == np.rint(a))
        ids = np.rint(a).astype(np.int64) if ok else None
        if ids is None or not all(1 <= p <= len(sizes) and 1 <= i <= sizes[p - 1] for p, i in ids.tolist()):
            raise _layout_error(mat_path, f"test split {k + 1} is not a [n x 2] list of (camera pair, person)")
        out.append(ids.tolist())
    return out


def extract_crops(mat_path: str, image_set: str, out_dir: str) -> Dict:
    """Write every image of `image_set` in `mat_path` as PNG into `out_dir` (new); returns the index.

    The index (also written to ``out_dir/index.json``, last) holds the identities per camera
    pair, the crop names in file order and the classic test splits.
    """
    try:
        import h5py
    except ImportError as e:  # a declared dependency; only a broken install lacks it
        raise ImportError(f"Reading {mat_path} needs h5py (pip install h5py).") from e
    check_file(mat_path, "CUHK03", f"put the {MAT_NAME} file there ({OBTAIN}).", error=DatasetFormatError,
               missing_error=DatasetNotFoundError)
    try:
        f = h5py.File(mat_path, "r")
    except OSError as e:
        raise _layout_error(mat_path, f"cannot be read as HDF5 ({e})") from e
    names: List[str] = []
    with f:
        pairs = _cell_refs(f, image_set, mat_path).ravel()
        if not 1 <= len(pairs) <= 9:
            raise _layout_error(mat_path, f"{image_set!r} has {len(pairs)} camera pairs")
        # Everything but the pixels is checked before the (long) pass over the images.
        pair_refs = [_read_pair(f, ref, pair, mat_path) for pair, ref in enumerate(pairs, 1)]
        sizes = [int(refs.shape[0]) for refs in pair_refs]
        testsets = _read_testsets(f, mat_path, sizes)
        os.makedirs(out_dir)
        for pair, refs in enumerate(pair_refs, 1):
            for person, cell in np.ndindex(*refs.shape):
                where = f"{image_set} pair {pair}, person {person + 1}, cell {cell + 1}"
                img = _read_image(f, refs[person, cell], where, mat_path)
                if img is None:
                    continue
                name = crop_name(pair, person + 1, cell + 1)
                if not cv2.imwrite(os.path.join(out_dir, name), cv2.cvtColor(img, cv2.COLOR_RGB2BGR)):
                    raise OSError(f"could not write {os.path.join(out_dir, name)}")
                names.append(name)
            logger.info("CUHK03 %s: camera pair %d done (%d identities, %d images so far)",
                        image_set, pair, sizes[pair - 1], len(names))
    index = {"version": INDEX_VERSION, "image_set": image_set, "source": os.path.abspath(mat_path),
             "identities_per_pair": sizes, "images": names, "testsets": testsets}
    atomic_write_text(os.path.join(out_dir, INDEX_FILE), json.dumps(index))
    return index


def ensure_crops(dataset_dir: str, image_set: str) -> Tuple[str, Dict]:
    """Folder of the crops of `image_set` and its index, extracting them from the .mat when absent."""
    final = os.path.join(dataset_dir, f"crops_{image_set}")
    index_path = os.path.join(final, INDEX_FILE)
    if not os.path.isfile(index_path):
        if os.path.exists(final):
            raise DatasetNotFoundError(
                f"CUHK03 crop folder {final!r} exists but has no {INDEX_FILE} (it was not written by this loader, "
                f"or was edited); delete it and it is written again from {MAT_NAME}."
            )
        mat_path = find_mat(dataset_dir)
        if mat_path is None:
            raise DatasetNotFoundError(
                f"CUHK03: {MAT_NAME} not found in {dataset_dir!r} and no crops extracted yet ({index_path} is "
                f"missing): put it at {os.path.join(dataset_dir, MAT_PLACES[0])}; {OBTAIN}. {README_HINT}"
            )
        logger.info("CUHK03: writing the %s images of %s to %s (first use; reused afterwards)",
                    image_set, mat_path, final)
        # Another process (e.g. another DDP rank) that finishes first wrote identical crops.
        build_folder_atomically(final, lambda tmp: extract_crops(mat_path, image_set, tmp), INDEX_FILE)
    try:
        with open(index_path, encoding="utf-8") as fh:
            index = json.load(fh)
    except (ValueError, RecursionError):
        index = None
    if not isinstance(index, dict) or index.get("version") != INDEX_VERSION or index.get("image_set") != image_set:
        raise DatasetNotFoundError(
            f"{index_path}: written by another version of this loader or for another image set; "
            f"delete {final!r} and it is written again from {MAT_NAME}."
        )
    # One file is enough to catch a folder whose images were moved or deleted by hand.
    if index["images"] and not os.path.isfile(os.path.join(final, index["images"][0])):
        raise DatasetNotFoundError(
            f"CUHK03 crop folder {final!r} lacks {index['images'][0]} listed in its {INDEX_FILE}; delete the "
            f"folder and it is written again from {MAT_NAME}."
        )
    return final, index


def find_mat(dataset_dir: str) -> Optional[str]:
    """Path of cuhk-03.mat inside `dataset_dir`, or None."""
    for rel in MAT_PLACES:
        path = os.path.join(dataset_dir, rel)
        if os.path.lexists(path):  # whatever it is: a FIFO or a folder is named for what it is when read
            return path
    return None


# --------------------------------------------------------------------------- #
# Protocols
# --------------------------------------------------------------------------- #
class _Crops:
    """The crops of one image set as arrays: name, pid, camid, view, pair, person."""

    def __init__(self, folder: str, index: Dict) -> None:
        where = os.path.join(folder, INDEX_FILE)
        self.folder = folder
        self.names: List[str] = list(index["images"])
        offsets = np.concatenate([[0], np.cumsum(index["identities_per_pair"])])
        parsed = np.array([parse_crop_name(n, where) for n in self.names], dtype=np.int64).reshape(-1, 3)
        self.pair, self.person, self.view = parsed.T
        self.pid = offsets[self.pair - 1] + self.person
        self.camid = 2 * (self.pair - 1) + (self.view - 1)
        self.testsets: List[List[List[int]]] = index["testsets"]

    def items(self, idx: np.ndarray) -> List[Item]:
        return [(os.path.join(self.folder, self.names[i]), int(self.pid[i]), int(self.camid[i])) for i in idx.tolist()]


def classic_protocol(crops: _Crops, split: int) -> Tuple[List[Item], List[Item], List[Item]]:
    """Train / query (first view) / gallery (second view) of classic test split `split` (0-based)."""
    n = len(crops.testsets)
    if not 0 <= split < n:
        raise ValueError(
            f"DATASETS.CUHK03.CLASSIC_SPLIT={split} is out of range: {MAT_NAME} has {n} classic splits, "
            f"numbered 0..{n - 1}."
        )
    test = np.array(crops.testsets[split], dtype=np.int64).reshape(-1, 2)
    # (pair, person) -> one integer key; persons < 1000 in every pair.
    is_test = np.isin(crops.pair * 1000 + crops.person, test[:, 0] * 1000 + test[:, 1])
    train = np.flatnonzero(~is_test)
    query = np.flatnonzero(is_test & (crops.view == 1))
    gallery = np.flatnonzero(is_test & (crops.view == 2))
    return crops.items(train), crops.items(query), crops.items(gallery)


def _load_split_file(path: str) -> Dict[str, np.ndarray]:
    import scipy.io
    from scipy.io.matlab import MatReadError

    if os.path.getsize(path) > _MAX_SPLIT_FILE:
        raise DatasetFormatError(f"{path}: {os.path.getsize(path) >> 20} MB is far more than a CUHK03 split file "
                                 f"holds (about 1 MB); download it again ({OBTAIN_SPLIT}).")
    try:
        mat = scipy.io.loadmat(path)
    except (MatReadError, ValueError, IndexError, NotImplementedError, TypeError, OSError) as e:
        # scipy before 1.10 fails on a short file with IndexError instead of MatReadError
        raise DatasetFormatError(
            f"{path}: cannot be read as a MATLAB split file ({e}); download it again ({OBTAIN_SPLIT})."
        ) from e
    missing = [k for k in SPLIT_KEYS if k not in mat]
    if missing:
        raise DatasetFormatError(
            f"{path}: no {', '.join(missing)}; a CUHK03 new-protocol split file holds {', '.join(SPLIT_KEYS)} "
            f"(and camId). Download it again ({OBTAIN_SPLIT})."
        )
    return mat


def new_protocol(crops: _Crops, path: str) -> Tuple[List[Item], List[Item], List[Item]]:
    """Train / query / gallery of the 767/700 protocol from split file `path` (1-based indices)."""
    mat = _load_split_file(path)
    try:
        filelist = [str(np.asarray(x).ravel()[0]) for x in mat["filelist"].ravel()]
    except IndexError:
        raise DatasetFormatError(
            f"{path}: 'filelist' has an empty entry; download it again ({OBTAIN_SPLIT})."
        ) from None
    labels = np.asarray(mat["labels"]).ravel()
    if len(labels) != len(filelist):
        raise DatasetFormatError(f"{path}: {len(labels)} labels for {len(filelist)} files; download it again.")
    position = {name: i for i, name in enumerate(crops.names)}
    where = f"{path} (filelist)"
    subsets = []
    for key in ("train_idx", "query_idx", "gallery_idx"):
        idx = np.asarray(mat[key]).ravel().astype(np.int64)
        if idx.size and (idx.min() < 1 or idx.max() > len(filelist)):
            raise DatasetFormatError(
                f"{path}: {key} holds {idx.min() if idx.min() < 1 else idx.max()}, outside the 1-based "
                f"range 1..{len(filelist)} of filelist; download it again ({OBTAIN_SPLIT})."
            )
        subsets.append(idx - 1)
    if np.intersect1d(subsets[1], subsets[2]).size or np.intersect1d(subsets[0], np.union1d(*subsets[1:])).size:
        raise DatasetFormatError(f"{path}: train_idx, query_idx and gallery_idx overlap; download it again.")
    out = []
    for idx in subsets:
        rows = []
        for i in idx.tolist():
            name = filelist[i]
            if name not in position:
                parse_crop_name(name, where)
                raise DatasetFormatError(
                    f"{where}: image {name!r} is not among the {len(crops.names)} crops of {crops.folder!r}: the "
                    f"split file does not belong to this image set ({SPLIT_FILE.format('<set>')} goes with "
                    f"DATASETS.CUHK03.IMAGE_SET <set>)."
                )
            rows.append(position[name])
        rows = np.asarray(rows, dtype=np.int64)
        bad = np.flatnonzero(crops.pid[rows] != labels[idx])
        if bad.size:
            i = int(idx[bad[0]])
            raise DatasetFormatError(
                f"{path}: label {labels[i]} of {filelist[i]!r} is not that person's number over all camera pairs "
                f"({crops.pid[rows[bad[0]]]}); the split file does not fit this {MAT_NAME}."
            )
        out.append(crops.items(rows))
    return out[0], out[1], out[2]


def _locate(root: str) -> str:
    """The first candidate folder with extracted crops or cuhk-03.mat."""
    for cand in CANDIDATES:
        folder = os.path.join(root, cand) if cand else root
        if not os.path.isdir(folder):
            continue
        has_crops = any(os.path.isfile(os.path.join(folder, f"crops_{s}", INDEX_FILE)) for s in IMAGE_SETS)
        if has_crops or find_mat(folder) is not None:
            return folder
    searched = ", ".join(os.path.join(root, c) if c else root for c in CANDIDATES)
    raise DatasetNotFoundError(
        f"CUHK03: {MAT_NAME} not found (searched {searched}, each for {MAT_PLACES[0]} or {MAT_NAME}); "
        f"put it at {os.path.join(root, CANDIDATES[0], MAT_PLACES[0])}; {OBTAIN}. {README_HINT}"
    )


@DATASET_REGISTRY.register("cuhk03")
class CUHK03(ReIDDataset):
    """CUHK03 labeled or detected images under the new (767/700) or classic (20-split) protocol.

    Args:
        root: folder that holds ``cuhk03/`` (or ``CUHK03/``, or the dataset folder itself).
        image_set: "labeled" or "detected" (DATASETS.CUHK03.IMAGE_SET).
        protocol: "new" or "classic" (DATASETS.CUHK03.PROTOCOL).
        classic_split: 0-based classic split, 0..19 (DATASETS.CUHK03.CLASSIC_SPLIT); ignored by "new".

    Raises DatasetNotFoundError (missing .mat / split file, stale crop folder), DatasetFormatError
    (a file not in the official layout) and ValueError (a bad option or split index), each
    naming the file or key.
    """

    name = "cuhk03"

    def __init__(self, root: str = "datasets", image_set: str = "detected", protocol: str = "new",
                 classic_split: int = 0) -> None:
        self.image_set, self.protocol = str(image_set).lower(), str(protocol).lower()
        for key, value, choices in (("IMAGE_SET", self.image_set, IMAGE_SETS), ("PROTOCOL", self.protocol, PROTOCOLS)):
            if value not in choices:
                raise ValueError(
                    f"DATASETS.CUHK03.{key} must be one of {', '.join(map(repr, choices))}, got {value!r}."
                )
        self.dataset_dir = _locate(root)
        if self.protocol == "new":
            split_path = os.path.join(self.dataset_dir, SPLIT_FILE.format(self.image_set))
            # Checked before any extraction: a missing split file should not cost the crops' time.
            problem = file_problem(split_path)
            if problem and not is_missing(problem):
                raise DatasetFormatError(f"CUHK03 new protocol: split file {split_path} {problem}; put "
                                         f"{SPLIT_FILE.format(self.image_set)} there ({OBTAIN_SPLIT}).")
            if problem:
                raise DatasetNotFoundError(
                    f"CUHK03 new protocol: split file {split_path} not found; put "
                    f"{SPLIT_FILE.format(self.image_set)} there ({OBTAIN_SPLIT}), or set "
                    f"DATASETS.CUHK03.PROTOCOL classic. {README_HINT}"
                )
        if self.protocol == "classic" and int(classic_split) < 0:
            raise ValueError(f"DATASETS.CUHK03.CLASSIC_SPLIT must be >= 0 (0..19 for the 20 classic splits), "
                             f"got {classic_split}.")
        folder, index = ensure_crops(self.dataset_dir, self.image_set)
        crops = _Crops(folder, index)
        if self.protocol == "new":
            train, query, gallery = new_protocol(crops, split_path)
        else:
            train, query, gallery = classic_protocol(crops, int(classic_split))
        self.classic_split = int(classic_split)
        super().__init__(train, query, gallery)
