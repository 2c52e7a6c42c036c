"""OSNet backbones: the paper's structure, torchreid's names, ImageNet files, training with our heads."""
from __future__ import annotations

import pytest
import torch

from reid.modeling import build_model
from reid.modeling.backbones import (
    BACKBONE_REGISTRY,
    OSNET_NAMES,
    OSNetBackbone,
    PretrainedWeightsError,
    build_backbone,
    osnet_name_from_state,
)
from reid.modeling.backbones.osnet import AggregationGate, OSBlock
from reid.modeling.heads import HEAD_DEFAULTS
from tests._tools import backbone_cfg


def _cfg(name="osnet_x0_25", **backbone):
    return backbone_cfg(name, **backbone)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


# --------------------------------------------------------------------------- structure
def test_every_variant_is_registered():
    expected = {"osnet_x1_0", "osnet_x0_75", "osnet_x0_5", "osnet_x0_25", "osnet_ibn_x1_0",
                "osnet_ain_x1_0", "osnet_ain_x0_75", "osnet_ain_x0_5", "osnet_ain_x0_25"}
    assert set(OSNET_NAMES) == expected and expected <= set(BACKBONE_REGISTRY.names())


@pytest.mark.parametrize("name,channels,params", [
    # Paper Table 1 / torchreid's model zoo: 2.2M (x1.0), 1.3M, 0.6M, 0.2M parameters with the
    # 512-d fc embedding and no classifier; the backbone alone has that minus 512 x 512 + 3 x 512.
    ("osnet_x1_0", 512, 2.2e6), ("osnet_x0_75", 384, 1.3e6), ("osnet_x0_5", 256, 0.6e6), ("osnet_x0_25", 128, 0.2e6),
])
def test_widths_have_the_published_sizes_and_stride_16(name, channels, params):
    bb = OSNetBackbone(name).eval()
    assert bb.out_channels == channels
    total = sum(p.numel() for p in bb.parameters()) + channels * 512 + 3 * 512
    assert total == pytest.approx(params, rel=0.1)
    with torch.no_grad():
        assert bb(torch.randn(1, 3, 64, 32)).shape == (1, channels, 4, 2)


def test_block_has_four_streams_of_depth_one_to_four_and_one_shared_gate():
    plain, ain = OSBlock(64, 256), OSBlock(64, 256, ain_naming=True)
    assert [1 if not isinstance(s, torch.nn.Sequential) else len(s) for s in plain.streams()] == [1, 2, 3, 4]
    assert [len(s.layers) for s in ain.streams()] == [1, 2, 3, 4]
    assert sum(isinstance(m, AggregationGate) for m in plain.modules()) == 1
    assert plain.gate.fc1.out_channels == 64 // 16  # reduction 16 of the 64-channel streams


def test_gate_is_a_per_channel_sigmoid_weight_of_the_pooled_input():
    gate = AggregationGate(32)
    x = torch.randn(2, 32, 5, 3)
    pooled = x.mean(dim=(2, 3), keepdim=True)
    w = torch.sigmoid(gate.fc2(torch.relu(gate.fc1(pooled))))
    assert torch.allclose(gate(x), x * w)


def test_torchreid_parameter_names():
    keys = set(OSNetBackbone("osnet_x1_0").state_dict())
    assert {"conv1.conv.weight", "conv1.bn.running_var", "conv2.0.conv2a.conv1.weight", "conv2.0.conv2b.1.bn.bias",
            "conv2.0.conv2d.3.conv2.weight", "conv2.0.gate.fc1.bias", "conv2.0.downsample.bn.weight",
            "conv2.2.0.conv.weight", "conv3.2.0.bn.running_mean", "conv4.1.conv3.bn.weight", "conv5.bn.weight"} <= keys
    assert not any(k.startswith(("pool2", "fc.", "classifier.")) or ".IN." in k for k in keys)
    ibn = set(OSNetBackbone("osnet_ibn_x1_0").state_dict())
    # The stem's norm is an InstanceNorm (no running statistics); the first stage's blocks have IN.
    assert "conv1.bn.weight" in ibn and "conv1.bn.running_mean" not in ibn
    assert {k for k in ibn if ".IN." in k} == {f"conv2.{b}.IN.{p}" for b in (0, 1) for p in ("weight", "bias")}
    ain = set(OSNetBackbone("osnet_ain_x1_0").state_dict())
    assert {"conv2.0.conv2.3.layers.3.conv2.weight", "pool2.0.conv.weight", "pool3.0.bn.running_var"} <= ain
    # AIN: the residual branches that end in an InstanceNorm have no BatchNorm after conv3.
    with_in = {k.split(".IN.")[0] for k in ain if ".IN." in k}
    assert with_in == {"conv2.0", "conv2.1", "conv3.1", "conv4.0"}
    assert not any(f"{b}.conv3.bn.weight" in ain for b in with_in) and "conv3.0.conv3.bn.weight" in ain


@pytest.mark.parametrize("name", OSNET_NAMES)
def test_variant_is_recognised_from_its_state_dict(name):
    assert osnet_name_from_state(OSNetBackbone(name).state_dict()) == name


def test_ibn_normalises_the_block_output_and_ain_the_branch():
    torch.manual_seed(0)
    x = torch.randn(2, 64, 8, 4)
    for mode in ("after_sum", "branch"):
        block = OSBlock(64, 64, instance_norm=mode).eval()
        with torch.no_grad():
            out = block(x)
            branch = block.conv3(sum(block.gate(s(block.conv1(x))) for s in block.streams()))
            expected = block.IN(branch + x) if mode == "after_sum" else block.IN(branch) + x
        assert torch.allclose(out, torch.relu(expected), atol=1e-6)


