"""DATASETS.COMBINE_ALL: training on train + query + gallery identities of each dataset."""
from __future__ import annotations

import logging
import os
import shutil

import pytest

from reid.config import get_cfg
from reid.data import build_dataset, build_test_data, build_train_data
from reid.data.datasets import ReIDDataset, combine_all
from tests.data import cuhk03_files as fx

SYN = dict(num_train_ids=6, num_test_ids=4, num_cameras=3, images_per_camera=2, num_distractors=3,
           image_size=(64, 32), verbose=False)


def syn_cfg(root, names=("synthetic",), tests=("synthetic",)):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(root)
    cfg.DATASETS.NAMES = list(names)
    cfg.DATASETS.TESTS = list(tests)
    s = cfg.DATASETS.SYNTHETIC
    s.NUM_TRAIN_IDS, s.NUM_TEST_IDS, s.NUM_CAMERAS = SYN["num_train_ids"], SYN["num_test_ids"], SYN["num_cameras"]
    s.IMAGES_PER_CAMERA, s.NUM_DISTRACTORS, s.IMAGE_SIZE = SYN["images_per_camera"], SYN["num_distractors"], [64, 32]
    return cfg


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("combine")


@pytest.fixture(scope="module")
def synthetic(root):
    return build_dataset("synthetic", str(root), **SYN)


def test_combine_all_on_the_synthetic_dataset(synthetic):
    ds = synthetic
    items, dropped = combine_all(ds)
    test = [it for it in ds.query + ds.gallery if it[1] != 0]
    assert dropped == SYN["num_distractors"] == len(ds.query) + len(ds.gallery) - len(test)
    assert len(items) == len(ds.train) + len(test)
    # One contiguous label space: train identities keep 0..C-1, test identities follow.
    c, t = ds.num_train_pids, len({it[1] for it in test})
    assert (c, t) == (SYN["num_train_ids"], SYN["num_test_ids"])
    assert sorted({it[1] for it in items}) == list(range(c + t))
    assert items[: len(ds.train)] == ds.train
    # Every original test pid maps to one label (query and gallery alike), in sorted pid order.
    label = {}
    for (path, pid, cam), (path2, lab, cam2) in zip(test, items[len(ds.train):]):
        assert (path2, cam2) == (path, cam)  # camera ids kept
        assert label.setdefault(pid, lab) == lab
    assert sorted(label) == sorted(label, key=label.get) and set(label.values()) == set(range(c, c + t))
    assert not {p for p, _, _ in items} & {p for p, pid, _ in ds.gallery if pid == 0}


def test_generic_dataset_keeps_pid_0_separates_test_ids_and_dedups_paths():
    # MSMT17 numbers its test people from 0 again: same numbers, different people.
    ds = ReIDDataset(train=[("t0", 0, 0), ("t1", 0, 1), ("t2", 5, 0)],
                     query=[("q0", 0, 0), ("q1", 7, 1), ("both", 7, 2)],
                     gallery=[("g0", 0, 1), ("both", 7, 2), ("j", -1, 0)])
    items, dropped = combine_all(ds)
    assert dropped == 2  # the junk image and the repeated path
    assert items == [("t0", 0, 0), ("t1", 0, 1), ("t2", 1, 0),
                     ("q0", 2, 0), ("q1", 3, 1), ("both", 3, 2), ("g0", 2, 1)]


def test_build_train_data_combine_all_counts_and_validation(root, synthetic):
    cfg = syn_cfg(root)
    cfg.DATASETS.COMBINE_ALL = True
    td = build_train_data(cfg)
    n_test_images = len(synthetic.query) + len(synthetic.gallery) - SYN["num_distractors"]
    assert td.num_classes == 10 and len(td.items) == len(synthetic.train) + n_test_images
    assert sorted({p for _, p, _ in td.items}) == list(range(10))
    cams = {p: c for p, _, c in synthetic.train + synthetic.query + synthetic.gallery}
    assert all(cams[p] == c for p, _, c in td.items)
    # The validation split is held out of the combined set and never trained on.
    cfg.TEST.VAL_IDS = 3
    held = build_train_data(cfg)
    assert held.num_classes == 7 and sorted({p for _, p, _ in held.items}) == list(range(7))
    val = held.val_query + held.val_gallery
    assert len(held.items) + len(val) == len(td.items)
    assert not {p for p, _, _ in held.items} & {p for p, _, _ in val}


def test_combine_all_with_two_datasets_and_the_loud_warning(tmp_path, root, synthetic, caplog):
    fx.make_cuhk03(str(tmp_path))
    shutil.copytree(os.path.join(str(root), "synthetic"), os.path.join(str(tmp_path), "synthetic"))
    cfg = syn_cfg(tmp_path, names=("cuhk03", "synthetic"), tests=("synthetic", "cuhk03"))
    cfg.DATASETS.CUHK03.IMAGE_SET = "labeled"
    cfg.DATASETS.COMBINE_ALL = True
    with caplog.at_level(logging.INFO, logger="reid.data.build"):
        td = build_train_data(cfg)
    cuhk = [it for it in td.items if os.sep + "crops_labeled" + os.sep in it[0]]
    # CUHK03: every labeled image, all 13 identities, cameras as the loader numbers them (0..9).
    assert len(cuhk) == len(fx.file_order("labeled")) and {p for _, p, _ in cuhk} == set(range(sum(fx.PAIR_SIZES)))
    loaded = build_dataset("cuhk03", str(tmp_path), image_set="labeled")
    cams = {p: c for p, _, c in loaded.train + loaded.query + loaded.gallery}
    assert all(cams[p] == c for p, _, c in cuhk)
    # Synthetic follows with its own labels.
    assert td.num_classes == sum(fx.PAIR_SIZES) + 10
    assert {p for path, p, _ in td.items if "synthetic" in path} == set(range(13, 23))
    assert "training on all of cuhk03: %d images of 13 identities" % len(cuhk) in caplog.text
    # Evaluating on a dataset that was trained on says so, loudly, for each such test set.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="reid.data.build"):
        build_test_data(cfg, "synthetic", log=False)
    warn = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warn) == 1 and "synthetic is also a training dataset" in warn[0].getMessage()
    assert "NOT a held-out measure" in warn[0].getMessage() and "TEST.VAL_IDS" in warn[0].getMessage()


def test_no_warning_for_held_out_test_sets(root, caplog):
    cfg = syn_cfg(root)
    with caplog.at_level(logging.WARNING, logger="reid.data.build"):
        build_test_data(cfg, "synthetic", log=False)  # COMBINE_ALL off
        cfg.DATASETS.COMBINE_ALL = True
        cfg.DATASETS.NAMES = ["market1501"]
        build_test_data(cfg, "synthetic", log=False)  # trained on another dataset
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
