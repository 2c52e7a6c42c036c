"""The synthetic dataset's vehicles (DATASETS.SYNTHETIC.OBJECT vehicle): their own cache folders (the
people's keep theirs), deterministic images, identity cues that survive the camera, refusals."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reid.data.datasets.synthetic import SyntheticParams
from reid.data.datasets.synthetic_render import STYLES, VIEWS, sample_cameras
from reid.data.datasets.synthetic_vehicle import BODY_TYPES, draw_vehicle, render_vehicle, sample_vehicle
from reid.data.image_io import read_image

from .vehicle_files import synthetic_vehicles


def test_people_keep_their_folders_and_vehicles_get_their_own():
    # The keys the people's folders had before vehicles existed (the demo's dataset is cached under them).
    assert SyntheticParams(3, 3, 3, 2, 2, 0, (64, 32)).key() == "s0_ids3+3_cam3_k2_d2_64x32_v4_6d27ac2a"
    assert SyntheticParams(100, 100, 6, 5, 100, 0, (128, 64)).key() == "s0_ids100+100_cam6_k5_d100_128x64_v4_42845c4b"
    assert SyntheticParams(3, 3, 3, 2, 2, 0, (64, 32), "views").key() == "s0_views_ids3+3_cam3_k2_d2_64x32_v4_1fb35d0b"
    vehicle = SyntheticParams(3, 3, 3, 2, 2, 0, (64, 64), "demo", "vehicle")
    assert vehicle.key() == "s0_vehicle_ids3+3_cam3_k2_d2_64x64_v4_be871a4a"
    assert SyntheticParams(3, 3, 3, 2, 2, 0, (64, 64), "shift", "vehicle").key().startswith("s0_shift_vehicle_")
    assert "object_type" not in SyntheticParams().as_dict()  # people's meta.json is what it was


def test_vehicle_dataset_layout_meta_and_determinism(tmp_path):
    ds = synthetic_vehicles(tmp_path / "a")
    again = synthetic_vehicles(tmp_path / "b")
    assert os.path.basename(ds.dataset_dir).startswith("s0_vehicle_ids4+3_cam3_k2_d0_32x32_")
    meta = json.load(open(os.path.join(ds.dataset_dir, "meta.json")))
    assert meta["params"]["object_type"] == ["vehicle", 1]
    assert (len(ds.train), len(ds.query)) == (len(again.train), len(again.query)) and len(ds.gallery) == len(ds.query)
    first, second = read_image(ds.train[0][0]), read_image(again.train[0][0])
    assert first.shape == (32, 32, 3) and np.array_equal(first, second)
    people = synthetic_vehicles(tmp_path / "a", object_type="person", image_size=(32, 32))
    assert people.dataset_dir != ds.dataset_dir
    assert not np.array_equal(read_image(people.train[0][0]), first)


def test_a_vehicle_keeps_its_colour_and_shape_across_cameras_and_views():
    cams = sample_cameras(0, 6)
    for seed in range(6):
        v = sample_vehicle(np.random.default_rng([0, 1, seed]))
        assert v.body_type in BODY_TYPES and 0.8 < v.length < 1.0
        for view in VIEWS:
            layer = draw_vehicle(v, view, np.random.default_rng(seed), 128, 128, 0.9, 64, 100)
            covered = layer.mask > 200
            # Most of what is drawn is the body's colour (or its roof's): the identity's cue.
            body = np.abs(layer.rgb[covered].astype(int) - np.array(v.body)).sum(axis=1) < 60
            roof = np.abs(layer.rgb[covered].astype(int) - np.array(v.roof)).sum(axis=1) < 60
            assert covered.mean() > 0.08 and (body | roof).mean() > 0.3, (seed, view)
        img = render_vehicle(v, cams[seed], np.random.default_rng(seed), (64, 48))
        assert img.shape == (64, 48, 3) and img.dtype == np.uint8
        assert np.array_equal(img, render_vehicle(v, cams[seed], np.random.default_rng(seed), (64, 48)))
    with pytest.raises(ValueError, match="view 'top' is not one of front, back, side"):
        draw_vehicle(v, "top", np.random.default_rng(0), 64, 64, 0.9, 32, 50)


def test_styles_apply_to_vehicles_and_unknown_objects_are_refused(tmp_path):
    pairs = [[sample_vehicle(np.random.default_rng(seed), STYLES[k]) for k in ("demo", "shift")] for seed in range(10)]
    # The same draws, another domain's colours (white, black and grey bodies stay as they are).
    assert all(demo.body_type == shift.body_type for demo, shift in pairs)
    assert sum(demo.body != shift.body for demo, shift in pairs) >= 5
    with pytest.raises(ValueError, match=r"unknown object 'truck' \(DATASETS.SYNTHETIC.OBJECT\); valid: person, vehicle"):
        synthetic_vehicles(tmp_path, object_type="truck")
