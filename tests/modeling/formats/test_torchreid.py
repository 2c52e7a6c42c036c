"""The torchreid key mapping: recognition, where each tensor lands, strictness, inferred settings.

The state dicts here have torchreid's layout (our OSNet backbone has torchreid's names; its
``fc`` and ``classifier`` are added as torchreid names them). tests/_torchreid.py and
tests/modeling/formats/test_torchreid_checkpoints.py check against torchreid 0.2.5's own models.
"""
from __future__ import annotations

import glob
import logging
import os

import pytest
import torch

from reid.config import get_cfg, load_config
from reid.modeling import build_model
from reid.modeling.backbones import OSNetBackbone
from reid.modeling.formats import FORMAT_REGISTRY, convert_foreign_state, detect_format
from reid.modeling.formats.torchreid import (
    CONFIG_NAMES,
    TorchreidWeightsError,
    convert_torchreid_state,
    is_torchreid_state,
    suggest_config,
    torchreid_architecture,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def torchreid_layout(name="osnet_x0_25", classes=751, fc=512, seed=0):
    """A state dict laid out as torchreid saves its OSNet: backbone, fc.0/fc.1, classifier."""
    torch.manual_seed(seed)
    state = dict(OSNetBackbone(name).state_dict())
    width = state["conv5.bn.weight"].shape[0]
    if fc:
        state.update({"fc.0.weight": torch.randn(fc, width) * 0.05, "fc.0.bias": torch.randn(fc) * 0.1,
                      "fc.1.weight": torch.rand(fc) + 0.5, "fc.1.bias": torch.randn(fc) * 0.1,
                      "fc.1.running_mean": torch.randn(fc) * 0.1, "fc.1.running_var": torch.rand(fc) + 0.5,
                      "fc.1.num_batches_tracked": torch.tensor(100)})
    if classes:
        state.update({"classifier.weight": torch.randn(classes, fc or width) * 0.01,
                      "classifier.bias": torch.randn(classes) * 0.01})
    return state


def torchreid_model(name="osnet_x0_25", classes=0, **opts):
    """This toolkit's torchreid-layout model (configs/Base-torchreid.yml) for backbone `name`."""
    extra = [x for kv in opts.items() for x in kv]
    cfg = load_config(os.path.join(ROOT, "configs", "Base-torchreid.yml"),
                      ["MODEL.BACKBONE.NAME", name, "MODEL.BACKBONE.PRETRAINED", False,
                       "MODEL.HEADS.NUM_CLASSES", classes, *extra])
    return build_model(cfg)


# --------------------------------------------------------------------------- recognition
def test_formats_registry_recognises_torchreid_and_not_ours():
    assert {"fastreid", "torchreid"} <= set(FORMAT_REGISTRY.names())
    state = torchreid_layout()
    assert detect_format(state).label == "torchreid" and is_torchreid_state(state)
    assert detect_format(torchreid_model().state_dict()) is None  # our own files: no conversion
    resnet = {"conv1.weight": torch.zeros(1), "layer1.0.conv1.weight": torch.zeros(1), "classifier.weight": torch.zeros(1)}
    assert is_torchreid_state(resnet)
    del resnet["classifier.weight"]  # a torchvision ResNet file is not a torchreid one
    assert not is_torchreid_state(resnet)


@pytest.mark.parametrize("name", ["osnet_x1_0", "osnet_x0_25", "osnet_ibn_x1_0", "osnet_ain_x1_0", "osnet_ain_x0_5"])
def test_architecture_is_read_from_the_keys(name):
    settings = torchreid_architecture(torchreid_layout(name))
    assert settings["MODEL.BACKBONE.NAME"] == name and settings["MODEL.HEADS.FC_DIM"] == 512
    assert settings["MODEL.HEADS.NECK"] == "none" and settings["MODEL.HEADS.POOLING"] == "avg"


def test_suggested_config_follows_the_dataset_of_the_class_count():
    assert "configs/Market1501/osnet_x0_25_torchreid.yml" in suggest_config(torchreid_layout(classes=751))
    assert "configs/MSMT17/osnet_x0_25_torchreid.yml" in suggest_config(torchreid_layout(classes=1041))
    # No shipped config for this width: the family's, with the name as an override.
    text = suggest_config(torchreid_layout("osnet_ain_x0_5", classes=0))
    assert text.endswith("(e.g. --config-file configs/Market1501/osnet_ain_x1_0_torchreid.yml "
                         "MODEL.BACKBONE.NAME osnet_ain_x0_5)")


# --------------------------------------------------------------------------- mapping
def test_every_tensor_lands_under_our_names_and_the_classifier_loads():
    state = torchreid_layout(classes=751)
    model = torchreid_model(classes=751)
    converted = convert_torchreid_state(state, model, "osnet_x0_25_market1501.pt")
    mapping = dict(converted.mapping)
    assert mapping["conv2.0.conv2a.conv1.weight"] == "backbone.conv2.0.conv2a.conv1.weight"
    assert mapping["fc.1.running_var"] == "embedding.1.running_var"
    assert mapping["classifier.bias"] == "head.bias" and not converted.head_dropped
    assert set(converted.state) == set(model.state_dict())
    model.load_state_dict(converted.state, strict=True)
    assert torch.equal(model.head.bias, state["classifier.bias"])


def test_eval_feature_is_torchreids_fc_output():
    state = torchreid_layout("osnet_ain_x0_25")
    model = torchreid_model("osnet_ain_x0_25")
    model.load_state_dict(convert_torchreid_state(state, model).state, strict=True)
    model.eval()
    images = torch.randint(0, 256, (3, 3, 64, 32), dtype=torch.uint8)
    with torch.no_grad():
        feats = model(images)
        pooled = model.backbone(model.preprocess(images)).mean(dim=(2, 3))
        fc = torch.nn.functional.linear(pooled, state["fc.0.weight"], state["fc.0.bias"])
        bn = (fc - state["fc.1.running_mean"]) / torch.sqrt(state["fc.1.running_var"] + 1e-5)
        expected = torch.relu(bn * state["fc.1.weight"] + state["fc.1.bias"])
    assert feats.shape == (3, 512) and torch.allclose(feats, expected, atol=1e-5)
    assert (feats >= 0).all()  # torchreid's test feature comes after a ReLU


def test_classifier_of_another_class_count_is_dropped_with_a_note(caplog):
    model = torchreid_model(classes=5)
    before = model.head.weight.detach().clone()
    with caplog.at_level(logging.INFO, logger="reid.modeling.formats"):
        converted = convert_foreign_state(model, torchreid_layout(classes=751), "x.pt")
    assert converted.head_dropped and "head.weight" not in converted.state
    assert torch.equal(model.head.weight, before)
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("note:")]
    assert any("torchreid's identity classifier (751 classes) dropped" in n and "5 classes" in n for n in notes), notes
    assert any("torchreid osnet_x0_25 checkpoint, " in r.getMessage() for r in caplog.records)


