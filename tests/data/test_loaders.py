"""Training data assembly, loaders, batch format and corrupt-image handling."""
from __future__ import annotations

import logging
import os
import re

import numpy as np
import pytest
import torch

from reid.config import get_cfg
from reid.data import (
    IdentitySampler,
    build_test_data,
    build_test_loader,
    build_train_data,
    build_train_loader,
    dataset_kwargs,
)
from reid.data.dataset_wrappers import ImageDataset
from reid.data.image_io import CorruptImageError, filter_readable, jpeg_is_truncated, read_image
from reid.data.samplers import ShuffleSampler


def tiny_cfg(root, names=("synthetic",)):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(root)
    cfg.DATASETS.NAMES = list(names)
    cfg.DATASETS.TESTS = ["synthetic"]
    s = cfg.DATASETS.SYNTHETIC
    s.NUM_TRAIN_IDS, s.NUM_TEST_IDS, s.NUM_CAMERAS, s.IMAGES_PER_CAMERA, s.NUM_DISTRACTORS = 8, 3, 3, 2, 2
    s.IMAGE_SIZE = [64, 32]
    cfg.INPUT.SIZE_TRAIN = [48, 24]
    cfg.INPUT.SIZE_TEST = [40, 20]
    cfg.SOLVER.IMS_PER_BATCH = 8
    cfg.DATALOADER.NUM_INSTANCE = 2
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.TEST.IMS_PER_BATCH = 7
    return cfg


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("data")


def add_market(root, write_jpeg):
    files = {"bounding_box_train": ["0002_c1s1_000451_03.jpg", "0002_c2s1_000551_01.jpg", "0009_c3s1_000601_01.jpg",
                                    "0009_c4s1_000601_01.jpg"],
             "query": ["0002_c4s1_002351_00.jpg"], "bounding_box_test": ["0002_c1s1_000151_01.jpg"]}
    for sub, names in files.items():
        for n in names:
            write_jpeg(os.path.join(str(root), "market1501", sub, n))


def test_build_train_data_relabels_and_holds_out_validation(root):
    cfg = tiny_cfg(root)
    full = build_train_data(cfg)
    assert full.num_classes == 8 and full.val_query == [] and full.val_gallery == []
    assert sorted({p for _, p, _ in full.items}) == list(range(8))
    cfg.TEST.VAL_IDS = 3
    td = build_train_data(cfg)
    assert td.num_classes == 5 and sorted({p for _, p, _ in td.items}) == list(range(5))
    assert len(td.items) + len(td.val_query) + len(td.val_gallery) == len(full.items)
    val_ids = {p for _, p, _ in td.val_query}
    assert len(val_ids) == 3 == len(td.val_query)  # one query per held-out identity
    assert {p for _, p, _ in td.val_gallery} == val_ids
    train_paths = {p for p, _, _ in td.items}
    assert train_paths.isdisjoint(p for p, _, _ in td.val_query + td.val_gallery)
    for _, pid, cam in td.val_query:  # synthetic ids span >= 2 cameras: a cross-camera match exists
        assert any(p == pid and c != cam for _, p, c in td.val_gallery)
    again = build_train_data(cfg)
    assert again.val_query == td.val_query  # seeded by SEED
    cfg.SEED = 1
    assert build_train_data(cfg).val_query != td.val_query
    cfg.TEST.VAL_IDS = 8
    with pytest.raises(ValueError, match="TEST.VAL_IDS"):
        build_train_data(cfg)


def test_combined_datasets_offset_pids(tmp_path, root, write_jpeg):
    add_market(tmp_path, write_jpeg)
    cfg = tiny_cfg(tmp_path, names=("market1501", "synthetic"))
    td = build_train_data(cfg)
    assert [d.name for d in td.datasets] == ["market1501", "synthetic"]
    assert td.num_classes == 2 + 8
    market = [it for it in td.items if "market1501" in it[0]]
    assert sorted({p for _, p, _ in market}) == [0, 1]  # market first: 2 -> 0, 9 -> 1
    assert {p for p, _, _ in market} and all(p >= 2 for path, p, _ in td.items if "synthetic" in path)
    assert {c for _, _, c in market} == {0, 1, 2, 3}  # camera ids kept as the dataset numbers them


