"""CUHK03 from a tiny cuhk-03.mat and split files written in the official layouts."""
from __future__ import annotations

import os
import shutil

import cv2
import numpy as np
import pytest

from reid.config import get_cfg
from reid.data import build_dataset, build_train_data, dataset_kwargs
from reid.data.datasets import DatasetFormatError, DatasetNotFoundError
from reid.data.datasets import cuhk03 as cuhk03_module
from tests.data import cuhk03_files as fx


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """The fixture release, written once per module (writing the .mat is the slow part)."""
    return fx.make_cuhk03(str(tmp_path_factory.mktemp("cuhk03_template")))


@pytest.fixture
def release(tmp_path, template):
    """A fresh copy of the fixture release under tmp_path/cuhk03 (paths of its files)."""
    shutil.copytree(template["dir"], os.path.join(str(tmp_path), "cuhk03"))
    return {k: v.replace(os.path.dirname(template["dir"]), str(tmp_path)) for k, v in template.items()}


def load(root, **kw):
    return build_dataset("cuhk03", str(root), **kw)


def expected_camid(pair, cell):
    return 2 * (pair - 1) + (0 if cell <= 5 else 1)


def by_name(items):
    return {os.path.basename(p): (pid, cam) for p, pid, cam in items}


@pytest.mark.slow
@pytest.mark.parametrize("image_set", ["labeled", "detected"])
def test_new_protocol_counts_pids_camids_and_relabelling(tmp_path, release, image_set):
    ds = load(tmp_path, image_set=image_set, protocol="new")
    split = fx.new_split(image_set)
    order = fx.file_order(image_set)
    assert (len(ds.train), len(ds.query), len(ds.gallery)) == (len(split.train), len(split.query), len(split.gallery))
    # Query/gallery keep the person's number over all pairs (the split file's labels) and the
    # camera of its view: pair p, view v -> 2(p-1) + v-1.
    for items, rows in ((ds.query, split.query), (ds.gallery, split.gallery)):
        expect = {fx.name_of(*order[k]): (fx.global_pid(*order[k][:2]), expected_camid(order[k][0], order[k][2]))
                  for k in rows}
        assert by_name(items) == expect
    assert not set(by_name(ds.query)) & set(by_name(ds.gallery))
    assert {q[1] for q in ds.query} == {g[1] for g in ds.gallery}
    assert len(ds.query) == 2 * fx.NUM_NEW_TEST  # one query per view per test identity
    assert {q[2] % 2 for q in ds.query} == {0, 1}
    # Train: every image of the other identities, labels 0..C-1 in order of the original pids.
    train_pids = sorted({fx.global_pid(*order[k][:2]) for k in split.train})
    assert ds.train_pid_map == {pid: i for i, pid in enumerate(train_pids)}
    assert {lab for _, lab, _ in ds.train} == set(range(len(train_pids)))
    assert not set(train_pids) & {q[1] for q in ds.query}
    assert by_name(ds.train) == {
        fx.name_of(*order[k]): (ds.train_pid_map[fx.global_pid(*order[k][:2])], expected_camid(order[k][0], order[k][2]))
        for k in split.train
    }


