"""The fast-reid key mapping: recognition, where each tensor lands, strictness, inferred settings.

The fast-reid layouts (key names and shapes) are those of fast-reid 1.4.0's own models,
stored in tests/fixtures/fastreid_reference.npz (see tests/_fastreid.py).
"""
from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

from reid.config import load_config
from reid.modeling import build_model
from reid.modeling.formats.fastreid import (
    MGN_FEATURES,
    SHIPPED_CONFIGS,
    FastReIDWeightsError,
    convert_fastreid_state,
    fastreid_architecture,
    is_fastreid_state,
    suggest_config,
)
from tests import _fastreid as fr


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _model(name, num_classes=0, extra=()):
    cfg = load_config(fr.config(name), fr.opts(name) + ["MODEL.HEADS.NUM_CLASSES", num_classes] + list(extra))
    return build_model(cfg)


@pytest.mark.slow
def test_fastreid_files_are_recognised_and_ours_are_not():
    for name in fr.ARCH_NAMES:
        assert is_fastreid_state(dict.fromkeys(k for k, _ in fr.layout(name)))
    for name in ("bot_R50", "mgn_R50-ibn"):
        assert not is_fastreid_state(_model(name, num_classes=3).state_dict())


@pytest.mark.slow
def test_every_fastreid_tensor_lands_where_its_module_is():
    state = fr.fastreid_state("sbs_R50-ibn")
    converted = convert_fastreid_state(state, _model("sbs_R50-ibn", num_classes=16))
    ours = converted.state
    assert len(converted.mapping) == len(state)  # every tensor used, once
    pairs = dict(converted.mapping)
    assert pairs["backbone.NL_3.2.W.1.weight"] == "backbone.non_local.2.2.out_bn.weight"
    assert pairs["backbone.NL_2.0.W.0.bias"] == "backbone.non_local.1.0.out_conv.bias"
    assert pairs["backbone.layer2.0.bn1.IN.weight"] == "backbone.layer2.0.bn1.IN.weight"
    assert pairs["heads.bottleneck.0.running_var"] == "neck.running_var"
    assert torch.equal(ours["backbone.non_local.2.2.theta.weight"], state["backbone.NL_3.2.theta.weight"])
    # GeM's exponent: a 1-element vector in fast-reid, a scalar here.
    assert ours["pool.p"].shape == () and float(ours["pool.p"]) == float(state["heads.pool_layer.p"])
    assert torch.equal(ours["head.weight"], state["heads.weight"])


@pytest.mark.slow
def test_mgn_branches_features_and_neck_slices_follow_fastreids_order():
    state = fr.fastreid_state("mgn_R50-ibn")
    converted = convert_fastreid_state(state, _model("mgn_R50-ibn", num_classes=16))
    ours = converted.state
    assert len(converted.mapping) == len(state)
    # fast-reid renumbers layer3[1:] from 0; our branches keep layer3's indices.
    assert torch.equal(ours["branch_part2.0.1.conv1.weight"], state["b2.0.0.conv1.weight"])
    assert torch.equal(ours["branch_part3.1.2.bn3.weight"], state["b3.1.2.bn3.weight"])
    assert torch.equal(ours["trunk.6.bn1.IN.weight"], state["backbone.6.bn1.IN.weight"])
    for i, feature in enumerate(MGN_FEATURES):  # b1, b2, b3, b21, b22, b31, b32, b33 = our 0..7
        assert torch.equal(ours[f"reductions.{i}.0.weight"], state[f"{feature}_head.bottleneck.0.weight"])
        assert float(ours[f"pools.{i}.p"]) == float(state[f"{feature}_head.pool_layer.p"])
        part = slice(256 * i, 256 * (i + 1))
        for name in ("weight", "bias", "running_mean", "running_var"):
            assert torch.equal(ours[f"neck.{name}"][part], state[f"{feature}_head.bottleneck.1.{name}"])
        assert torch.equal(ours[f"heads.{i}.weight"], state[f"{feature}_head.weight"])
    assert ("b21_head.bottleneck.1.weight", "neck.weight[768:1024]") in converted.mapping