def test_non_local_is_refused_for_osnet():
    with pytest.raises(ValueError, match="NON_LOCAL.*osnet_x0_25"):
        build_backbone(_cfg(NON_LOCAL=[0, 1, 0, 0]))


def test_unknown_osnet_name_lists_the_valid_ones():
    with pytest.raises(KeyError) as err:
        build_backbone(_cfg("osnet_x2_0"))
    assert "osnet_x0_25" in str(err.value) and "osnet_ain_x1_0" in str(err.value)


# --------------------------------------------------------------------------- ImageNet weights
def _imagenet_file(tmp_path, name, legacy=True):
    """A torchreid-layout ImageNet file: the backbone plus fc and a 1000-class classifier."""
    torch.manual_seed(5)
    state = OSNetBackbone(name).state_dict()
    state.update({"fc.0.weight": torch.randn(512, state["conv5.bn.weight"].shape[0]), "fc.0.bias": torch.zeros(512),
                  "classifier.weight": torch.randn(1000, 512), "classifier.bias": torch.zeros(1000)})
    path = tmp_path / f"{name}_imagenet.pth"
    torch.save(state, path, _use_new_zipfile_serialization=not legacy)
    return path, state


def test_imagenet_file_from_pretrained_path_loads_every_backbone_tensor(tmp_path):
    path, state = _imagenet_file(tmp_path, "osnet_x0_25")
    bb = build_backbone(_cfg(PRETRAINED=True, PRETRAINED_PATH=str(path)))
    for key, value in bb.state_dict().items():
        assert torch.equal(value, state[key]), key


def test_imagenet_file_of_another_variant_names_the_one_it_fits(tmp_path):
    path, _ = _imagenet_file(tmp_path, "osnet_ain_x0_25")
    with pytest.raises(PretrainedWeightsError) as err:
        build_backbone(_cfg(PRETRAINED=True, PRETRAINED_PATH=str(path)))
    msg = str(err.value)
    assert "osnet_x0_25" in msg and "set MODEL.BACKBONE.NAME osnet_ain_x0_25" in msg and "\n" not in msg


def test_offline_without_local_file_names_the_url_and_pretrained_path(tmp_path, monkeypatch):
    import gdown

    def no_network(*args, **kwargs):
        raise ConnectionError("Failed to resolve 'drive.google.com'")

    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "hub"))
    monkeypatch.setattr(gdown, "download", no_network)
    with pytest.raises(PretrainedWeightsError) as err:
        build_backbone(_cfg("osnet_ain_x1_0", PRETRAINED=True))
    msg = str(err.value)
    assert "https://drive.google.com/uc?id=1-CaioD9NaqbHK_kzSMW8VE4_3KcsRjEo" in msg
    assert "MODEL.BACKBONE.PRETRAINED_PATH" in msg and "ConnectionError" in msg and "\n" not in msg
    assert not (tmp_path / "hub" / "checkpoints" / "osnet_ain_x1_0_imagenet.pth").exists()


def test_cached_download_is_used_without_network(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "_hub_dir", str(tmp_path / "hub"))
    (tmp_path / "hub" / "checkpoints").mkdir(parents=True)
    path, state = _imagenet_file(tmp_path / "hub" / "checkpoints", "osnet_x0_5", legacy=False)
    bb = OSNetBackbone("osnet_x0_5", pretrained=True)
    assert torch.equal(bb.conv5.conv.weight, state["conv5.conv.weight"])


def test_missing_pretrained_path_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pth.*PRETRAINED False"):
        OSNetBackbone("osnet_x0_25", pretrained=True, pretrained_path=str(tmp_path / "nope.pth"))


# --------------------------------------------------------------------------- with our heads and losses
@pytest.mark.parametrize("head", sorted(HEAD_DEFAULTS))
def test_trains_with_every_head_bnneck_and_the_pair_losses(head):
    cfg = _cfg("osnet_ain_x0_25")
    cfg.MODEL.HEADS.NAME = head
    cfg.MODEL.HEADS.NUM_CLASSES = 3
    cfg.MODEL.LOSSES.NAMES = ["identity", "triplet", "pair_circle"]
    torch.manual_seed(0)
    model = build_model(cfg).train()
    images = torch.randint(0, 256, (6, 3, 64, 32), dtype=torch.uint8)
    losses = model(images, torch.tensor([0, 0, 1, 1, 2, 2]))
    assert set(losses) == {"loss_id", "loss_triplet", "loss_pair_circle"}
    sum(losses.values()).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing and all(torch.isfinite(v) for v in losses.values())
    assert model.backbone.conv1.conv.weight.grad.abs().sum() > 0


def test_bf16_autocast_and_channels_last_give_the_fp32_features():
    torch.manual_seed(0)
    model = build_model(_cfg("osnet_ibn_x1_0")).eval()
    images = torch.randint(0, 256, (2, 3, 64, 32), dtype=torch.uint8)
    with torch.no_grad():
        ref = model(images)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = model(images).float()
        last = model.to(memory_format=torch.channels_last)(images)
    assert torch.allclose(last, ref, atol=1e-4)
    assert torch.nn.functional.cosine_similarity(half, ref).min() > 0.99
