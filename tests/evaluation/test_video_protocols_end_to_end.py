"""The video protocols end to end, with ranks computed by hand: a MARS release and an iLIDS-VID split built
like the real files, their frames painted so that a tracklet's feature is its frames' mean grey level; the
test set, the tracklet extraction (frames in small batches, pooled) and the evaluator's junk rule give the
expected CMC, mAP and mINP."""
from __future__ import annotations

import glob
import os

import cv2
import numpy as np
import pytest
import torch
from torch import nn

from reid.config import get_cfg
from reid.data import build_test_set
from reid.evaluation.evaluator import evaluate_model
from reid.modeling.temporal import TemporalAvgPool
from tests.data.video.video_files import write_ilidsvid, write_mars


class GreyModel(nn.Module):
    """A frame's feature is ``[mean grey / 255, 1]``; a tracklet's the mean of its frames'; no neck."""

    def __init__(self) -> None:
        super().__init__()
        self.anchor = nn.Parameter(torch.zeros(1))  # the evaluator reads the device from a parameter
        self.temporal = TemporalAvgPool()

    def frame_features(self, images, camids=None):
        grey = images.float().mean(dim=(1, 2, 3)) / 255.0
        return torch.stack([grey, torch.ones_like(grey)], dim=1)

    def embed_pooled(self, pooled):
        return pooled


def _paint(paths, grey):
    """Overwrite every frame in `paths` with one grey level (several levels: frame k gets grey[k % n])."""
    levels = grey if isinstance(grey, (list, tuple)) else [grey]
    for k, path in enumerate(sorted(paths)):
        h, w = cv2.imread(path).shape[:2]
        assert cv2.imwrite(path, np.full((h, w, 3), levels[k % len(levels)], np.uint8))


def _cfg(root):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(root)
    cfg.INPUT.SIZE_TEST = [8, 4]
    cfg.TEST.METRIC = "euclidean"
    cfg.TEST.IMS_PER_BATCH = 3  # tracklets cross batch borders
    cfg.DATALOADER.NUM_WORKERS = 0
    return cfg


def _evaluate(cfg, name, junk=True):
    test = build_test_set(cfg, name, log=False)
    return evaluate_model(cfg, GreyModel(), test.query, test.gallery, rerank=False, flip=False, open_set=False,
                          verification=False, junk_pids=test.junk_pids if junk else ())


def test_a_mars_query_set_with_junk_and_a_distractor_ranks_as_computed_by_hand(tmp_path):
    files = write_mars(str(tmp_path))
    test_dir = os.path.join(files["dir"], "bbox_test")
    frames = lambda prefix: glob.glob(os.path.join(test_dir, "*", prefix + "*"))  # noqa: E731
    # queries (pid 2 camera 1, pid 4 camera 3) at grey 20; gallery, nearest first: the junk tracklet (40),
    # the distractor (60), pid 2 in camera 2 (frames 70 and 90: mean 80), pid 4 in camera 1 (100)
    _paint(frames("0002C1") + frames("0004C3"), 20)
    _paint(frames("00-1C2"), 40)
    _paint(frames("0000C1"), 60)
    _paint(frames("0002C2"), [70, 90])
    _paint(frames("0004C1"), 100)
    cfg = _cfg(tmp_path)
    result = _evaluate(cfg, "mars")
    plain = result.metrics["plain"]
    # junk ignored: pid 2's query finds its match 2nd (after the distractor), pid 4's 3rd
    assert plain["R-1"] == 0.0 and plain["R-5"] == 100.0
    assert plain["mAP"] == pytest.approx(100 * (1 / 2 + 1 / 3) / 2)
    assert plain["mINP"] == pytest.approx(100 * (1 / 2 + 1 / 3) / 2)
    np.testing.assert_allclose(result.cmc["plain"][:3], [0.0, 0.5, 1.0])
    assert len(result.gallery) == 3 and -1 not in result.gallery.pids.tolist()
    # the junk tracklet counted as a miss would push every match one rank down
    counted = _evaluate(cfg, "mars", junk=False).metrics["plain"]
    assert counted["mAP"] == pytest.approx(100 * (1 / 3 + 1 / 4) / 2)


def test_one_ilids_vid_split_ranks_as_computed_by_hand(tmp_path):
    folder = write_ilidsvid(str(tmp_path))
    seq = os.path.join(folder, "i-LIDS-VID", "sequences")
    frames = lambda cam, p: glob.glob(os.path.join(seq, f"cam{cam}", f"person{p:03d}", "*.png"))  # noqa: E731
    # split 0 tests people 1, 2 and 4: queries from camera 1 (grey 20), gallery from camera 2 at 60 (frames
    # 50 and 70), 30 and 40: every query ranks person 2, then 4, then 1
    for p in (1, 2, 4):
        _paint(frames(1, p), 20)
    _paint(frames(2, 1), [50, 70])
    _paint(frames(2, 2), 30)
    _paint(frames(2, 4), 40)
    cfg = _cfg(tmp_path)
    cfg.DATASETS.VIDEO.SPLIT_ID = 0
    result = _evaluate(cfg, "ilidsvid")
    assert sorted(result.query.pids.tolist()) == [1, 2, 4] and result.query.camids.tolist() == [0, 0, 0]
    plain = result.metrics["plain"]
    # person 1 found 3rd, person 2 1st, person 4 2nd
    assert plain["R-1"] == pytest.approx(100 / 3) and plain["R-5"] == 100.0
    assert plain["mAP"] == pytest.approx(100 * (1 / 3 + 1 + 1 / 2) / 3)
    assert plain["mINP"] == pytest.approx(100 * (1 / 3 + 1 + 1 / 2) / 3)
