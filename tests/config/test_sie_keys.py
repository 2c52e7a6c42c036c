"""CLIP's stride and SIE keys live under MODEL.CLIP; configs and checkpoints of the previous layout
(MODEL.TRANSREID keys for a CLIP model) load alike, with one line saying which keys to rename."""
from __future__ import annotations

import logging

import pytest

from reid.config import ConfigError, get_cfg, load_config, load_config_from_text
from reid.config.sie_keys import SIE_KEYS, either_key, sie_node, sie_prefix

LOGGER = "reid.config.sie_keys"


def _write(tmp_path, text, name="old.yml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _old_layout(tmp_path, backbone="clip_vit_b16", extra=""):
    return _write(tmp_path, f"MODEL:\n  BACKBONE:\n    NAME: {backbone}\n  TRANSREID:\n    STRIDE_SIZE: [12, 12]\n"
                            f"    SIE_CAMERA: true\n    NUM_CAMERAS: 6\n{extra}")


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_both_nodes_have_the_same_defaults_so_old_runs_build_the_same_model():
    cfg = get_cfg()
    for key in SIE_KEYS:
        assert cfg.MODEL.CLIP[key] == cfg.MODEL.TRANSREID[key]
    assert (list(cfg.MODEL.CLIP.STRIDE_SIZE), cfg.MODEL.CLIP.SIE_CAMERA, cfg.MODEL.CLIP.SIE_COEF,
            cfg.MODEL.CLIP.NUM_CAMERAS) == ([16, 16], False, 3.0, 0)
    assert "JPM_PARTS" in cfg.MODEL.TRANSREID and "JPM_PARTS" not in cfg.MODEL.CLIP  # TransReID's own


def test_which_node_holds_a_models_keys():
    assert sie_prefix("clip_vit_b16") == sie_prefix("clip_rn50") == "MODEL.CLIP"
    assert sie_prefix("vit_base_transreid") == sie_prefix("resnet50") == "MODEL.TRANSREID"
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "clip_vit_b16"
    node, key = sie_node(cfg)
    assert node is cfg.MODEL.CLIP and key == "MODEL.CLIP"
    cfg.MODEL.BACKBONE.NAME = "vit_small_transreid"
    node, key = sie_node(cfg)
    assert node is cfg.MODEL.TRANSREID and key == "MODEL.TRANSREID"
    assert either_key("SIE_CAMERA", "False") == \
        "MODEL.TRANSREID.SIE_CAMERA False (MODEL.CLIP.SIE_CAMERA False for a clip_* backbone)"


def test_an_old_config_files_stride_moves_to_model_clip_with_one_line_naming_the_rename(tmp_path, caplog):
    path = _write(tmp_path, "MODEL:\n  BACKBONE:\n    NAME: clip_vit_b16\n  TRANSREID:\n    STRIDE_SIZE: [12, 12]\n")
    with caplog.at_level(logging.INFO):
        cfg = load_config(path)
    assert list(cfg.MODEL.CLIP.STRIDE_SIZE) == [12, 12]
    assert list(cfg.MODEL.TRANSREID.STRIDE_SIZE) == [16, 16]  # back to its default: one place holds the value
    assert cfg.is_frozen()
    lines = _lines(caplog)
    assert len(lines) == 1 and "\n" not in lines[0], lines
    assert lines[0].startswith(f"config file {path}: MODEL.TRANSREID keys of earlier versions read as "
                               "clip_vit_b16's MODEL.CLIP keys; ")
    assert "rename MODEL.TRANSREID.STRIDE_SIZE to MODEL.CLIP.STRIDE_SIZE" in lines[0]
    assert "SIE_CAMERA" not in lines[0] and "NUM_CAMERAS" not in lines[0]  # only the keys moved
    assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.WARNING]