def test_crops_hold_the_source_pixels_upright(tmp_path, release):
    ds = load(tmp_path, image_set="labeled")
    paths = {os.path.basename(p): p for p, _, _ in ds.train + ds.query + ds.gallery}
    for pair, person, cell in [(1, 1, 10), (2, 3, 2), (5, 2, 6)]:
        img = cv2.cvtColor(cv2.imread(paths[fx.name_of(pair, person, cell)]), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(img, fx.crop_image("labeled", pair, person, cell))


def test_labeled_and_detected_are_different_image_sets(tmp_path, release):
    lab, det = load(tmp_path, image_set="labeled"), load(tmp_path, image_set="detected")
    n = {s: len(d.train) + len(d.query) + len(d.gallery) for s, d in (("labeled", lab), ("detected", det))}
    assert n == {s: len(fx.file_order(s)) for s in fx.IMAGE_SETS} and n["labeled"] != n["detected"]
    assert os.path.dirname(lab.train[0][0]) != os.path.dirname(det.train[0][0])
    assert sorted(os.listdir(os.path.join(release["dir"], "crops_detected"))) == sorted(
        [fx.name_of(*o) for o in fx.file_order("detected")] + ["index.json"])


@pytest.mark.parametrize("split", [0, 1, 2])
def test_classic_protocol_train_query_gallery(tmp_path, release, split):
    ds = load(tmp_path, image_set="labeled", protocol="classic", classic_split=split)
    test_ids = {fx.global_pid(p, i) for p, i in fx.TESTSETS[split]}
    order = fx.file_order("labeled")
    in_test = [o for o in order if fx.global_pid(*o[:2]) in test_ids]
    # Query: first-view images of the test identities; gallery: their second-view images.
    assert by_name(ds.query) == {fx.name_of(*o): (fx.global_pid(*o[:2]), expected_camid(o[0], o[2]))
                                 for o in in_test if o[2] <= 5}
    assert by_name(ds.gallery) == {fx.name_of(*o): (fx.global_pid(*o[:2]), expected_camid(o[0], o[2]))
                                   for o in in_test if o[2] > 5}
    assert not set(by_name(ds.query)) & set(by_name(ds.gallery))
    assert len(ds.train) == len(order) - len(in_test)
    assert ds.num_train_pids == sum(fx.PAIR_SIZES) - len(test_ids)
    assert set(ds.train_pid_map) == {fx.global_pid(p, i) for p, n in enumerate(fx.PAIR_SIZES, 1)
                                     for i in range(1, n + 1)} - test_ids
    assert {lab for _, lab, _ in ds.train} == set(range(ds.num_train_pids))


def test_classic_split_index_out_of_range(tmp_path, release):
    with pytest.raises(ValueError, match=r"CLASSIC_SPLIT=3 is out of range: .* 3 classic splits, numbered 0\.\.2"):
        load(tmp_path, protocol="classic", classic_split=3)
    with pytest.raises(ValueError, match="CLASSIC_SPLIT must be >= 0"):
        load(tmp_path, protocol="classic", classic_split=-1)


def test_crops_are_written_once_and_reused_without_the_mat(tmp_path, release, monkeypatch):
    first = load(tmp_path, image_set="labeled", protocol="new")
    crops = os.path.join(release["dir"], "crops_labeled")
    stamp = {n: os.stat(os.path.join(crops, n)).st_mtime_ns for n in os.listdir(crops)}
    assert not [n for n in os.listdir(release["dir"]) if n.startswith(".tmp-")]
    shutil.rmtree(os.path.dirname(release["mat"]))  # the .mat is gone
    monkeypatch.setattr(cuhk03_module, "extract_crops", lambda *a: pytest.fail("extracted again"))
    for protocol in ("new", "classic"):
        again = load(tmp_path, image_set="labeled", protocol=protocol)
        assert len(again.train) + len(again.query) + len(again.gallery) == len(fx.file_order("labeled"))
    assert again.query and again.gallery
    second = load(tmp_path, image_set="labeled", protocol="new")
    assert (second.train, second.query, second.gallery) == (first.train, first.query, first.gallery)
    assert {n: os.stat(os.path.join(crops, n)).st_mtime_ns for n in os.listdir(crops)} == stamp
    # The other image set was never written, and it needs the .mat.
    with pytest.raises(DatasetNotFoundError, match=r"cuhk-03\.mat not found .*crops_detected.*put it at .*"
                                                   r"cuhk03_release.cuhk-03\.mat; it is in cuhk03_release\.zip"):
        load(tmp_path, image_set="detected")


def test_mat_found_directly_in_the_dataset_folder(tmp_path):
    fx.make_cuhk03(str(tmp_path), folder="CUHK03", mat_rel="cuhk-03.mat")
    assert len(load(tmp_path, image_set="detected").query) == 2 * fx.NUM_NEW_TEST


def test_missing_mat_names_the_file_where_and_how(tmp_path):
    with pytest.raises(DatasetNotFoundError) as e:
        load(tmp_path)
    msg = str(e.value)
    assert "\n" not in msg
    assert "cuhk-03.mat not found" in msg and os.path.join(str(tmp_path), "cuhk03", "cuhk03_release", "cuhk-03.mat") in msg
    assert "cuhk03_release.zip" in msg and "CUHK_identification" in msg


def test_missing_split_file_names_it_and_is_checked_before_extraction(tmp_path):
    paths = fx.make_cuhk03(str(tmp_path), splits=False)
    with pytest.raises(DatasetNotFoundError) as e:
        load(tmp_path, image_set="labeled", protocol="new")
    msg = str(e.value)
    assert "\n" not in msg
    assert os.path.join(paths["dir"], "cuhk03_new_protocol_config_labeled.mat") in msg
    assert "person-re-ranking" in msg and "PROTOCOL classic" in msg
    assert not os.path.exists(os.path.join(paths["dir"], "crops_labeled"))
    assert len(load(tmp_path, image_set="labeled", protocol="classic").query) > 0


@pytest.mark.parametrize("kw, match", [
    ({"image_set": "both"}, r"DATASETS\.CUHK03\.IMAGE_SET must be one of 'labeled', 'detected', got 'both'"),
    ({"protocol": "767"}, r"DATASETS\.CUHK03\.PROTOCOL must be one of 'new', 'classic', got '767'"),
])
def test_bad_options(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        load(tmp_path, **kw)


def write_mat_into(tmp_path, **kw):
    base = os.path.join(str(tmp_path), "cuhk03")
    fx.write_mat(os.path.join(base, "cuhk-03.mat"), **kw)
    return base


@pytest.mark.parametrize("kw, match", [
    ({"omit": ("detected",)}, r"no cell array 'detected'"),
    ({"omit": ("testsets",)}, r"no cell array 'testsets'"),
    ({"pair_columns": 8}, r"camera pair 1 has shape \[4, 8\], not \[identities x 10\]"),
    ({"testsets": [[(6, 1)]]}, r"test split 1 is not a \[n x 2\] list of \(camera pair, person\)"),
])
def test_mat_in_another_layout_is_refused_and_leaves_nothing(tmp_path, kw, match):
    base = write_mat_into(tmp_path, **kw)
    with pytest.raises(DatasetFormatError, match=match) as e:
        load(tmp_path, image_set="detected", protocol="classic")
    assert "official CUHK03 cuhk-03.mat" in str(e.value) and "\n" not in str(e.value)
    assert sorted(os.listdir(base)) == ["cuhk-03.mat"]  # no crop folder, no temp folder


def test_image_that_is_not_uint8_rgb_names_its_cell_and_leaves_nothing(tmp_path):
    base = write_mat_into(tmp_path, replace={("labeled", 2, 1, 7): np.zeros((3, 4, 9), np.float64)})
    with pytest.raises(DatasetFormatError, match=r"labeled pair 2, person 1, cell 7 is float64 \[9, 4, 3\], not an "
                                                 r"H x W x 3 uint8 image"):
        load(tmp_path, image_set="labeled", protocol="classic")
    assert sorted(os.listdir(base)) == ["cuhk-03.mat"]


def test_an_image_whose_header_claims_huge_dimensions_is_refused_before_reading(tmp_path):
    base = write_mat_into(tmp_path, replace={("labeled", 2, 1, 7): (3, 60_000, 60_000)})
    assert os.path.getsize(os.path.join(base, "cuhk-03.mat")) < 1 << 20  # 10.8 GB declared, nothing stored
    with pytest.raises(DatasetFormatError, match=r"labeled pair 2, person 1, cell 7 declares shape \[3, 60000, "
                                                 r"60000\] \(10,800,000,000 elements"):
        load(tmp_path, image_set="labeled", protocol="classic")
    assert sorted(os.listdir(base)) == ["cuhk-03.mat"]


def test_crop_folder_missing_its_images(tmp_path, release):
    load(tmp_path, image_set="labeled")
    os.remove(os.path.join(release["dir"], "crops_labeled", "1_001_1_01.png"))
    with pytest.raises(DatasetNotFoundError, match=r"crops_labeled' lacks 1_001_1_01\.png .* delete the folder"):
        load(tmp_path, image_set="labeled")


def test_mat_that_is_not_hdf5(tmp_path):
    base = os.path.join(str(tmp_path), "cuhk03")
    os.makedirs(base)
    with open(os.path.join(base, "cuhk-03.mat"), "wb") as f:
        f.write(b"<html>quota exceeded</html>")
    with pytest.raises(DatasetFormatError, match=r"cuhk-03\.mat: cannot be read as HDF5"):
        load(tmp_path, protocol="classic")


def test_crop_folder_not_written_by_the_loader(tmp_path, release):
    os.makedirs(os.path.join(release["dir"], "crops_labeled"))
    with pytest.raises(DatasetNotFoundError, match=r"crops_labeled' exists but has no index\.json.*delete it"):
        load(tmp_path, image_set="labeled")


def rewrite_split(release, image_set="labeled", **kw):
    fx.write_split_file(release[image_set], fx.new_split(image_set), **kw)


def test_split_file_errors(tmp_path, release):
    rewrite_split(release, drop=("gallery_idx",))
    with pytest.raises(DatasetFormatError, match=r"no gallery_idx; a CUHK03 new-protocol split file holds"):
        load(tmp_path, image_set="labeled")
    split = fx.new_split("labeled")
    query_idx = np.asarray(sorted(split.query), np.uint16).reshape(-1, 1) + 1
    rewrite_split(release, query_idx=np.vstack([query_idx, [[len(split.names) + 1]]]).astype(np.uint16))
    with pytest.raises(DatasetFormatError, match=rf"query_idx holds {len(split.names) + 1}, outside the 1-based range"):
        load(tmp_path, image_set="labeled")
    rewrite_split(release, query_idx=np.asarray(sorted(split.gallery)[:1], np.uint16).reshape(-1, 1) + 1)
    with pytest.raises(DatasetFormatError, match="overlap"):
        load(tmp_path, image_set="labeled")
    labels = split.labels.copy()
    labels[split.query[0]] += 1
    rewrite_split(release, labels=labels.astype(np.uint16).reshape(-1, 1))
    with pytest.raises(DatasetFormatError, match=r"label \d+ of '.*\.png' is not that person's number"):
        load(tmp_path, image_set="labeled")
    with open(release["labeled"], "wb") as f:
        f.write(b"not a mat file")
    with pytest.raises(DatasetFormatError, match=r"cannot be read as a MATLAB split file"):
        load(tmp_path, image_set="labeled")


def test_split_file_of_the_other_image_set(tmp_path, release):
    # The detected split lists a crop (3_002_1_03.png) that the labeled set does not have.
    shutil.copy(release["detected"], release["labeled"])
    with pytest.raises(DatasetFormatError, match=r"image '3_002_1_03\.png' is not among the .* crops .*does not "
                                                 r"belong to this image set"):
        load(tmp_path, image_set="labeled")


def test_config_keys_reach_the_dataset(tmp_path, release):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(tmp_path)
    cfg.DATASETS.NAMES = ["cuhk03"]
    cfg.DATASETS.CUHK03.IMAGE_SET = "labeled"
    cfg.DATASETS.CUHK03.PROTOCOL = "classic"
    cfg.DATASETS.CUHK03.CLASSIC_SPLIT = 2
    assert dataset_kwargs(cfg, "cuhk03") == {"image_set": "labeled", "protocol": "classic", "classic_split": 2}
    data = build_train_data(cfg)
    ds = data.datasets[0]
    assert (ds.image_set, ds.protocol, ds.classic_split) == ("labeled", "classic", 2)
    assert data.num_classes == sum(fx.PAIR_SIZES) - len(fx.TESTSETS[2])
