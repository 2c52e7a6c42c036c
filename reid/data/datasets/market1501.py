"""Market-1501 (Zheng et al., ICCV 2015): 1,501 identities, 6 cameras, Tsinghua campus.

Searched, in order (the first that holds all three sub-folders wins):
``root/Market-1501-v15.09.15``, ``root/market1501``, ``root`` itself.

Loaded counts of the official release: train 751 ids / 12,936 images, query 750 ids /
3,368 images, gallery 15,913 images of 751 ids (the 750 test ids plus pid 0, the 2,793
``0000`` distractor images, which are kept). bounding_box_test holds 19,732 images; its
3,819 junk ``-1`` images are dropped (19,732 - 3,819 = 15,913).
"""
from __future__ import annotations

from .base import DATASET_REGISTRY, ReIDDataset, find_dataset_dir
from .market_style import SUBDIRS, load_market_splits

LAYOUT = """\
  <root>/Market-1501-v15.09.15/      (or <root>/market1501/, or <root> itself)
      bounding_box_train/   0002_c1s1_000451_03.jpg ...
      query/                0001_c1s1_001051_00.jpg ...
      bounding_box_test/    0000_c1s1_000151_01.jpg, -1_c1s1_000401_03.jpg ..."""


@DATASET_REGISTRY.register("market1501")
class Market1501(ReIDDataset):
    """Market-1501 from its release folder; see the module docstring for the layout."""

    name = "market1501"
    #: Folder names tried under the root, in order ("" = the root itself).
    candidates = ("Market-1501-v15.09.15", "market1501", "")
    num_cams = 6
    #: 0000 images are distractors: many different people, never a training class.
    distractor_pids = (0,)

    def __init__(self, root: str = "datasets") -> None:
        self.dataset_dir = find_dataset_dir(root, self.candidates, SUBDIRS, "Market-1501", LAYOUT)
        super().__init__(*load_market_splits(self.dataset_dir, self.num_cams))
