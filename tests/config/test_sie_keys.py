"""CLIP's stride and SIE keys live under MODEL.CLIP; configs and checkpoints of the previous layout
(MODEL.TRANSREID keys for a CLIP model) load alike, with one line saying which keys to rename."""
from __future__ import annotations

import logging

import pytest

from reid.config import ConfigError, get_cfg, load_config, load_config_from_text
from reid.config.sie_keys import sie_node


def _old_layout(tmp_path, backbone="clip_vit_b16", extra=""):
    path = tmp_path / "old.yml"
    path.write_text(f"MODEL:\n  BACKBONE:\n    NAME: {backbone}\n  TRANSREID:\n    STRIDE_SIZE: [12, 12]\n"
                    f"    SIE_CAMERA: true\n    NUM_CAMERAS: 6\n{extra}")
    return str(path)


def test_an_old_clip_config_reads_its_transreid_keys_as_clip_keys_with_one_line(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="reid.config.sie_keys"):
        cfg = load_config(_old_layout(tmp_path))
    assert list(cfg.MODEL.CLIP.STRIDE_SIZE) == [12, 12] and cfg.MODEL.CLIP.SIE_CAMERA and cfg.MODEL.CLIP.NUM_CAMERAS == 6
    assert list(cfg.MODEL.TRANSREID.STRIDE_SIZE) == [16, 16] and not cfg.MODEL.TRANSREID.SIE_CAMERA
    assert cfg.MODEL.CLIP.SIE_COEF == get_cfg().MODEL.TRANSREID.SIE_COEF  # unset: the same default as before
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "old.yml" in lines[0] and "MODEL.TRANSREID.STRIDE_SIZE, MODEL.TRANSREID.SIE_CAMERA, " \
        "MODEL.TRANSREID.NUM_CAMERAS" in lines[0] and "MODEL.CLIP.STRIDE_SIZE" in lines[0] and "rename" in lines[0]
    assert sie_node(cfg)[1] == "MODEL.CLIP"


def test_a_transreid_config_keeps_its_keys_and_says_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="reid.config.sie_keys"):
        cfg = load_config(_old_layout(tmp_path, backbone="vit_base_patch16_224_transreid"))
    assert list(cfg.MODEL.TRANSREID.STRIDE_SIZE) == [12, 12] and cfg.MODEL.TRANSREID.NUM_CAMERAS == 6
    assert list(cfg.MODEL.CLIP.STRIDE_SIZE) == [16, 16] and caplog.records == []
    assert sie_node(cfg)[1] == "MODEL.TRANSREID"


def test_both_keys_set_to_different_values_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_old_layout(tmp_path, extra="  CLIP:\n    STRIDE_SIZE: [14, 14]\n"))
    assert "MODEL.TRANSREID.STRIDE_SIZE [12, 12] and MODEL.CLIP.STRIDE_SIZE [14, 14]" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_checkpoints_stored_config_of_the_old_layout_loads_the_same_model(caplog):
    old = get_cfg()
    old.MODEL.BACKBONE.NAME = "clip_vit_b16"
    old.MODEL.TRANSREID.STRIDE_SIZE = [12, 12]
    old.MODEL.TRANSREID.SIE_CAMERA = True
    old.MODEL.TRANSREID.NUM_CAMERAS = 15
    old.MODEL.TRANSREID.SIE_COEF = 1.0
    text = old.dump()
    with caplog.at_level(logging.WARNING, logger="reid.config.sie_keys"):
        cfg = load_config_from_text(text, "checkpoint model_final.pth")
    assert (list(cfg.MODEL.CLIP.STRIDE_SIZE), cfg.MODEL.CLIP.NUM_CAMERAS, cfg.MODEL.CLIP.SIE_COEF) == ([12, 12], 15, 1.0)
    assert len(caplog.records) == 1 and "checkpoint model_final.pth" in caplog.records[0].getMessage()
    # what a resumed run compares: the stored config and a new-layout one agree after loading
    new = load_config(None, ["MODEL.BACKBONE.NAME", "clip_vit_b16", "MODEL.CLIP.STRIDE_SIZE", [12, 12],
                             "MODEL.CLIP.SIE_CAMERA", True, "MODEL.CLIP.NUM_CAMERAS", 15, "MODEL.CLIP.SIE_COEF", 1.0])
    from reid.config.differences import changed_keys

    assert changed_keys(cfg, new) == []
