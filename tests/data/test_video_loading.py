"""Video datasets from a config (reid/data/build.py): tracklets as training items, clips of
DATALOADER.VIDEO.SEQ_LEN frames in P x K batches, test sets with their junk rule, and one-line
errors for names, mixed kinds and sampling keys."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reid.config import ConfigError, get_cfg
from reid.data import build_test_set, build_train_data, build_train_loader
from reid.data.build import check_dataset_names
from reid.evaluation.eval_sets import check_test_settings

from .video.video_files import write_mars


def video_cfg(root, names=("synthetic_video",)):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(root)
    cfg.DATASETS.NAMES = list(names)
    cfg.DATASETS.TESTS = ["synthetic_video"]
    s = cfg.DATASETS.SYNTHETIC
    s.NUM_TRAIN_IDS, s.NUM_TEST_IDS, s.NUM_CAMERAS, s.IMAGE_SIZE = 6, 3, 3, [32, 16]
    cfg.DATASETS.VIDEO.FRAMES = 5
    cfg.INPUT.SIZE_TRAIN = [32, 16]
    cfg.SOLVER.IMS_PER_BATCH = 4
    cfg.DATALOADER.NUM_INSTANCE = 2
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.DATALOADER.VIDEO.SEQ_LEN = 3
    return cfg


def test_training_items_are_tracklets_and_batches_are_p_by_k_clips(tmp_path):
    cfg = video_cfg(tmp_path)
    data = build_train_data(cfg)
    assert data.num_classes == 6 and all(isinstance(t[0], tuple) and len(t[0]) == 5 for t in data.items)
    loader = build_train_loader(cfg, data.items)
    loader.sampler.set_epoch(0)
    batch = next(iter(loader))
    assert batch["images"].shape == (4, 3, 3, 32, 16) and batch["images"].dtype == torch.uint8
    assert batch["frame_mask"].shape == (4, 3) and bool(batch["frame_mask"].all())
    assert sorted(np.bincount(batch["targets"].numpy()).tolist())[-2:] == [2, 2]  # P=2 identities x K=2 clips
    # each clip's first frame is a frame of a tracklet of its identity and camera
    owner = {f: (pid, cam) for frames, pid, cam in data.items for f in frames}
    assert all(owner[p] == (int(t), int(c)) for p, t, c in zip(batch["img_paths"], batch["targets"], batch["camids"]))
    # the same epoch drawn again gives the same clips (a resumed run reads what the first one did)
    loader.sampler.set_epoch(0)
    assert torch.equal(next(iter(loader))["images"], batch["images"])


def test_test_sets_carry_their_junk_rule(tmp_path):
    cfg = video_cfg(tmp_path)
    test = build_test_set(cfg, "synthetic_video")
    assert test.junk_pids == () and test.protocol == "cross_camera" and isinstance(test.query[0][0], tuple)
    write_mars(str(tmp_path))
    assert build_test_set(cfg, "mars").junk_pids == (-1,)


def test_names_kinds_and_sampling_keys_are_one_line_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown dataset 'mars2'.*video: .*mars.*synthetic_video"):
        check_dataset_names(["mars2"], "DATASETS.NAMES")
    cfg = video_cfg(tmp_path, names=("synthetic_video", "synthetic"))
    with pytest.raises(ConfigError, match=r"DATASETS.NAMES .* mixes video datasets \(synthetic_video\) with image "
                                          r"datasets \(synthetic\)"):
        build_train_data(cfg)
    for key, value, message in (("SEQ_LEN", 0, "DATALOADER.VIDEO.SEQ_LEN must be a positive integer, got 0"),
                                ("STRIDE", -2, "DATALOADER.VIDEO.STRIDE must be a positive integer, got -2"),
                                ("SAMPLER", "dense", "'dense'.*all, consecutive, evenly, random, stride")):
        cfg = video_cfg(tmp_path)
        setattr(cfg.DATALOADER.VIDEO, key, value)
        with pytest.raises(ConfigError, match=message) as err:
            build_train_data(cfg)
        assert "\n" not in str(err.value)
    cfg = video_cfg(tmp_path)
    cfg.DATALOADER.VIDEO.TEST_SAMPLER = "random"
    with pytest.raises(ConfigError, match="TEST_SAMPLER 'random'.*valid: all, evenly"):
        check_test_settings(cfg)
    cfg.DATASETS.TESTS = ["synthetic"]  # only image test sets: the video key is not used, not checked
    check_test_settings(cfg)


def test_learning_without_labels_on_tracklets_is_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError, match=r"UDA.ENABLED\) clusters images, not tracklets") as err:
        build_train_data(video_cfg(tmp_path), labels_required=False)
    assert "\n" not in str(err.value)


def test_tracklets_shorter_than_a_clip_are_counted_in_one_line(tmp_path, caplog):
    cfg = video_cfg(tmp_path)
    cfg.DATASETS.VIDEO.FRAMES, cfg.DATALOADER.VIDEO.SEQ_LEN = 2, 3
    with caplog.at_level("WARNING", logger="reid.data.build"):
        data = build_train_data(cfg)
    lines = [r.getMessage() for r in caplog.records if "SEQ_LEN" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0]
    assert lines[0].startswith(f"{len(data.items)} of {len(data.items)} training tracklets have fewer than "
                               "DATALOADER.VIDEO.SEQ_LEN 3 frames (0 of them one frame")
    loader = build_train_loader(cfg, data.items)
    loader.sampler.set_epoch(0)
    batch = next(iter(loader))
    assert batch["images"].shape[1] == 3 and bool(batch["frame_mask"].all())  # 2 frames filled to a clip of 3
