"""DukeMTMC-reID (Zheng et al., ICCV 2017): 1,404 identities + distractors, 8 cameras.

The DukeMTMC data was withdrawn by its authors in 2019; see datasets/README.md before using it.
Searched, in order: ``root/DukeMTMC-reID``, ``root/dukemtmc-reid``, ``root`` itself.
Loaded counts of the release: train 702 ids / 16,522 images, query 2,228, gallery 17,661.
"""
from __future__ import annotations

from .base import DATASET_REGISTRY, ReIDDataset, find_dataset_dir
from .market_style import SUBDIRS, load_market_splits

LAYOUT = """\
  <root>/DukeMTMC-reID/              (or <root>/dukemtmc-reid/, or <root> itself)
      bounding_box_train/   0001_c2_f0046182.jpg ...
      query/                0005_c2_f0046985.jpg ...
      bounding_box_test/    0002_c1_f0044158.jpg ..."""


@DATASET_REGISTRY.register("dukemtmc")
class DukeMTMC(ReIDDataset):
    """DukeMTMC-reID from its release folder; same naming family as Market-1501."""

    name = "dukemtmc"
    candidates = ("DukeMTMC-reID", "dukemtmc-reid", "")
    num_cams = 8

    def __init__(self, root: str = "datasets") -> None:
        self.dataset_dir = find_dataset_dir(root, self.candidates, SUBDIRS, "DukeMTMC-reID", LAYOUT)
        super().__init__(*load_market_splits(self.dataset_dir, self.num_cams))
