"""The dataset object every loader returns, the dataset registry and shared folder checks."""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from reid.utils.path_kinds import file_problem, folder_problem, is_missing
from reid.utils.registry import Registry

#: One image: (absolute or root-relative path, person id, 0-based camera id).
Item = Tuple[str, int, int]

#: name -> dataset class; ``build_dataset`` looks names up here.
DATASET_REGISTRY = Registry("dataset")

#: Where users are sent when a dataset folder is missing or malformed.
README_HINT = "See datasets/README.md for where to get the dataset and how to lay it out."


class DatasetNotFoundError(FileNotFoundError):
    """A dataset folder (or a file inside it) is missing; the message shows the expected layout.

    Its first line says what is missing and what to do (a program prints it as its ``error:``
    line); the folders searched and the layout follow on lines of their own. ``searched`` holds
    the searched-folder lines of :func:`find_dataset_dir`.
    """

    searched: Sequence[str] = ()


def not_found_message(dataset: str, root: str, searched: Sequence[str], layout: str) -> str:
    """The message of a dataset that is not under `root`: what to do first, then where it was
    looked for (`searched`, one line each) and the expected `layout`, each line on its own."""
    return (
        f"Could not find the {dataset} dataset under root {root!r}: set DATASETS.ROOT to the folder that "
        f"holds it. {README_HINT}\nSearched:\n" + "\n".join(searched) + f"\nExpected layout:\n{layout.rstrip()}"
    )


class DatasetFormatError(ValueError):
    """A file name or a list line does not follow the dataset's naming scheme."""


def check_listed_image(path: str, where: str, base: str) -> None:
    """Raise, naming `where` (list file and line), when the image a list line names is not a file:
    DatasetNotFoundError when nothing is there (paths start at the list's folder `base`),
    DatasetFormatError saying what it is otherwise (a folder, a FIFO, a device)."""
    problem = file_problem(path)
    if problem is None:
        return
    if is_missing(problem):
        raise DatasetNotFoundError(f"{where}: image {path!r} {problem}. Paths are relative to the list file's "
                                   f"folder ({base}); fix the path or remove the line.")
    raise DatasetFormatError(f"{where}: image {path!r} {problem}; list image files only.")


#: Largest person or camera id: ids become int64 arrays (relabelling, evaluation).
MAX_ID = int(np.iinfo(np.int64).max)


def check_id(text: str, what: str, where: str) -> int:
    """The integer of id `text` (digits, optionally '-'), or DatasetFormatError naming `where` when it
    does not fit int64 (which numpy and torch would report as an overflow that names no file)."""
    digits = text.lstrip("-")
    value = int(text) if len(digits) <= 19 else None
    if value is None or not -MAX_ID - 1 <= value <= MAX_ID:
        shown = text if len(text) <= 30 else f"{text[:12]}...{text[-6:]} ({len(digits)} digits)"
        raise DatasetFormatError(f"{where}: {what} {shown} does not fit a 64-bit integer (at most {MAX_ID}); "
                                 "number identities and cameras from 0 (or 1) up.")
    return value


def relabel_pids(items: Sequence[Item]) -> Tuple[List[Item], Dict[int, int]]:
    """Map the person ids of `items` to 0..C-1 in sorted order of the original ids.

    Returns the relabelled items and the ``{original_pid: new_label}`` mapping.
    """
    if not items:
        return [], {}
    pids = np.fromiter((it[1] for it in items), dtype=np.int64, count=len(items))
    uniq, labels = np.unique(pids, return_inverse=True)
    mapping = {int(p): i for i, p in enumerate(uniq.tolist())}
    out = [(it[0], int(lab), it[2]) for it, lab in zip(items, labels.tolist())]
    return out, mapping