def test_fine_tuning_with_our_heads_keeps_backbone_and_embedding_and_notes_the_neck():
    # Circle + BNNeck on the torchreid embedding: neck and head start fresh, the rest is the file's.
    model = torchreid_model(classes=10, **{"MODEL.HEADS.NAME": "circle", "MODEL.HEADS.BIAS": False,
                                           "MODEL.HEADS.NECK": "bnneck"})
    state = torchreid_layout(classes=751)
    converted = convert_torchreid_state(state, model)
    assert converted.head_dropped
    assert any("no BNNeck" in n for n in converted.notes)
    assert any("classifier.bias has no counterpart" in n or "751" in n for n in converted.notes)
    assert torch.equal(converted.state["embedding.0.weight"], state["fc.0.weight"])
    assert torch.equal(converted.state["neck.running_var"], model.neck.running_var)


# --------------------------------------------------------------------------- errors
def _error(state, model):
    with pytest.raises(TorchreidWeightsError) as err:
        convert_torchreid_state(state, model, "file.pt")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("torchreid checkpoint file.pt")
    return msg


def test_wrong_width_names_the_key_and_the_config_that_fits():
    msg = _error(torchreid_layout("osnet_x1_0", classes=1041), torchreid_model("osnet_x0_25"))
    assert "conv1.conv.weight has shape (64, 3, 7, 7)" in msg and "(16, 3, 7, 7)" in msg
    assert "MODEL.BACKBONE.NAME osnet_x1_0" in msg and "configs/MSMT17/osnet_x1_0_torchreid.yml" in msg


def test_ain_file_in_a_plain_config_names_the_ain_config():
    msg = _error(torchreid_layout("osnet_ain_x1_0"), torchreid_model("osnet_x1_0"))
    assert "conv2.0.conv2.0.layers.0.conv1.weight has no counterpart" in msg
    assert "configs/Market1501/osnet_ain_x1_0_torchreid.yml" in msg


def test_missing_keys_are_named():
    state = torchreid_layout()
    del state["conv4.1.gate.fc2.bias"]
    assert "this model's backbone.conv4.1.gate.fc2.bias has no counterpart in the checkpoint" in _error(
        state, torchreid_model())
    # A file without the fc embedding (FC_DIM 0) in a config with one.
    msg = _error(torchreid_layout(fc=0), torchreid_model())
    assert "embedding.0.weight has no counterpart" in msg and "MODEL.HEADS.FC_DIM 0" in msg


# --------------------------------------------------------------------------- shipped configs
def test_every_torchreid_config_builds_the_layout_the_mapping_names():
    paths = sorted(glob.glob(os.path.join(ROOT, "configs", "*", "*_torchreid.yml")))
    names = {os.path.basename(p)[: -len("_torchreid.yml")] for p in paths}
    assert names == set(CONFIG_NAMES)
    for path in paths:
        cfg = load_config(path)
        name = os.path.basename(path)[: -len("_torchreid.yml")]
        settings = torchreid_architecture(torchreid_layout(name, classes=0))
        assert cfg.MODEL.BACKBONE.NAME == name
        for key, value in settings.items():
            node = cfg
            for part in key.split("."):
                node = node[part]
            assert node == value, (path, key)
        assert cfg.INPUT.INTERPOLATION == "pil_bilinear" and cfg.MODEL.HEADS.BIAS


def test_fc_dim_is_refused_by_mgn():
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = "mgn"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.FC_DIM = 512
    with pytest.raises(ValueError, match="FC_DIM is for the baseline"):
        build_model(cfg)