def _v0_mgn(state):
    """fast-reid v0.x MGN (the model-zoo layout): pool -> conv -> BN -> ReLU, then a BNNeck."""
    old = {}
    for key, value in state.items():
        for f in MGN_FEATURES:
            key = key.replace(f"{f}_head.pool_layer.", f"{f}_pool.0.").replace(f"{f}_head.bottleneck.0.", f"{f}_pool.1.")
            key = key.replace(f"{f}_head.bottleneck.1.", f"{f}_head.bnneck.")
            if key == f"{f}_head.weight":
                key = f"{f}_head.classifier.weight"
        old[key] = value
    for f in MGN_FEATURES:
        for name, fill in (("weight", 0.8), ("bias", 0.05), ("running_mean", 0.02), ("running_var", 1.3)):
            old[f"{f}_pool.2.{name}"] = torch.full((256,), fill) + 0.01 * torch.arange(256) / 256
        old[f"{f}_pool.2.num_batches_tracked"] = torch.tensor(7)
    old["pixel_mean"] = torch.tensor([123.675, 116.28, 103.53]).view(1, 3, 1, 1)
    old["pixel_std"] = torch.tensor([58.395, 57.12, 57.375]).view(1, 3, 1, 1)
    return old


@pytest.mark.slow
def test_v0_mgn_files_map_onto_the_conv_bn_relu_reduction_and_compute_fastreids_v0_forward():
    state = _v0_mgn(fr.fastreid_state("mgn_R50-ibn"))
    assert fastreid_architecture(state)["MODEL.MGN.REDUCTION"] == "conv_bn_relu"
    with pytest.raises(FastReIDWeightsError, match="MODEL.MGN.REDUCTION conv_bn_relu"):
        convert_fastreid_state(state, _model("mgn_R50-ibn"))  # the v1.x config: conv only
    model = _model("mgn_R50-ibn", num_classes=16, extra=["MODEL.MGN.REDUCTION", "conv_bn_relu"])
    converted = convert_fastreid_state(state, model)
    assert converted.naming == "v0.x" and len(converted.mapping) == len(state) - 2  # pixel stats are checked
    model.load_state_dict(converted.state)
    model.eval()
    images = fr.images("mgn_R50-ibn")
    with torch.no_grad():
        out = model(images)
        # fast-reid v0.x feature b1 from the file's tensors: GeM -> conv -> BN -> ReLU -> BNNeck.
        b1_map = model.branch_global(model.trunk(model.preprocess(images)))
        p = state["b1_pool.0.p"]
        x = b1_map.clamp(min=1e-6).pow(p).mean(dim=(2, 3), keepdim=True).pow(1.0 / p)
        x = F.conv2d(x, state["b1_pool.1.weight"])
        x = F.relu(F.batch_norm(x, state["b1_pool.2.running_mean"], state["b1_pool.2.running_var"],
                                state["b1_pool.2.weight"], state["b1_pool.2.bias"])).flatten(1)
        x = F.batch_norm(x, state["b1_head.bnneck.running_mean"], state["b1_head.bnneck.running_var"],
                         state["b1_head.bnneck.weight"], state["b1_head.bnneck.bias"])
    torch.testing.assert_close(out[:, :256], x, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_wrong_pixel_statistics_are_named_with_the_key_to_set():
    state = fr.fastreid_state("bot_R50")
    state["pixel_mean"] = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    with pytest.raises(FastReIDWeightsError, match=r"set MODEL.PIXEL_MEAN \[0.485, 0.456, 0.406\]"):
        convert_fastreid_state(state, _model("bot_R50"))


@pytest.mark.slow
def test_a_tensor_the_file_lacks_is_named():
    state = fr.fastreid_state("bot_R50")
    del state["backbone.layer3.4.conv2.weight"]
    with pytest.raises(FastReIDWeightsError, match=r"this model's backbone.layer3.4.conv2.weight has no counterpart"):
        convert_fastreid_state(state, _model("bot_R50"))


@pytest.mark.slow
def test_shape_mismatch_names_both_keys_and_shapes():
    state = fr.fastreid_state("sbs_R50")
    model = _model("sbs_R50", extra=["MODEL.BACKBONE.NON_LOCAL_EMBED", 0])  # half-width embeddings
    with pytest.raises(FastReIDWeightsError) as err:
        convert_fastreid_state(state, model, source="sbs.pth")
    msg = str(err.value)
    assert "sbs.pth" in msg and "backbone.NL_2.0.g.weight has shape (1, 512, 1, 1)" in msg
    assert "backbone.non_local.1.0.g.weight has (256, 512, 1, 1)" in msg and "NON_LOCAL_EMBED 1" in msg


@pytest.mark.slow
def test_unsupported_fastreid_parts_are_named():
    state = fr.fastreid_state("bot_R50")
    state["backbone.layer1.0.se.fc.0.weight"] = torch.zeros(16, 256)
    with pytest.raises(FastReIDWeightsError, match="squeeze-and-excitation"):
        convert_fastreid_state(state, _model("bot_R50"))
    state = fr.fastreid_state("bot_R50")
    state["heads.bottleneck.0.weight"] = torch.zeros(512, 2048, 1, 1)
    with pytest.raises(FastReIDWeightsError, match="EMBEDDING_DIM"):
        convert_fastreid_state(state, _model("bot_R50"))


@pytest.mark.slow
def test_fixed_gem_without_p_keeps_the_configured_exponent_with_a_note():
    state = fr.fastreid_state("sbs_R50")
    del state["heads.pool_layer.p"]
    model = _model("sbs_R50")
    converted = convert_fastreid_state(state, model)
    assert float(converted.state["pool.p"]) == 3.0  # the model's MODEL.HEADS.GEM_P, as fast-reid's fixed p
    assert any("GEM_P" in n for n in converted.notes)
    model.load_state_dict(converted.state, strict=True)  # nothing missing


@pytest.mark.slow
def test_mgn_concat_layout_drops_the_eight_classifiers_with_a_note():
    state = fr.fastreid_state("mgn_R50")
    model = _model("mgn_R50", num_classes=16, extra=["MODEL.MGN.LOSS_LAYOUT", "concat"])
    converted = convert_fastreid_state(state, model)
    assert converted.head_dropped and not any(k.startswith("heads.") for k in converted.state)
    assert any("8 x 16 classes" in n and "per_branch" in n for n in converted.notes)
    inference = convert_fastreid_state(state, _model("mgn_R50"))  # no head at all: nothing to drop
    assert not inference.head_dropped and any("no identity head" in n for n in inference.notes)


@pytest.mark.slow
@pytest.mark.parametrize("name, expected", [
    ("bot_R50", {"MODEL.BACKBONE.NAME": "resnet50", "MODEL.HEADS.POOLING": "avg",
                 "MODEL.BACKBONE.NON_LOCAL": [0, 0, 0, 0]}),
    ("bot_R50-ibn", {"MODEL.BACKBONE.NAME": "resnet50_ibn_a"}),
    ("sbs_R50-ibn", {"MODEL.BACKBONE.NON_LOCAL": [0, 2, 3, 0], "MODEL.BACKBONE.NON_LOCAL_EMBED": 1,
                     "MODEL.HEADS.POOLING": "gem", "MODEL.HEADS.NECK": "bnneck"}),
    ("mgn_R50", {"MODEL.META_ARCHITECTURE": "mgn", "MODEL.BACKBONE.NAME": "resnet50", "MODEL.MGN.POOLING": "gem",
                 "MODEL.MGN.REDUCTION": "conv", "MODEL.MGN.REDUCTION_DIM": 256, "MODEL.MGN.STRIPES": "chunk"}),
])
def test_settings_inferred_from_the_keys(name, expected):
    settings = fastreid_architecture(fr.fastreid_state(name))
    for key, value in expected.items():
        assert settings[key] == value, key


@pytest.mark.slow
def test_shipped_fastreid_configs_have_the_settings_the_mapping_names():
    root = fr.ROOT
    for path, fixed in SHIPPED_CONFIGS:
        cfg = load_config(os.path.join(root, path))
        for key, value in fixed.items():
            node = cfg
            for part in key.split(".")[:-1]:
                node = getattr(node, part)
            actual = getattr(node, key.rsplit(".", 1)[1])
            assert (list(actual) if isinstance(actual, (list, tuple)) else actual) == value, (path, key)
    assert suggest_config(fr.fastreid_state("sbs_R50")).endswith("(e.g. --config-file configs/Market1501/sbs_resnet50.yml)")
    assert "--config-file" not in suggest_config(_v0_mgn(fr.fastreid_state("mgn_R50-ibn")))


@pytest.mark.slow
def test_a_vehicle_sized_file_without_p_is_pointed_to_the_fixed_gem():
    state = fr.fastreid_state("bot_R50-ibn")  # no GeM exponent, like fast-reid's VehicleID models
    state["heads.weight"] = torch.zeros(13164, 2048)  # VehicleID's training vehicles
    assert fastreid_architecture(state)["MODEL.HEADS.POOLING"] == "gem_fixed"
    assert "configs/VehicleID/bot_resnet50_ibn.yml" in suggest_config(state)
    averaging = convert_fastreid_state(state, _model("bot_R50-ibn", num_classes=13164))
    assert any("MODEL.HEADS.POOLING gem_fixed" in n for n in averaging.notes)
    person = convert_fastreid_state(fr.fastreid_state("bot_R50-ibn"), _model("bot_R50-ibn", num_classes=16))
    assert not any("gem_fixed" in n for n in person.notes)  # 16 classes: a person file, average pooling