class ReIDDataset:
    """A re-ID dataset: three lists of ``(path, pid, camid)``.

    ``train`` pids are relabelled to 0..C-1 (sorted original pids; the mapping is kept in
    ``train_pid_map``) so they can index a classifier; ``query``/``gallery`` keep the original
    pids because evaluation only compares them for equality. Camera ids are 0-based ints.
    """

    #: Registry name; subclasses override it.
    name: str = "reid"
    #: What to do when a test set of this dataset has no query or no gallery images.
    empty_test_hint: str = "Check DATASETS.TESTS and the dataset files."
    #: Query/gallery pids that label many different people (Market-1501's ``0000`` distractors),
    #: so ``combine_all`` cannot make them a class; subclasses override.
    distractor_pids: Tuple[int, ...] = ()
    #: False for crops without identities (pid -1 = unknown): only learning without labels uses them.
    has_labels: bool = True
    #: How its query/gallery are evaluated: "cross_camera" (Market-1501's
    #: protocol) or "gallery_draws" (VehicleID's: every identity's gallery image drawn at random,
    #: results averaged over draws; reid/evaluation/gallery_draws.py).
    test_protocol: str = "cross_camera"

    def __init__(
        self,
        train: Sequence[Item],
        query: Sequence[Item],
        gallery: Sequence[Item],
        name: Optional[str] = None,
        relabel: bool = True,
    ) -> None:
        if name is not None:
            self.name = name
        if relabel:
            self.train, self.train_pid_map = relabel_pids(train)
        else:
            self.train, self.train_pid_map = list(train), {}
        self.query: List[Item] = list(query)
        self.gallery: List[Item] = list(gallery)
        #: What a test of this query/gallery should record beside its metrics (e.g. query files found
        #: in the gallery and left out, reid/data/datasets/folders.py).
        self.test_notes: Dict[str, Any] = {}

    @property
    def num_train_pids(self) -> int:
        """Number of training identities (classes)."""
        return len({it[1] for it in self.train})

    @property
    def num_train_cams(self) -> int:
        """Number of distinct cameras in the training subset."""
        return len({it[2] for it in self.train})

    def summary(self) -> str:
        """A small text table: subset | ids | images | cameras."""
        rows = [("train", self.train), ("query", self.query), ("gallery", self.gallery)]
        lines = [
            f"Dataset {self.name}",
            f"  {'subset':<8} | {'ids':>6} | {'images':>8} | {'cameras':>7}",
            f"  {'-' * 8}-+-{'-' * 6}-+-{'-' * 8}-+-{'-' * 7}",
        ]
        for label, items in rows:
            ids, imgs, cams = len({it[1] for it in items}), len(items), len({it[2] for it in items})
            shown = ids if self.has_labels or label != "train" else "-"  # no identities to count
            lines.append(f"  {label:<8} | {shown:>6} | {imgs:>8} | {cams:>7}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, train={len(self.train)}, "
            f"query={len(self.query)}, gallery={len(self.gallery)})"
        )


def combine_all(dataset: ReIDDataset) -> Tuple[List[Item], int]:
    """Every image of `dataset` as training items (DATASETS.COMBINE_ALL); returns (items, dropped).

    Train identities keep labels 0..C-1; the query + gallery identities follow as C..C+T-1 (sorted
    original pids). Test pids are a namespace of their own: benchmark protocols keep train and test
    people apart, and MSMT17 even reuses the numbers for different people. Query and gallery share
    it (the same pid is the same person there). Images of ``dataset.distractor_pids`` and junk
    (pid < 0) are dropped and counted; a path listed in both query and gallery is kept once.
    Camera ids are kept.
    """
    train, _ = relabel_pids(dataset.train)
    junk = set(dataset.distractor_pids)
    test, seen = [], set()
    for path, pid, camid in list(dataset.query) + list(dataset.gallery):
        if pid < 0 or pid in junk or path in seen:
            continue
        seen.add(path)
        test.append((path, pid, camid))
    dropped = len(dataset.query) + len(dataset.gallery) - len(test)
    test, _ = relabel_pids(test)
    offset = len({it[1] for it in train})
    return train + [(p, pid + offset, cam) for p, pid, cam in test], dropped


def find_dataset_dir(
    root: str, candidates: Iterable[str], required: Sequence[str], dataset: str, layout: str
) -> str:
    """Return the first of ``root/<candidate>`` that holds every entry of `required`.

    An empty candidate means `root` itself. When none fits, raise DatasetNotFoundError that
    lists the folders searched, what was missing, the expected `layout` and the README.
    """
    searched = []
    for cand in candidates:
        folder = os.path.join(root, cand) if cand else root
        missing = [r for r in required if not os.path.exists(os.path.join(folder, r))]
        if not missing:
            return folder
        if os.path.isdir(folder):
            searched.append(f"  {folder} (exists, but lacks: {', '.join(missing)})")
        else:
            problem = folder_problem(folder)
            searched.append(f"  {folder} ({'not found' if is_missing(problem) else problem})")
    error = DatasetNotFoundError(not_found_message(dataset, root, searched, layout))
    error.searched = searched
    raise error