def test_train_loader_batch_format(root):
    cfg = tiny_cfg(root)
    td = build_train_data(cfg)
    loader = build_train_loader(cfg, td.items)
    assert isinstance(loader.sampler, IdentitySampler) and loader.sampler.sample_seeds
    assert len(loader) == loader.sampler.num_batches
    loader.sampler.set_epoch(0)
    batches = list(loader)
    assert len(batches) == len(loader)
    b = batches[0]
    assert set(b) == {"images", "targets", "camids", "img_paths"}
    assert b["images"].dtype == torch.uint8 and b["images"].shape == (8, 3, 48, 24)
    assert b["targets"].dtype == torch.int64 and b["camids"].dtype == torch.int64
    assert isinstance(b["img_paths"], list) and all(isinstance(p, str) for p in b["img_paths"])
    assert sorted(np.bincount(b["targets"].numpy()).tolist())[-4:] == [2, 2, 2, 2]  # P=4 x K=2
    lookup = {p: (pid, cam) for p, pid, cam in td.items}
    assert all(lookup[p] == (int(t), int(c)) for p, t, c in zip(b["img_paths"], b["targets"], b["camids"]))


def test_train_loader_random_sampler_and_errors(root):
    cfg = tiny_cfg(root)
    td = build_train_data(cfg)
    cfg.DATALOADER.SAMPLER = "random"
    loader = build_train_loader(cfg, td.items)
    assert isinstance(loader.sampler, ShuffleSampler)
    assert len(next(iter(loader))["targets"]) == 8
    cfg.DATALOADER.SAMPLER = "balanced"
    with pytest.raises(ValueError, match="identity, random"):
        build_train_loader(cfg, td.items)


def _epoch(loader, epoch, start_batch=0):
    loader.sampler.set_epoch(epoch, start_batch=start_batch)
    return list(loader)


@pytest.mark.slow
def test_augmentation_is_a_function_of_the_sample_position_not_of_the_workers(root):
    """Per-sample seeds: persistent workers, any worker count and a mid-epoch start all give
    the images an uninterrupted single-process epoch gives."""
    cfg = tiny_cfg(root)
    td = build_train_data(cfg)
    reference = _epoch(build_train_loader(cfg, td.items), 0)  # no workers
    cfg.DATALOADER.NUM_WORKERS = 2
    loader = build_train_loader(cfg, td.items)
    assert loader.persistent_workers  # no worker restart each epoch
    with_workers = _epoch(loader, 0)
    tail = _epoch(loader, 0, start_batch=2)  # a resume after two batches, same worker processes
    next_epoch = _epoch(loader, 1)
    assert len(with_workers) == len(reference) and len(tail) == len(reference) - 2
    for got, want in zip(with_workers, reference):
        assert got["img_paths"] == want["img_paths"] and torch.equal(got["images"], want["images"])
    for got, want in zip(tail, reference[2:]):
        assert got["img_paths"] == want["img_paths"] and torch.equal(got["images"], want["images"])
    # The transform is random (flip, pad-crop, erasing): the same image in another epoch, or
    # with another SEED, comes out differently.
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.SEED = cfg.SEED + 1
    reseeded = _epoch(build_train_loader(cfg, td.items), 0)
    first = {p: img for b in reference for p, img in zip(b["img_paths"], b["images"])}
    for other in (next_epoch, reseeded):
        pairs = [(img, first[p]) for b in other for p, img in zip(b["img_paths"], b["images"]) if p in first]
        assert len(pairs) > 10 and sum(not torch.equal(x, y) for x, y in pairs) > len(pairs) // 2


def test_test_loader_query_then_gallery(root):
    cfg = tiny_cfg(root)
    query, gallery = build_test_data(cfg, "synthetic")
    loader = build_test_loader(cfg, query, gallery)
    got = [b for b in loader]
    paths = [p for b in got for p in b["img_paths"]]
    assert paths == [p for p, _, _ in query + gallery]
    pids = torch.cat([b["targets"] for b in got]).tolist()
    assert pids == [p for _, p, _ in query + gallery]  # original pids, distractors 0
    assert got[0]["images"].shape[1:] == (3, 40, 20) and len(got[0]["targets"]) == 7
    assert sum(len(b["targets"]) for b in got) == len(query) + len(gallery)


