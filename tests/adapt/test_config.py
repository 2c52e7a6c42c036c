"""reid/adapt/config.py: the adaptation's training config from the model's own."""
from __future__ import annotations

import pytest

from reid.adapt.config import FALLBACK_EPS, adaptation_opts, batch_size, build_adaptation_config
from reid.config import get_cfg
from reid.tracking.to_reid import TRACKLET_REGEX


def test_the_batch_fits_the_crops_in_whole_groups_of_k():
    assert batch_size(1000, 100, 64, 4, "c.txt") == 64
    assert batch_size(50, 100, 64, 4, "c.txt") == 24  # at most half the crops, a multiple of K
    assert batch_size(1000, 16, 64, 4, "c.txt") == 16  # P at most a quarter of the tracklets
    assert batch_size(9, 100, 64, 4, "c.txt") == 8  # at least two groups
    assert batch_size(100, 100, 64, 16, "c.txt") == 48
    with pytest.raises(ValueError, match=r"c.txt holds 7 crops, fewer than one batch of 2 x DATALOADER.NUM_INSTANCE 4"):
        batch_size(7, 100, 64, 4, "c.txt")


def _opts(num_crops, cameras, label_smooth=0.0, lines=None):
    opts = adaptation_opts(num_crops, 400, cameras, "/c/crops.txt", "/m.pth", "/o", 3, 4, 64, label_smooth, True,
                           (lines if lines is not None else []).append)
    return dict(zip(opts[0::2], opts[1::2]))


def test_the_data_decides_the_radius_and_the_camera_options():
    lines = []
    few = _opts(150, 2, lines=lines)
    assert few["UDA.EPS"] == FALLBACK_EPS and len(lines) == 1 and "150 crops" in lines[0]
    many = _opts(800, 2)
    assert many["UDA.EPS"] == "auto"
    assert many["UDA.CAMERA_AWARE"] is True and many["UDA.CAMERA_NEIGHBOURS"] is True
    one = _opts(800, 1)
    assert one["UDA.CAMERA_AWARE"] is False and one["UDA.CAMERA_NEIGHBOURS"] is False
    assert many["UDA.TRACKLET_REGEX"] == TRACKLET_REGEX and many["UDA.TRACKLET_SPLIT"] == 0.5
    assert many["SOLVER.IMS_PER_BATCH"] == 64 and many["UDA.ITERS_PER_EPOCH"] == 800 // 64
    assert many["DATASETS.NAMES"] == ["unlabelled"] and many["DATASETS.TESTS"] == []
    assert many["DATASETS.UNLABELLED.LIST"] == "/c/crops.txt" and many["MODEL.WEIGHTS"] == "/m.pth"


def test_label_smoothing_goes_with_one_line_only_where_the_model_had_it():
    lines = []
    opts = _opts(800, 3, label_smooth=0.1, lines=lines)
    assert opts["MODEL.LOSSES.ID.LABEL_SMOOTH"] == 0.0 and opts["MODEL.LOSSES.NAMES"] == ["identity"]
    assert len(lines) == 1 and "LABEL_SMOOTH 0 (the model's config has 0.1)" in lines[0]
    lines.clear()
    _opts(800, 3, label_smooth=0.0, lines=lines)
    assert lines == []


def test_the_models_config_stays_and_the_users_overrides_come_last(tmp_path):
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.INPUT.SIZE_TEST = [96, 48]
    cfg.MODEL.LOSSES.ID.LABEL_SMOOTH = 0.1
    cfg.DATALOADER.NUM_INSTANCE = 8
    path = tmp_path / "model.yaml"
    path.write_text(cfg.dump())
    built = build_adaptation_config(str(path), 500, 200, 2, "/c/crops.txt", "/m.pth", str(tmp_path / "run"), 4,
                                    ["UDA.EPS", "0.3", "SOLVER.BASE_LR", "0.001"], lambda _: None)
    assert built.MODEL.BACKBONE.NAME == "resnet18" and list(built.INPUT.SIZE_TEST) == [96, 48]
    assert built.UDA.ENABLED and built.UDA.EPS == pytest.approx(0.3) and built.SOLVER.BASE_LR == pytest.approx(0.001)
    assert built.SOLVER.IMS_PER_BATCH % 8 == 0 and built.SOLVER.MAX_EPOCH == 4
    assert built.MODEL.LOSSES.ID.LABEL_SMOOTH == 0.0 and not built.MODEL.BACKBONE.PRETRAINED
    # the user's K is the one the batch is sized for
    built = build_adaptation_config(str(path), 500, 200, 2, "/c/crops.txt", "/m.pth", str(tmp_path / "run"), 4,
                                    ["DATALOADER.NUM_INSTANCE", "6"], lambda _: None)
    assert built.SOLVER.IMS_PER_BATCH % 6 == 0