def test_an_old_config_moves_every_key_it_sets_in_one_line(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cfg = load_config(_old_layout(tmp_path, extra="    SIE_COEF: 1.0\n"))
    assert (list(cfg.MODEL.CLIP.STRIDE_SIZE), cfg.MODEL.CLIP.SIE_CAMERA, cfg.MODEL.CLIP.SIE_COEF,
            cfg.MODEL.CLIP.NUM_CAMERAS) == ([12, 12], True, 1.0, 6)
    assert (list(cfg.MODEL.TRANSREID.STRIDE_SIZE), cfg.MODEL.TRANSREID.SIE_CAMERA, cfg.MODEL.TRANSREID.SIE_COEF,
            cfg.MODEL.TRANSREID.NUM_CAMERAS) == ([16, 16], False, 3.0, 0)
    lines = _lines(caplog)
    assert len(lines) == 1
    renames = ", ".join(f"MODEL.TRANSREID.{key} to MODEL.CLIP.{key}" for key in SIE_KEYS)
    assert f"; rename {renames} (MODEL.TRANSREID is TransReID's ViT's)." in lines[0]
    assert sie_node(cfg)[1] == "MODEL.CLIP"
    from reid.config.defaults import _C

    assert cfg.MODEL.TRANSREID.STRIDE_SIZE is not _C.MODEL.TRANSREID.STRIDE_SIZE  # the defaults stay untouched


def test_an_old_key_on_the_command_line_is_named_as_the_command_lines(tmp_path, caplog):
    path = _write(tmp_path, "MODEL:\n  BACKBONE:\n    NAME: clip_vit_b16\n  TRANSREID:\n    SIE_CAMERA: true\n",
                  "mixed.yml")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cfg = load_config(path, ["MODEL.TRANSREID.NUM_CAMERAS", 4])
    assert cfg.MODEL.CLIP.SIE_CAMERA and cfg.MODEL.CLIP.NUM_CAMERAS == 4
    lines = _lines(caplog)
    assert len(lines) == 1 and lines[0].startswith(f"config file {path} and command line: "), lines
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        caplog.clear()
        load_config(None, ["MODEL.BACKBONE.NAME", "clip_rn50", "MODEL.TRANSREID.STRIDE_SIZE", [14, 14]])
    lines = _lines(caplog)
    assert len(lines) == 1, lines
    assert lines[0].startswith("command line: MODEL.TRANSREID keys of earlier versions read as clip_rn50's")
    assert "rename MODEL.TRANSREID.STRIDE_SIZE to MODEL.CLIP.STRIDE_SIZE" in lines[0]


def test_an_old_key_named_on_the_command_line_counts_even_at_its_default_value(caplog):
    from tests.cli.test_cli import ROOT

    baseline = f"{ROOT}/configs/Market1501/clip_vit_b16_baseline.yml"
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cfg = load_config(baseline, ["MODEL.TRANSREID.SIE_CAMERA", False])
    assert not cfg.MODEL.CLIP.SIE_CAMERA
    lines = _lines(caplog)
    assert len(lines) == 1 and "rename MODEL.TRANSREID.SIE_CAMERA to MODEL.CLIP.SIE_CAMERA" in lines[0], lines
    # An old script turning SIE off over a config with SIE: refused, not ignored (SIE would stay on).
    with pytest.raises(ConfigError, match=r"command line and config file .*clip_vit_b16_sie_olp.yml: "
                                          r"MODEL.TRANSREID.SIE_CAMERA False and MODEL.CLIP.SIE_CAMERA True"):
        load_config(f"{ROOT}/configs/Market1501/clip_vit_b16_sie_olp.yml", ["MODEL.TRANSREID.SIE_CAMERA", False])


def test_a_transreid_config_keeps_its_keys_and_says_nothing(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cfg = load_config(_old_layout(tmp_path, backbone="vit_base_transreid"))
    assert list(cfg.MODEL.TRANSREID.STRIDE_SIZE) == [12, 12] and cfg.MODEL.TRANSREID.SIE_CAMERA
    assert cfg.MODEL.TRANSREID.NUM_CAMERAS == 6
    assert list(cfg.MODEL.CLIP.STRIDE_SIZE) == [16, 16] and not cfg.MODEL.CLIP.SIE_CAMERA
    assert _lines(caplog) == []
    assert sie_node(cfg)[1] == "MODEL.TRANSREID"


def test_the_shipped_transreid_and_clip_configs_use_their_own_nodes(caplog):
    from tests.cli.test_cli import ROOT

    with caplog.at_level(logging.WARNING, logger=LOGGER):
        transreid = load_config(f"{ROOT}/configs/Market1501/vit_base_transreid.yml")
        clip = load_config(f"{ROOT}/configs/Market1501/clip_vit_b16_sie_olp.yml")
        two_stage = load_config(f"{ROOT}/configs/MSMT17/clip_vit_b16_clipreid_sie_olp.yml")
    assert _lines(caplog) == []  # nothing of the previous layout left in the shipped configs
    assert list(transreid.MODEL.TRANSREID.STRIDE_SIZE) == [12, 12] and transreid.MODEL.TRANSREID.SIE_CAMERA
    assert (list(clip.MODEL.CLIP.STRIDE_SIZE), clip.MODEL.CLIP.SIE_CAMERA, clip.MODEL.CLIP.SIE_COEF,
            clip.MODEL.CLIP.NUM_CAMERAS) == ([12, 12], True, 1.0, 6)
    assert two_stage.MODEL.CLIP.NUM_CAMERAS == 15 and two_stage.MODEL.CLIP.SIE_COEF == 1.0
    assert not clip.MODEL.TRANSREID.SIE_CAMERA and list(clip.MODEL.TRANSREID.STRIDE_SIZE) == [16, 16]


def test_both_keys_set_to_different_values_is_one_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_old_layout(tmp_path, extra="  CLIP:\n    STRIDE_SIZE: [14, 14]\n"))
    message = str(e.value)
    assert "MODEL.TRANSREID.STRIDE_SIZE [12, 12] and MODEL.CLIP.STRIDE_SIZE [14, 14]" in message
    assert message.startswith("config file ") and "old.yml" in message and "keep MODEL.CLIP.STRIDE_SIZE only" in message
    assert "\n" not in message
    with pytest.raises(ConfigError, match=r"old.yml and command line: MODEL.TRANSREID.NUM_CAMERAS 6 and "
                                          r"MODEL.CLIP.NUM_CAMERAS 15 set the same setting of clip_vit_b16 "
                                          r"to different values"):
        load_config(_old_layout(tmp_path), ["MODEL.CLIP.NUM_CAMERAS", 15])


def test_both_keys_set_to_the_same_value_load_with_the_note(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cfg = load_config(_old_layout(tmp_path, extra="  CLIP:\n    STRIDE_SIZE: [12, 12]\n"))
    assert list(cfg.MODEL.CLIP.STRIDE_SIZE) == [12, 12] and list(cfg.MODEL.TRANSREID.STRIDE_SIZE) == [16, 16]
    assert len(_lines(caplog)) == 1


def _old_checkpoint_text():
    """The config a checkpoint of the previous layout stored: TRANSREID keys for a CLIP model."""
    old = get_cfg()
    old.MODEL.BACKBONE.NAME = "clip_vit_b16"
    old.MODEL.TRANSREID.STRIDE_SIZE = [12, 12]
    old.MODEL.TRANSREID.SIE_CAMERA = True
    old.MODEL.TRANSREID.NUM_CAMERAS = 15
    old.MODEL.TRANSREID.SIE_COEF = 1.0
    del old.MODEL["CLIP"]  # the previous layout had no such node
    return old.dump()


NEW_LAYOUT = ["MODEL.BACKBONE.NAME", "clip_vit_b16", "MODEL.CLIP.STRIDE_SIZE", [12, 12], "MODEL.CLIP.SIE_CAMERA", True,
              "MODEL.CLIP.NUM_CAMERAS", 15, "MODEL.CLIP.SIE_COEF", 1.0]


def test_a_checkpoints_stored_config_of_the_old_layout_loads_the_same_model(caplog):
    text = _old_checkpoint_text()
    assert "CLIP:" not in text and "STRIDE_SIZE:\n    - 12" in text
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        cfg = load_config_from_text(text, "checkpoint model_final.pth")
    assert (list(cfg.MODEL.CLIP.STRIDE_SIZE), cfg.MODEL.CLIP.SIE_CAMERA, cfg.MODEL.CLIP.NUM_CAMERAS,
            cfg.MODEL.CLIP.SIE_COEF) == ([12, 12], True, 15, 1.0)
    assert list(cfg.MODEL.TRANSREID.STRIDE_SIZE) == [16, 16] and not cfg.MODEL.TRANSREID.SIE_CAMERA
    lines = _lines(caplog)
    assert len(lines) == 1 and lines[0].startswith("checkpoint model_final.pth: MODEL.TRANSREID keys"), lines
    assert "rename MODEL.TRANSREID.STRIDE_SIZE to MODEL.CLIP.STRIDE_SIZE" in lines[0]
    # what a resumed run compares: the stored config and a new-layout one agree after loading
    from reid.config.differences import changed_keys

    assert changed_keys(cfg, load_config(None, NEW_LAYOUT)) == []


def test_an_old_checkpoint_resumed_with_a_new_layout_config_is_not_refused_for_the_rename(caplog):
    from reid.engine.checkpoint_files import CheckpointError
    from reid.engine.checkpointer import Checkpointer

    def check(cfg):
        # The comparison resume() makes before touching any state (the rest needs a training loop).
        Checkpointer(None, None, cfg, None)._check_config({"cfg": _old_checkpoint_text()}, "model_0002.pth", False)

    with caplog.at_level(logging.WARNING):
        check(load_config(None, NEW_LAYOUT))
    assert not any("Cannot compare" in r.getMessage() for r in caplog.records)  # compared, not skipped
    # A real change is still refused, naming the new key.
    with pytest.raises(CheckpointError, match=r"MODEL.CLIP.NUM_CAMERAS \(checkpoint 15, now 6\)"):
        check(load_config(None, NEW_LAYOUT + ["MODEL.CLIP.NUM_CAMERAS", 6]))


def test_a_message_names_the_key_of_the_models_node_or_both_where_the_model_kind_is_unknown():
    from types import SimpleNamespace

    from reid.tracking.appearance import predictor_model

    def refusal(predictor):
        with pytest.raises(ValueError) as e:
            predictor_model(predictor, "appearance", "m.pth")
        assert "\n" not in str(e.value)
        return str(e.value)

    for backbone, key in (("clip_vit_b16", "MODEL.CLIP"), ("vit_base_transreid", "MODEL.TRANSREID")):
        cfg = load_config(None, ["MODEL.BACKBONE.NAME", backbone])
        message = refusal(SimpleNamespace(uses_camids=True, model=object(), cfg=cfg))
        assert message.endswith(f"use a model trained with {key}.SIE_CAMERA False.")
    exported = refusal(SimpleNamespace(uses_camids=True, model=None, cfg=None))  # a file without a config
    assert exported.endswith("MODEL.TRANSREID.SIE_CAMERA False (MODEL.CLIP.SIE_CAMERA False for a clip_* backbone).")