def test_dataset_kwargs_from_config():
    cfg = get_cfg()
    cfg.DATASETS.MSMT17_COMBINE_VAL = False
    cfg.DATASETS.CUSTOM.TRAIN_LIST = "t.txt"
    cfg.DATASETS.MSMT17_VERSION = "v2"
    assert dataset_kwargs(cfg, "msmt17") == {"combine_val": False, "version": "v2"}
    assert dataset_kwargs(cfg, "custom")["train_list"] == "t.txt"
    syn = dataset_kwargs(cfg, "synthetic")
    assert syn["num_train_ids"] == cfg.DATASETS.SYNTHETIC.NUM_TRAIN_IDS and syn["image_size"] == (128, 64)
    assert dataset_kwargs(cfg, "market1501") == {}


# ----------------------------------------------------------------------- corrupt images
def truncate(path):
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])


def test_read_image_errors_name_the_file(tmp_path, write_jpeg):
    good = write_jpeg(str(tmp_path / "ok.jpg"), size=(10, 6), value=200)
    img = read_image(good)
    assert img.shape == (10, 6, 3) and img.dtype == np.uint8
    bad = tmp_path / "notes.jpg"
    bad.write_text("not an image")
    with pytest.raises(CorruptImageError, match=r"notes.jpg.*DATASETS.SKIP_CORRUPT"):
        read_image(str(bad))
    cut = write_jpeg(str(tmp_path / "cut.jpg"), size=(64, 32))
    truncate(cut)
    with pytest.raises(CorruptImageError, match="cut.jpg.*truncated"):
        read_image(cut)
    with pytest.raises(CorruptImageError, match="missing.jpg"):
        read_image(str(tmp_path / "missing.jpg"))


def test_corrupt_training_image_stops_or_is_skipped(tmp_path, write_jpeg, reid_log):
    add_market(tmp_path, write_jpeg)
    bad = os.path.join(str(tmp_path), "market1501", "bounding_box_train", "0009_c4s1_000601_01.jpg")
    truncate(bad)
    cfg = tiny_cfg(tmp_path, names=("market1501",))
    cfg.SOLVER.IMS_PER_BATCH = 4
    td = build_train_data(cfg)
    assert len(td.items) == 4
    cfg.DATALOADER.SAMPLER = "random"
    with pytest.raises(CorruptImageError, match="0009_c4s1_000601_01.jpg"):
        list(build_train_loader(cfg, td.items))
    cfg.DATASETS.SKIP_CORRUPT = True
    reid_log.clear()
    with reid_log.at_level(logging.INFO, logger="reid"):
        td = build_train_data(cfg)
    assert len(td.items) == 3 and bad not in {p for p, _, _ in td.items}
    warned = [r.getMessage() for r in reid_log.records if r.levelno == logging.WARNING]
    assert len(warned) == 1  # once, not twice
    assert re.search(r"skipped 1 unreadable of 4 market1501 train images.*0009_c4s1_000601_01", warned[0])
    # The dataset's table counts what is used, and says what was checked.
    table = [r.getMessage() for r in reid_log.records if "Dataset market1501" in r.getMessage()][-1]
    assert re.search(r"train\s+\|\s+\d+\s+\|\s+3\s+\|", table) and "left out of train)" in table


def test_skip_mode_replaces_an_image_that_breaks_later(tmp_path, write_jpeg, reid_log):
    paths = [write_jpeg(str(tmp_path / f"{i}.jpg")) for i in range(4)]
    items = [(paths[0], 1, 0), (paths[1], 1, 1), (paths[2], 2, 0), (paths[3], 2, 1)]
    truncate(paths[0])
    assert filter_readable(items[1:])[1] == []
    ds = ImageDataset(items, skip_corrupt=True)
    with reid_log.at_level(logging.WARNING, logger="reid"):
        sample = ds[0]
    assert re.search(r"0.jpg.*replaced by.*1.jpg", reid_log.text) and len(reid_log.records) == 1
    assert sample["img_paths"] == paths[1] and sample["targets"] == 1  # same identity
    assert ds.num_replaced == 1 and sample["images"].shape == (3, 32, 16)
    with pytest.raises(CorruptImageError, match="0.jpg"):
        ImageDataset(items)[0]


