"""TransReID's checkpoint format: recognition, key mapping, notes and the settings a file needs.

TransReID's layout is written out by hand here (``base.`` ViT, ``b1``/``b2``, ``bottleneck[_i]``,
``classifier[_i]``, the unused ``base.fc``) around a tiny ViT, so the tests take milliseconds;
tests/modeling/formats/test_transreid_checkpoints.py checks files of TransReID's own code.
"""
from __future__ import annotations

import re

import pytest
import torch

from reid.config import get_cfg
from reid.modeling import build_model
from reid.modeling.backbones import VIT_SPECS
from reid.modeling.backbones.vit import ViTSpec
from reid.modeling.formats import convert_foreign_state, detect_format
from reid.modeling.formats.transreid import TransReIDWeightsError, suggest_config


@pytest.fixture(autouse=True)
def tiny_vit(monkeypatch):
    monkeypatch.setitem(VIT_SPECS, "vit_base_transreid", ViTSpec(32, 2, 2))


def _cfg(jpm=True, sie=True, classes=5, stride=12):
    cfg = get_cfg()
    cfg.merge_from_list(["MODEL.META_ARCHITECTURE", "transreid" if jpm else "baseline",
                         "MODEL.BACKBONE.NAME", "vit_base_transreid", "MODEL.BACKBONE.PRETRAINED", False,
                         "INPUT.SIZE_TRAIN", [256, 128], "INPUT.SIZE_TEST", [256, 128],
                         "MODEL.TRANSREID.STRIDE_SIZE", [stride, stride], "MODEL.TRANSREID.SIE_CAMERA", sie,
                         "MODEL.TRANSREID.NUM_CAMERAS", 6, "MODEL.HEADS.NAME", "linear", "MODEL.HEADS.NUM_CLASSES", classes])
    return cfg


def _their_key(ours: str) -> str:
    """TransReID's name of our tensor (the inverse of the documented mapping)."""
    ours = re.sub(r"^backbone\.", "base.", ours)
    ours = re.sub(r"^local_necks\.(\d+)\.", lambda m: f"bottleneck_{int(m.group(1)) + 1}.", ours)
    ours = re.sub(r"^local_heads\.(\d+)\.", lambda m: f"classifier_{int(m.group(1)) + 1}.", ours)
    return re.sub(r"^neck\.", "bottleneck.", re.sub(r"^head\.", "classifier.", ours))


def _transreid_state(jpm=True, sie=True, classes=5, seed=0, stride=12):
    torch.manual_seed(seed)
    model = build_model(_cfg(jpm, sie, classes, stride))
    state = {_their_key(k): v.clone() for k, v in model.state_dict().items()}
    state["base.fc.weight"], state["base.fc.bias"] = torch.randn(1000, 32), torch.randn(1000)
    return state


def test_recognised_by_its_keys_and_mapped_tensor_for_tensor():
    state = _transreid_state()
    assert detect_format(state).label == "TransReID"
    torch.manual_seed(1)
    model = build_model(_cfg())
    converted = convert_foreign_state(model, state, "file.pth", log=False)
    model.load_state_dict(converted.state, strict=True)
    torch.testing.assert_close(model.backbone.sie_embed, state["base.sie_embed"])
    torch.testing.assert_close(model.b2[0].mlp.fc1.weight, state["b2.0.mlp.fc1.weight"])
    torch.testing.assert_close(model.local_necks[0].running_mean, state["bottleneck_1.running_mean"])
    torch.testing.assert_close(model.local_heads[3].weight, state["classifier_4.weight"])
    assert ("bottleneck.weight", "neck.weight") in converted.mapping
    assert any("base.fc" in note for note in converted.notes) and not converted.head_dropped
    assert converted.description == "TransReID vit_base_transreid, stride 12, SIE 6 cameras, JPM checkpoint"


def test_other_class_count_drops_the_heads_with_a_note():
    converted = convert_foreign_state(build_model(_cfg(classes=7)), _transreid_state(), "file.pth", log=False)
    assert converted.head_dropped and any("5 classes" in n and "7" in n for n in converted.notes)


