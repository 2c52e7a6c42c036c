"""PRID2011 (Hirzer et al., SCIA 2011), multi-shot: 385 people in camera A, 749 in camera B.

Layout (searched as ``root/prid2011``, ``root/PRID2011``, then ``root`` itself)::

    <root>/prid2011/
        prid_2011/multi_shot/cam_a/person_0001/0001.png ...
        prid_2011/multi_shot/cam_b/person_0001/...
        splits_prid2011.json          optional: [{"train": [...], "test": [...]}, ...] x 10

Only people 1..200 (``person_0001`` .. ``person_0200``) appear in both cameras; only they are
used. ``splits_prid2011.json`` (person folder names, as distributed with the common loaders) is
used when present. When it is absent, 10 splits of 100 train / 100 test people are drawn from
``numpy.random.default_rng(split_seed)`` (so they are the same on every machine for one seed),
recorded in ``splits`` / ``test_notes`` and written next to the dataset as
``splits_prid2011.generated.json`` when the folder is writable (rename it to
``splits_prid2011.json`` to pin it). Published numbers use the distributed file, so results on
generated splits are not comparable with them; ``test_notes["split_source"]`` says which was used.

Protocol: train = both cameras' tracklets of the train people, query = camera A tracklets of the
test people, gallery = camera B tracklets. Person ids are the folder numbers.
"""
from __future__ import annotations

import json
import os
import re
from typing import Dict, List, Sequence, Set

import numpy as np

from reid.data.datasets.base import DatasetFormatError, find_dataset_dir
from reid.utils.file_io import atomic_write_text
from reid.utils.text_files import brief

from .files import require_file
from .splits import check_split_id
from .tracklets import VIDEO_DATASET_REGISTRY, VideoReIDDataset
from .two_cameras import split_tracklets

LAYOUT = """\
  <root>/prid2011/                    (or <root>/PRID2011/, or <root> itself)
      prid_2011/multi_shot/cam_a/person_0001/0001.png ...
      prid_2011/multi_shot/cam_b/person_0001/...
      splits_prid2011.json            (optional; generated when absent)"""

MULTI_SHOT = os.path.join("prid_2011", "multi_shot")
SPLITS_FILE = "splits_prid2011.json"
GENERATED_FILE = "splits_prid2011.generated.json"
NUM_SHARED, NUM_SPLITS = 200, 10
_PERSON_RE = re.compile(r"person_(\d+)")
_HINT = "each split is {\"train\": [person folder names], \"test\": [...]} of people person_0001..person_0200."


def shared_people(cam_dirs: Sequence[str]) -> List[str]:
    """``person_0001`` .. ``person_0200``, each checked to be a folder in both cameras."""
    people = [f"person_{i:04d}" for i in range(1, NUM_SHARED + 1)]
    for cam_dir in cam_dirs:
        missing = [p for p in people if not os.path.isdir(os.path.join(cam_dir, p))]
        if missing:
            raise DatasetFormatError(f"PRID2011 person folder {os.path.join(cam_dir, missing[0])!r} is missing "
                                     f"({len(missing)} of people 1..{NUM_SHARED} are); extract the complete "
                                     "prid_2011/multi_shot folder.")
    return people


def generate_splits(people: Sequence[str], seed: int, num_splits: int = NUM_SPLITS) -> List[Dict[str, List[str]]]:
    """`num_splits` seeded half/half splits of `people` (sorted lists of folder names)."""
    rng = np.random.default_rng(seed)
    half = len(people) // 2
    splits = []
    for _ in range(num_splits):
        order = rng.permutation(len(people))
        splits.append({"train": sorted(people[i] for i in order[half:].tolist()),
                       "test": sorted(people[i] for i in order[:half].tolist())})
    return splits


def read_splits(path: str, people: Set[str]) -> List[Dict[str, List[str]]]:
    """The splits of JSON file `path`, each name checked against `people`; one-line errors."""
    require_file(path, "PRID2011 splits file", _HINT)
    try:
        with open(path, encoding="utf-8") as f:
            splits = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise DatasetFormatError(f"PRID2011 splits file {path!r} is not JSON ({e}); {_HINT}") from None
    if not isinstance(splits, list) or not splits:
        raise DatasetFormatError(f"PRID2011 splits file {path!r} is not a non-empty list of splits; {_HINT}")
    for k, split in enumerate(splits):
        parts = [split.get(part) if isinstance(split, dict) else None for part in ("train", "test")]
        if not all(isinstance(p, list) and p and all(isinstance(n, str) for n in p) for p in parts):
            raise DatasetFormatError(f"{path}: split {k} is {brief(split)}, not lists of person folder names; "
                                     f"{_HINT}")
        unknown = [n for n in parts[0] + parts[1] if n not in people]
        if unknown:
            raise DatasetFormatError(f"{path}: split {k} names {unknown[0]!r}, which is not one of the "
                                     f"{len(people)} people seen by both cameras; {_HINT}")
        both = set(parts[0]) & set(parts[1])
        if both:
            raise DatasetFormatError(f"{path}: split {k} puts {sorted(both)[0]!r} in both train and test; {_HINT}")
    return splits


def _read_text(path: str) -> str:
    """The text of file `path`, or "" when it is not a readable file."""
    if not os.path.isfile(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


@VIDEO_DATASET_REGISTRY.register("prid2011")
class PRID2011(VideoReIDDataset):
    """PRID2011 multi-shot with one of 10 splits (the JSON file's, or seeded); see the module docstring."""

    name = "prid2011"
    candidates = ("prid2011", "PRID2011", "")

    def __init__(self, root: str = "datasets", split_id: int = 0, split_seed: int = 0) -> None:
        cams = (os.path.join(MULTI_SHOT, "cam_a"), os.path.join(MULTI_SHOT, "cam_b"))
        self.dataset_dir = find_dataset_dir(root, self.candidates, cams, "PRID2011", LAYOUT)
        cam_dirs = (os.path.join(self.dataset_dir, cams[0]), os.path.join(self.dataset_dir, cams[1]))
        people = shared_people(cam_dirs)
        path = os.path.join(self.dataset_dir, SPLITS_FILE)
        notes: Dict[str, object] = {}
        if os.path.lexists(path):
            self.splits = read_splits(path, set(people))
            notes.update(split_source="file", splits_file=path)
        else:
            self.splits = generate_splits(people, split_seed)
            notes.update(split_source=f"generated (seed {split_seed})",
                         splits_file=self._record_generated(self.splits))
        self.split_id = check_split_id(split_id, len(self.splits), notes["splits_file"] or "the generated splits")
        self.num_splits = len(self.splits)
        split = self.splits[self.split_id]
        super().__init__(*split_tracklets(cam_dirs, split["train"], split["test"], _PERSON_RE, "person_0001"))
        self.test_notes.update(notes, split_id=self.split_id)

    def _record_generated(self, splits: List[Dict[str, List[str]]]) -> object:
        """Write generated `splits` next to the dataset; the path, or None when the folder is read-only
        (the splits are still reproducible from the seed)."""
        path = os.path.join(self.dataset_dir, GENERATED_FILE)
        text = json.dumps(splits, indent=1) + "\n"
        try:
            if _read_text(path) != text:
                atomic_write_text(path, text)
        except OSError:
            return None
        return path
