"""ResNet backbone: last stride, channels, registry errors, ImageNet weight loading."""
from __future__ import annotations


import pytest
import torch
import torch.hub
from torchvision import models as tv_models

from reid.modeling.backbones import (
    BACKBONE_REGISTRY,
    PretrainedWeightsError,
    ResNetBackbone,
    build_backbone,
    set_stage_stride,
)
from tests._tools import backbone_cfg


def _cfg(name="resnet18", **backbone):
    return backbone_cfg(name, **backbone)


@pytest.mark.slow
@pytest.mark.parametrize("name,channels", [("resnet18", 512), ("resnet50", 2048)])
def test_last_stride_sets_final_map_size(name, channels):
    x = torch.randn(1, 3, 64, 32)
    with torch.no_grad():
        s1 = ResNetBackbone(name, last_stride=1).eval()(x)
        s2 = ResNetBackbone(name, last_stride=2).eval()(x)
    # Overall stride 16 with last stride 1, 32 with torchvision's original 2.
    assert s1.shape == (1, channels, 4, 2)
    assert s2.shape == (1, channels, 2, 1)
    assert ResNetBackbone(name).out_channels == channels


@pytest.mark.slow
def test_set_stage_stride_moves_stride_and_shortcut_together():
    bb = ResNetBackbone("resnet50", last_stride=2)
    set_stage_stride(bb.layer4, 1)
    assert bb.layer4[0].conv2.stride == (1, 1)
    assert bb.layer4[0].downsample[0].stride == (1, 1)
    basic = ResNetBackbone("resnet18", last_stride=1)
    assert basic.layer4[0].conv1.stride == (1, 1)
    assert basic.layer4[0].downsample[0].stride == (1, 1)


def test_registry_builds_from_config_and_lists_names_on_error():
    bb = build_backbone(_cfg("resnet34", LAST_STRIDE=2))
    assert isinstance(bb, ResNetBackbone) and bb.name == "resnet34"
    assert bb.layer4[0].conv1.stride == (2, 2)
    assert set(BACKBONE_REGISTRY.names()) >= {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}
    with pytest.raises(KeyError) as err:
        build_backbone(_cfg("resnet999"))
    assert "resnet999" in str(err.value) and "resnet50" in str(err.value)


def test_invalid_last_stride_is_rejected():
    with pytest.raises(ValueError, match="LAST_STRIDE"):
        ResNetBackbone("resnet18", last_stride=3)


def test_offline_without_local_file_explains_both_options(offline_hub):
    with pytest.raises(PretrainedWeightsError) as err:
        build_backbone(_cfg("resnet18", PRETRAINED=True))
    msg = str(err.value)
    assert "MODEL.BACKBONE.PRETRAINED_PATH" in msg
    assert "resnet18-f37072fd.pth" in msg  # the torchvision file name to look for
    assert "internet" in msg
    assert "MODEL.BACKBONE.PRETRAINED False" in msg


def _saved_resnet18(tmp_path, extra=None):
    """A torchvision-format resnet18 state dict with random weights, saved to a file."""
    torch.manual_seed(123)
    state = tv_models.resnet18(weights=None).state_dict()
    if extra:
        state.update(extra)
    path = tmp_path / "resnet18-local.pth"
    torch.save(state, path)
    return path, state


@pytest.mark.slow
def test_local_pretrained_file_loads_weights(tmp_path):
    path, state = _saved_resnet18(tmp_path)
    bb = build_backbone(_cfg("resnet18", PRETRAINED=True, PRETRAINED_PATH=str(path)))
    own = bb.state_dict()
    for key in ("conv1.weight", "layer4.1.conv2.weight", "layer3.0.downsample.1.running_var"):
        assert torch.equal(own[key], state[key])
    # A different random init would not match: the weights came from the file.
    assert not torch.equal(ResNetBackbone("resnet18").conv1.weight, state["conv1.weight"])


@pytest.mark.slow
def test_local_file_reports_unexpected_keys(tmp_path):
    path, _ = _saved_resnet18(tmp_path, extra={"extra.weight": torch.zeros(3)})
    bb = ResNetBackbone("resnet18")
    missing, unexpected = bb.load_imagenet(str(path))
    assert missing == [] and unexpected == ["extra.weight"]  # fc.* is expected to go unused


@pytest.mark.slow
def test_local_file_of_another_architecture_is_rejected(tmp_path):
    path, state = _saved_resnet18(tmp_path)
    state["conv1.weight"] = torch.zeros(64, 3, 3, 3)
    torch.save(state, path)
    with pytest.raises(PretrainedWeightsError, match="conv1.weight"):
        ResNetBackbone("resnet18", pretrained=True, pretrained_path=str(path))


def test_missing_local_file_names_the_path(tmp_path):
    missing = tmp_path / "nope.pth"
    with pytest.raises(FileNotFoundError) as err:
        ResNetBackbone("resnet18", pretrained=True, pretrained_path=str(missing))
    assert str(missing) in str(err.value) and "PRETRAINED False" in str(err.value)
