"""UDA.CAMERA_AWARE / UDA.CAMERA_NEIGHBOURS: true, false or auto, decided on the data (reid.uda.build.camera_options),
and the shipped real-data configs that use auto."""
import logging
import os
from types import SimpleNamespace

import numpy as np
import pytest

from reid.config import load_config
from reid.config.config import ConfigError
from reid.uda.build import camera_options

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REAL_DATA_CONFIGS = ("market1501_unsupervised.yml", "market1501_to_msmt17.yml", "own_crops.yml")


def _data(cameras, has_cameras=True, datasets=1):
    items = [(f"img{i}.jpg", -1, int(c)) for i, c in enumerate(cameras)]
    sets = [SimpleNamespace(name="unlabelled", has_cameras=has_cameras)] * datasets
    return SimpleNamespace(items=items, datasets=sets)


@pytest.mark.parametrize("name", REAL_DATA_CONFIGS)
def test_real_data_configs_are_camera_aware_where_ids_exist(name, caplog):
    cfg = load_config(os.path.join(ROOT, "configs", "UDA", name), [])
    assert cfg.UDA.CAMERA_AWARE == "auto" and cfg.UDA.CAMERA_NEIGHBOURS == "auto"
    with caplog.at_level(logging.WARNING, logger="reid.uda.build"):
        on = camera_options(_data(np.arange(60) % 3), cfg)
    assert on.aware and on.neighbours and on.cameras.tolist() == (np.arange(60) % 3).tolist()
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="reid.uda.build"):
        off = camera_options(_data(np.zeros(60), has_cameras=False), cfg)
    assert not off.aware and not off.neighbours and off.cameras is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert lines[0].startswith("UDA.CAMERA_AWARE auto: off, because dataset 'unlabelled' has no camera ids")
    assert "DATASETS.UNLABELLED.CAMERA_REGEX" in lines[0] and "falls back to camera-agnostic memory" in lines[0]
    assert lines[1].startswith("UDA.CAMERA_NEIGHBOURS auto: off") and "camera-agnostic neighbours" in lines[1]


@pytest.mark.parametrize("overrides, data, aware, neighbours, why", [
    # one camera only: nothing to balance
    ([], _data(np.zeros(40)), False, False, "all 40 training images come from one camera"),
    # label smoothing: camera proxies have none, so auto leaves them off (neighbours stay on)
    (["MODEL.LOSSES.ID.LABEL_SMOOTH", "0.1"], _data(np.arange(40) % 2), False, True, "LABEL_SMOOTH is 0.1"),
    (["MODEL.LOSSES.NAMES", "[identity, triplet]"], _data(np.arange(40) % 2), False, True, "MODEL.LOSSES.NAMES has"),
    # approximate neighbours have no camera-balanced form
    (["UDA.NEIGHBOURS", "ivf"], _data(np.arange(40) % 2), True, False, "UDA.NEIGHBOURS is ivf"),
    # past UDA.APPROX_MIN_SIZE the approximate pass takes over: auto does not force the exact one
    (["UDA.APPROX_MIN_SIZE", "40"], _data(np.arange(40) % 2), True, False, "reach UDA.APPROX_MIN_SIZE 40"),
    (["DATASETS.NAMES", "[market1501, msmt17]"], _data(np.arange(40) % 2, datasets=2), False, False,
     "2 training datasets"),
])
def test_auto_says_why_it_is_off(overrides, data, aware, neighbours, why, caplog):
    cfg = load_config(None, ["UDA.CAMERA_AWARE", "auto", "UDA.CAMERA_NEIGHBOURS", "auto"] + overrides)
    with caplog.at_level(logging.WARNING, logger="reid.uda.build"):
        got = camera_options(data, cfg)
    assert (got.aware, got.neighbours) == (aware, neighbours)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == (not aware) + (not neighbours) and all(why in line for line in lines), lines


def test_true_refuses_what_auto_falls_back_from_and_false_stays_off():
    data = _data(np.zeros(40), has_cameras=False)
    with pytest.raises(ValueError, match="UDA.CAMERA_AWARE needs the camera of every training image .* or set "
                                         "UDA.CAMERA_AWARE auto"):
        camera_options(data, load_config(None, ["UDA.CAMERA_AWARE", "true"]))
    off = camera_options(_data(np.arange(40) % 2), load_config(None, []))
    assert (off.aware, off.neighbours) == (False, False) and off.cameras is not None  # ids kept for the health figures


def test_config_takes_true_false_or_auto():
    assert load_config(None, ["UDA.CAMERA_AWARE", "True"]).UDA.CAMERA_AWARE is True
    assert load_config(None, ["UDA.CAMERA_NEIGHBOURS", "false"]).UDA.CAMERA_NEIGHBOURS is False
    assert load_config(None, ["UDA.CAMERA_AWARE", "Auto"]).UDA.CAMERA_AWARE == "auto"
    with pytest.raises(ConfigError, match="UDA.CAMERA_AWARE expects true, false or 'auto', got 'sometimes'"):
        load_config(None, ["UDA.CAMERA_AWARE", "sometimes"])
    with pytest.raises(ConfigError, match="UDA.CAMERA_NEIGHBOURS expects true, false or 'auto'"):
        load_config(None, ["UDA.CAMERA_NEIGHBOURS", "2"])


def test_clustering_extracts_in_cpu_sized_batches():
    import torch

    from reid.uda.build import CPU_EXTRACT_BATCH, _with_test_batch, extraction_batch

    assert extraction_batch(256, torch.device("cpu")) == CPU_EXTRACT_BATCH == 32
    assert extraction_batch(16, torch.device("cpu")) == 16
    assert extraction_batch(256, torch.device("cuda", 0)) == 256  # a GPU keeps TEST.IMS_PER_BATCH
    cfg = load_config(None, ["TEST.IMS_PER_BATCH", "256"])
    assert _with_test_batch(cfg, 32).TEST.IMS_PER_BATCH == 32 and cfg.TEST.IMS_PER_BATCH == 256
    assert _with_test_batch(cfg, 256) is cfg
