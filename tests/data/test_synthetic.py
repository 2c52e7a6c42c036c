"""The synthetic dataset: layout, counts, determinism, caching and atomic generation."""
from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np
import pytest

from reid.data import build_dataset
from reid.data.datasets import synthetic
from reid.data.datasets.synthetic import SUBDIRS, SyntheticParams, plan_images
from reid.data.image_io import read_image

TINY = dict(num_train_ids=3, num_test_ids=3, num_cameras=3, images_per_camera=2, num_distractors=2,
            image_size=(64, 32), verbose=False)


def build(root, **kw):
    return build_dataset("synthetic", str(root), **{**TINY, **kw})


def pixels(ds):
    return [read_image(p) for p, _, _ in ds.train + ds.query + ds.gallery]


def test_layout_counts_and_names(tmp_path):
    ds = build(tmp_path, seed=3)
    assert os.path.dirname(ds.dataset_dir) == str(tmp_path / "synthetic")
    assert sorted(os.listdir(ds.dataset_dir)) == sorted(list(SUBDIRS) + ["meta.json"])
    meta = json.load(open(os.path.join(ds.dataset_dir, "meta.json")))
    assert meta["params"]["seed"] == 3 and meta["params"]["num_cameras"] == 3
    # Expected counts from the plan: every identity in >= 2 cameras, 2 images per camera.
    cams = defaultdict(set)
    for job in plan_images(ds.params):
        cams[job.pid].add(job.cam)
    assert all(len(c) >= 2 for pid, c in cams.items() if pid > 0)
    n_train = sum(len(cams[p]) * 2 for p in (1, 2, 3))
    n_query = sum(len(cams[p]) for p in (4, 5, 6))
    assert (len(ds.train), len(ds.query), len(ds.gallery)) == (n_train, n_query, n_query + 2)
    assert meta["counts"] == {"bounding_box_train": n_train, "query": n_query, "bounding_box_test": n_query + 2}
    assert ds.num_train_pids == 3 and sorted({p for _, p, _ in ds.train}) == [0, 1, 2]
    assert {p for _, p, _ in ds.query} == {4, 5, 6}
    assert sorted(p for _, p, _ in ds.gallery if p == 0) == [0, 0]  # distractors
    for path, _, _ in ds.train + ds.query + ds.gallery:
        name = os.path.basename(path)
        assert name.endswith(".jpg") and name[4:6] == "_c" and "s1_" in name
    img = read_image(ds.train[0][0])
    assert img.shape == (64, 32, 3) and img.dtype == np.uint8


def test_every_query_has_a_cross_camera_match(tmp_path):
    ds = build(tmp_path)
    gallery = {(pid, cam) for _, pid, cam in ds.gallery}
    for _, pid, cam in ds.query:
        assert any(p == pid and c != cam for p, c in gallery)
    # one query per (identity, camera) appearance
    assert len({(pid, cam) for _, pid, cam in ds.query}) == len(ds.query)


def test_deterministic_by_seed(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b")
    assert [os.path.basename(p) for p, _, _ in a.train + a.query + a.gallery] == \
        [os.path.basename(p) for p, _, _ in b.train + b.query + b.gallery]
    assert all(np.array_equal(x, y) for x, y in zip(pixels(a), pixels(b)))
    c = build(tmp_path / "a", seed=1)
    assert c.dataset_dir != a.dataset_dir
    first_a, first_c = read_image(a.train[0][0]), read_image(c.train[0][0])
    assert first_a.shape == first_c.shape and not np.array_equal(first_a, first_c)


def test_cached_second_call_does_not_regenerate(tmp_path, monkeypatch):
    ds = build(tmp_path)
    stamp = os.stat(os.path.join(ds.dataset_dir, "meta.json")).st_mtime_ns

    def boom(*a, **k):
        raise AssertionError("generate() called although the dataset is cached")

    monkeypatch.setattr(synthetic, "generate", boom)
    again = build(tmp_path)
    assert again.dataset_dir == ds.dataset_dir and len(again.train) == len(ds.train)
    assert os.stat(os.path.join(ds.dataset_dir, "meta.json")).st_mtime_ns == stamp


def test_interrupted_generation_leaves_nothing(tmp_path, monkeypatch):
    calls = {"n": 0}
    real = synthetic.render_image

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] > 5:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(synthetic, "render_image", flaky)
    with pytest.raises(KeyboardInterrupt):
        build(tmp_path)
    assert os.listdir(tmp_path / "synthetic") == []  # no final folder, no temp folder
    monkeypatch.setattr(synthetic, "render_image", real)
    assert len(build(tmp_path).train) > 0