def test_suggested_settings_describe_the_file():
    text = suggest_config(_transreid_state())
    for part in ("MODEL.META_ARCHITECTURE transreid", "MODEL.BACKBONE.NAME vit_base_transreid",
                 "INPUT.SIZE_TRAIN [256,128]", "MODEL.TRANSREID.STRIDE_SIZE [12,12]",
                 "MODEL.TRANSREID.SIE_CAMERA True", "MODEL.TRANSREID.NUM_CAMERAS 6", "MODEL.TRANSREID.JPM_PARTS 4",
                 "configs/Market1501/vit_base_transreid.yml"):
        assert part in text, part
    plain = suggest_config(_transreid_state(jpm=False, sie=False))
    assert "MODEL.META_ARCHITECTURE baseline" in plain and "SIE_CAMERA False" in plain and "JPM_PARTS" not in plain


def test_a_file_of_another_variant_is_one_line_naming_the_key_and_the_settings():
    with pytest.raises(TransReIDWeightsError) as info:
        convert_foreign_state(build_model(_cfg(sie=False)), _transreid_state(), "jpm_sie.pth", log=False)
    message = str(info.value)
    assert "\n" not in message and "jpm_sie.pth" in message
    assert "base.sie_embed has no counterpart in this model" in message and "SIE_CAMERA True" in message
    with pytest.raises(TransReIDWeightsError, match=r"this model's b1\.0\.norm1\.weight has no counterpart"):
        convert_foreign_state(build_model(_cfg()), _transreid_state(jpm=False), "plain.pth", log=False)


def test_plain_stride_16_files_point_to_personvits_config():
    # PersonViT's recipe (fine-tuned with TransReID's code): no JPM, no SIE, stride 16.
    text = suggest_config(_transreid_state(jpm=False, sie=False, stride=16))
    assert "MODEL.TRANSREID.STRIDE_SIZE [16,16]" in text and "configs/Market1501/vit_base_personvit.yml" in text
    assert "vit_base_transreid.yml" in suggest_config(_transreid_state(jpm=False, sie=False))  # stride 12


@pytest.mark.parametrize("extra, what", [({"base.patch_embed.conv.0.weight": torch.zeros(64, 3, 7, 7)},
                                          "convolutional stem"),
                                         ({"fcneck.weight": torch.zeros(16, 32)}, "MODEL.REDUCE_FEAT_DIM")])
def test_personvit_parts_this_toolkit_lacks_are_one_line_without_settings(extra, what):
    state = {**extra, **_transreid_state(jpm=False, sie=False, stride=16)}
    with pytest.raises(TransReIDWeightsError) as info:
        convert_foreign_state(build_model(_cfg(jpm=False, sie=False, stride=16)), state, "ics.pth", log=False)
    message = str(info.value)
    assert "\n" not in message and f"{next(iter(extra))} has no counterpart" in message and what in message
    assert "It needs" not in message  # no setting would make it fit


@pytest.mark.parametrize("extra, reshaped, what", [
    ({"base.patch_embed.conv.0.weight": torch.zeros(64, 3, 7, 7)},
     {"base.patch_embed.proj.weight": torch.zeros(32, 64, 16, 16)}, "convolutional stem"),
    ({"fcneck.weight": torch.zeros(16, 32)}, {"bottleneck.weight": torch.ones(16), "bottleneck.bias": torch.zeros(16)},
     "MODEL.REDUCE_FEAT_DIM")])
def test_personvit_parts_are_named_whatever_the_key_order(extra, reshaped, what):
    # The tensors these parts reshape come first here, as in a file whose keys were sorted or
    # re-saved in another order: the part is still the reason given, not the reshaped tensor.
    state = {**_transreid_state(jpm=False, sie=False, stride=16), **reshaped}
    state = {**{k: state.pop(k) for k in reshaped}, **state, **extra}
    with pytest.raises(TransReIDWeightsError) as info:
        convert_foreign_state(build_model(_cfg(jpm=False, sie=False, stride=16)), state, "ics.pth", log=False)
    message = str(info.value)
    assert f"{next(iter(extra))} has no counterpart" in message and what in message and "It needs" not in message


def test_our_own_files_and_other_toolkits_are_not_taken_for_transreid():
    assert detect_format(build_model(_cfg()).state_dict()) is None
    assert detect_format({"conv1.conv.weight": torch.zeros(1), "classifier.weight": torch.zeros(1)}).label != "TransReID"