def test_read_image_missing_file_says_check_the_root_not_skip(tmp_path):
    with pytest.raises(CorruptImageError) as e:
        read_image(str(tmp_path / "gone" / "missing.jpg"))
    msg = str(e.value)
    assert "missing.jpg" in msg and "does not exist" in msg and "DATASETS.ROOT" in msg
    assert "SKIP_CORRUPT" not in msg and "Replace or delete" not in msg


def jpeg_with_thumbnail(write_jpeg, path):
    """A JPEG whose APP1 segment holds a complete small JPEG, as an EXIF thumbnail does."""
    main = open(write_jpeg(str(path), size=(32, 16)), "rb").read()
    thumb = open(write_jpeg(str(path) + ".thumb.jpg", size=(8, 8)), "rb").read()
    payload = b"Exif\0\0" + thumb
    data = main[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + main[2:]
    with open(path, "wb") as f:
        f.write(data)
    return data


def test_jpeg_padded_after_its_end_marker_is_accepted(tmp_path, write_jpeg):
    path = write_jpeg(str(tmp_path / "padded.jpg"), size=(64, 32))
    clean = read_image(path)
    with open(path, "ab") as f:
        f.write(b"\0" * 3000)  # more than the 1 KB tail the old check searched
    assert np.array_equal(read_image(path), clean)
    assert filter_readable([(path, 1, 0)])[1] == []
    data = jpeg_with_thumbnail(write_jpeg, tmp_path / "thumb.jpg")
    assert not jpeg_is_truncated(data) and read_image(str(tmp_path / "thumb.jpg")).shape == (32, 16, 3)


def test_jpeg_cut_in_its_main_scan_is_truncated_despite_a_thumbnail_end_marker(tmp_path, write_jpeg):
    data = jpeg_with_thumbnail(write_jpeg, tmp_path / "cut.jpg")
    sos = data.rfind(b"\xff\xda")  # the main image's start of scan
    cut = data[: sos + (len(data) - sos) // 2]
    # The thumbnail's end marker survives the cut, close to the end of the file.
    assert b"\xff\xd9" in cut and len(cut) - cut.rfind(b"\xff\xd9") < 1024
    assert jpeg_is_truncated(cut)
    (tmp_path / "cut.jpg").write_bytes(cut)
    with pytest.raises(CorruptImageError, match="cut.jpg.*truncated"):
        read_image(str(tmp_path / "cut.jpg"))


def test_same_dataset_twice_is_refused(root):
    cfg = tiny_cfg(root, names=("synthetic", "Synthetic"))
    with pytest.raises(ValueError, match=r"DATASETS.NAMES.*'synthetic' more than once"):
        build_train_data(cfg)


def corrupt_all(folder):
    for dirpath, _, files in os.walk(folder):
        for f in files:
            with open(os.path.join(dirpath, f), "w") as fh:
                fh.write("<html>not an image</html>")


def test_skip_corrupt_with_nothing_readable_says_so(tmp_path, write_jpeg):
    add_market(tmp_path, write_jpeg)
    corrupt_all(tmp_path / "market1501" / "bounding_box_train")
    cfg = tiny_cfg(tmp_path, names=("market1501",))
    cfg.DATASETS.SKIP_CORRUPT = True
    with pytest.raises(ValueError) as e:
        build_train_data(cfg)
    msg = str(e.value)
    assert "market1501" in msg and "failed to read" in msg and "DATASETS.ROOT" in msg and str(tmp_path) in msg
    assert "IMS_PER_BATCH" not in msg
    for split, folder in (("query", "query"), ("gallery", "bounding_box_test")):
        add_market(tmp_path, write_jpeg)  # readable again
        corrupt_all(tmp_path / "market1501" / folder)
        with pytest.raises(ValueError, match=f"{split} images of market1501.*failed"):
            build_test_data(cfg, "market1501")


def test_test_loader_never_replaces_an_image_that_breaks_later(tmp_path, write_jpeg):
    add_market(tmp_path, write_jpeg)
    cfg = tiny_cfg(tmp_path, names=("market1501",))
    cfg.DATASETS.SKIP_CORRUPT = True
    query, gallery = build_test_data(cfg, "market1501")
    truncate(query[0][0])  # breaks after the up-front scan; its gallery match has the same pid
    with pytest.raises(CorruptImageError, match="0002_c4s1_002351_00.jpg"):
        list(build_test_loader(cfg, query, gallery))