def test_key_depends_on_every_parameter():
    base = SyntheticParams(3, 3, 3, 2, 2, 0, (64, 32))
    variants = [SyntheticParams(4, 3, 3, 2, 2, 0, (64, 32)), SyntheticParams(3, 4, 3, 2, 2, 0, (64, 32)),
                SyntheticParams(3, 3, 4, 2, 2, 0, (64, 32)), SyntheticParams(3, 3, 3, 3, 2, 0, (64, 32)),
                SyntheticParams(3, 3, 3, 2, 3, 0, (64, 32)), SyntheticParams(3, 3, 3, 2, 2, 1, (64, 32)),
                SyntheticParams(3, 3, 3, 2, 2, 0, (64, 48))]
    variants.append(SyntheticParams(3, 3, 3, 2, 2, 0, (64, 32), "shift"))
    keys = {base.key()} | {v.key() for v in variants}
    assert len(keys) == 9
    assert "_shift_" in variants[-1].key() and "demo" not in base.key()  # the demo's folders keep their names
    # styles added later do not rename the folders of the styles before them
    assert variants[-1].key() == "s0_shift_ids3+3_cam3_k2_d2_64x32_v4_24579f15"
    assert SyntheticParams(3, 3, 3, 2, 2, 0, (64, 32), "views").key() not in keys


def test_shift_style_renders_another_domain(tmp_path):
    """The second domain: darker, paler images; an unknown style is refused by name."""
    import cv2
    import numpy as np

    import colorsys

    from reid.data.datasets.synthetic_render import STYLES, sample_identity

    def brightness(ds):
        return np.mean([cv2.cvtColor(cv2.imread(p), cv2.COLOR_BGR2HSV)[..., 2].mean() for p, _, _ in ds.train])

    assert brightness(build(tmp_path, seed=1, style="shift")) < 0.85 * brightness(build(tmp_path, seed=1))
    # Same draws, other garment colours: a saturated hue turns by 1/24 of the circle, 0.8 x as saturated.
    turned = 0
    for seed in range(40):
        demo, shift = (colorsys.rgb_to_hsv(*[c / 255 for c in sample_identity(np.random.default_rng(seed), STYLES[k]).upper])
                       for k in ("demo", "shift"))
        if demo[1] > 0.3:
            assert (shift[0] - demo[0]) % 1.0 == pytest.approx(1 / 24, abs=0.01)
            assert shift[1] == pytest.approx(0.8 * demo[1], abs=0.01)
            turned += 1
    assert turned > 20
    with pytest.raises(ValueError, match="unknown style 'night'.*valid: demo, shift, views"):
        build(tmp_path, style="night")


def test_views_style_gives_each_camera_one_side_and_open_jackets_only_from_the_front():
    """The camera-view domain (issue: plain clustering groups by camera): camera c sees only
    VIEWS[c % 3]; the open jacket shows the shirt colour from the front and nothing from the back."""
    from dataclasses import replace

    from reid.data.datasets.synthetic_render import STYLES, VIEWS, render_image, sample_cameras, sample_identity

    cams = sample_cameras(1, 5, STYLES["views"])
    assert [c.view_p for c in cams] == [tuple(float(v == i % 3) for v in range(3)) for i in range(5)]
    assert all(max(c.view_p) == 0.7 for c in sample_cameras(1, 5, STYLES["shift"]))  # other styles: as before
    ident = sample_identity(np.random.default_rng(5), STYLES["views"])
    ident = replace(ident, pattern="solid", upper=(200, 30, 30), upper2=(30, 200, 30), backpack=None, bag=None, scarf=None)
    clean = replace(cams[0], blur=0.0, noise=0.0, occluder_p=0.0)
    for view, shows_shirt in (("front", True), ("back", False)):
        cam = replace(clean, view_p=tuple(float(v == view) for v in VIEWS))
        plain, jacket = (render_image(ident, cam, np.random.default_rng(3), (128, 64), open_jacket=j).astype(int)
                         for j in (False, True))
        changed = np.abs(plain - jacket).sum(axis=2) > 30
        assert changed.any() == shows_shirt
        if shows_shirt:  # the changed pixels are green (the shirt), not red (the jacket)
            assert (jacket[changed][:, 1] > jacket[changed][:, 0]).mean() > 0.8


def test_folder_without_metadata_is_not_trusted(tmp_path):
    p = SyntheticParams(3, 3, 3, 2, 2, 0, (64, 32))
    os.makedirs(tmp_path / "synthetic" / p.key())
    with pytest.raises(FileNotFoundError, match="Delete the folder"):
        build(tmp_path, seed=0)


@pytest.mark.parametrize("bad", [dict(num_cameras=1), dict(images_per_camera=1), dict(num_train_ids=0)])
def test_invalid_parameters(tmp_path, bad):
    with pytest.raises(ValueError, match="DATASETS.SYNTHETIC"):
        build(tmp_path, **bad)
