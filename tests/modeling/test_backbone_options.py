"""ResNet-IBN-a, the stem pooling option and non-local blocks of the ResNet backbone."""

import pytest
import torch
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, Bottleneck

from reid.modeling.backbones import (
    BACKBONE_REGISTRY,
    IBN,
    NonLocalBlock,
    PretrainedWeightsError,
    ResNetBackbone,
    build_backbone,
)
from tests._tools import backbone_cfg


def _cfg(name, **backbone):
    return backbone_cfg(name, **backbone)


# --------------------------------------------------------------------------- IBN-a
def test_ibn_layer_instance_normalises_the_first_half_and_batch_normalises_the_rest():
    torch.manual_seed(0)
    layer = IBN(6)
    with torch.no_grad():
        layer.IN.weight.copy_(torch.tensor([2.0, 0.5, 1.5]))
        layer.IN.bias.copy_(torch.tensor([0.1, -0.2, 0.3]))
        layer.BN.running_mean.copy_(torch.tensor([0.5, -1.0, 2.0]))
        layer.BN.running_var.copy_(torch.tensor([4.0, 0.25, 1.0]))
        layer.BN.weight.copy_(torch.tensor([1.0, 3.0, -1.0]))
        layer.BN.bias.copy_(torch.tensor([0.0, 1.0, 2.0]))
    layer.eval()
    x = torch.randn(2, 6, 5, 4) * 3 + 1
    out = layer(x)
    first, rest = x[:, :3], x[:, 3:]
    # Instance norm: per image and channel, over the spatial positions, biased variance.
    mean = first.mean(dim=(2, 3), keepdim=True)
    var = first.var(dim=(2, 3), unbiased=False, keepdim=True)
    expected_in = (first - mean) / torch.sqrt(var + 1e-5) * layer.IN.weight.view(1, 3, 1, 1) \
        + layer.IN.bias.view(1, 3, 1, 1)
    bn = layer.BN
    expected_bn = (rest - bn.running_mean.view(1, 3, 1, 1)) / torch.sqrt(bn.running_var.view(1, 3, 1, 1) + 1e-5) \
        * bn.weight.view(1, 3, 1, 1) + bn.bias.view(1, 3, 1, 1)
    torch.testing.assert_close(out[:, :3], expected_in, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out[:, 3:], expected_bn, rtol=1e-5, atol=1e-5)
    assert layer.num_features == 6


@pytest.mark.slow
@pytest.mark.parametrize("name, block, blocks", [
    ("resnet18_ibn_a", BasicBlock, (2, 2, 2, 2)),
    ("resnet34_ibn_a", BasicBlock, (3, 4, 6, 3)),
    ("resnet50_ibn_a", Bottleneck, (3, 4, 6, 3)),
    ("resnet101_ibn_a", Bottleneck, (3, 4, 23, 3)),
])
def test_ibn_a_puts_ibn_in_the_first_norm_of_every_block_of_stages_1_to_3(name, block, blocks):
    bb = ResNetBackbone(name, last_stride=1)
    for stage_index, (stage, count) in enumerate(zip(bb.stages(), blocks)):
        assert len(stage) == count
        for b in stage:
            assert isinstance(b, block)
            if stage_index < 3:
                assert isinstance(b.bn1, IBN)
                assert b.bn1.half == b.conv1.out_channels // 2 == b.bn1.IN.num_features
                assert b.bn1.BN.num_features == b.conv1.out_channels - b.bn1.half
                # Only the first norm: the others stay plain BatchNorm.
                assert isinstance(b.bn2, torch.nn.BatchNorm2d)
            else:
                assert isinstance(b.bn1, torch.nn.BatchNorm2d)
    assert isinstance(bb.bn1, torch.nn.BatchNorm2d)  # stem unchanged


@pytest.mark.slow
def test_ibn_a_state_dict_uses_the_ibn_net_release_names():
    keys = set(ResNetBackbone("resnet50_ibn_a").state_dict())
    for key in ("layer1.0.bn1.IN.weight", "layer1.0.bn1.IN.bias", "layer3.5.bn1.BN.running_var",
                "layer2.0.downsample.1.weight", "layer4.2.bn1.running_mean"):
        assert key in keys, key
    assert not any(k.startswith("layer4") and ".IN." in k for k in keys)
    assert "layer1.0.bn1.weight" not in keys


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet18_ibn_a", "resnet50_ibn_a"])
def test_ibn_backbones_are_registered_and_honour_last_stride(name):
    assert name in BACKBONE_REGISTRY
    x = torch.randn(1, 3, 64, 32)
    one = build_backbone(_cfg(name, LAST_STRIDE=1)).eval()(x)
    two = build_backbone(_cfg(name, LAST_STRIDE=2)).eval()(x)
    assert one.shape[-2:] == (4, 2) and two.shape[-2:] == (2, 1)


@pytest.mark.slow
def test_ibn_local_imagenet_file_loads_and_a_plain_file_is_refused(tmp_path):
    torch.manual_seed(1)
    source = ResNetBackbone("resnet18_ibn_a")
    state = dict(source.state_dict(), **{"fc.weight": torch.zeros(1000, 512), "fc.bias": torch.zeros(1000)})
    path = tmp_path / "resnet18_ibn_a-local.pth"
    torch.save(state, path)
    bb = build_backbone(_cfg("resnet18_ibn_a", PRETRAINED=True, PRETRAINED_PATH=str(path)))
    for key in ("layer1.0.bn1.IN.weight", "layer3.1.bn1.BN.running_mean", "layer4.1.conv2.weight"):
        assert torch.equal(bb.state_dict()[key], state[key])
    plain = tmp_path / "plain.pth"
    torch.save(ResNetBackbone("resnet18").state_dict(), plain)
    with pytest.raises(PretrainedWeightsError) as err:
        build_backbone(_cfg("resnet18_ibn_a", PRETRAINED=True, PRETRAINED_PATH=str(plain)))
    msg = str(err.value)
    assert "no IBN layers" in msg and "resnet18_ibn_a-2f571257.pth" in msg and "\n" not in msg
    with pytest.raises(PretrainedWeightsError, match="set MODEL.BACKBONE.NAME resnet18_ibn_a"):
        build_backbone(_cfg("resnet18", PRETRAINED=True, PRETRAINED_PATH=str(path)))


@pytest.mark.slow
def test_ibn_offline_error_names_the_release_url_and_the_local_file_key(offline_hub):
    with pytest.raises(PretrainedWeightsError) as err:
        build_backbone(_cfg("resnet50_ibn_a", PRETRAINED=True))
    msg = str(err.value)
    assert "https://github.com/XingangPan/IBN-Net/releases/download/v1.0/resnet50_ibn_a-d9d0bb7b.pth" in msg
    assert "MODEL.BACKBONE.PRETRAINED_PATH" in msg and "IBN-Net" in msg


# --------------------------------------------------------------------------- stem pooling
@pytest.mark.slow
def test_stem_pool_pad_and_ceil_are_torchvisions_and_fastreids_max_pools():
    x = torch.arange(2 * 8 * 6, dtype=torch.float32).reshape(1, 2, 8, 6).flip(-1) % 7
    pad = ResNetBackbone("resnet18", stem_pool="pad").maxpool(x)
    ceil = ResNetBackbone("resnet18", stem_pool="ceil").maxpool(x)
    assert pad.shape == ceil.shape == (1, 2, 4, 3)
    # "pad": windows rows/cols [2i-1, 2i+1]; "ceil": [2i, 2i+2], clipped at the border.
    padded = F.pad(x, (1, 1, 1, 1), value=float("-inf"))
    torch.testing.assert_close(pad, torch.stack([torch.stack([padded[..., 2 * i:2 * i + 3, 2 * j:2 * j + 3].amax((-2, -1))
                                                             for j in range(3)], -1) for i in range(4)], -2))
    torch.testing.assert_close(ceil, torch.stack([torch.stack([x[..., 2 * i:2 * i + 3, 2 * j:2 * j + 3].amax((-2, -1))
                                                              for j in range(3)], -1) for i in range(4)], -2))
    with pytest.raises(ValueError, match="MODEL.BACKBONE.STEM_POOL"):
        ResNetBackbone("resnet18", stem_pool="floor")


# --------------------------------------------------------------------------- non-local
def test_non_local_block_follows_the_dot_product_equation():
    torch.manual_seed(2)
    block = NonLocalBlock(4, embed_channels=2).eval()
    with torch.no_grad():
        block.out_bn.weight.uniform_(0.5, 1.5)
        block.out_bn.bias.normal_()
    x = torch.randn(2, 4, 3, 2)
    out = block(x)
    expected = torch.empty_like(x)
    n = 6
    for b in range(2):
        flat = x[b].reshape(4, n)
        theta = block.theta.weight.view(2, 4) @ flat + block.theta.bias.view(2, 1)
        phi = block.phi.weight.view(2, 4) @ flat + block.phi.bias.view(2, 1)
        g = block.g.weight.view(2, 4) @ flat + block.g.bias.view(2, 1)
        y = torch.zeros(2, n)
        for i in range(n):  # Eq. (1): y_i = 1/N sum_j f(x_i, x_j) g(x_j), f = theta_i . phi_j
            for j in range(n):
                y[:, i] += (theta[:, i] @ phi[:, j]) * g[:, j] / n
        wz = block.out_conv.weight.view(4, 2) @ y + block.out_conv.bias.view(4, 1)
        bn = block.out_bn
        z = (wz - bn.running_mean.view(4, 1)) / torch.sqrt(bn.running_var.view(4, 1) + bn.eps) \
            * bn.weight.view(4, 1) + bn.bias.view(4, 1)
        expected[b] = (z + flat).view(4, 3, 2)
    torch.testing.assert_close(out, expected, rtol=1e-4, atol=1e-5)


def test_new_non_local_block_is_the_identity_and_default_width_is_half():
    x = torch.randn(1, 8, 4, 2)
    block = NonLocalBlock(8)
    assert block.embed_channels == 4 and block.theta.out_channels == 4
    torch.testing.assert_close(block.eval()(x), x)


@pytest.mark.slow
def test_non_local_blocks_follow_the_last_residual_blocks_of_each_stage():
    bb = ResNetBackbone("resnet50", non_local=[0, 2, 3, 0], non_local_embed=1)
    assert [len(m) for m in bb.non_local] == [0, 2, 3, 0]
    assert bb.non_local[2][0].theta.out_channels == 1 and bb.non_local[1][0].theta.in_channels == 512
    order = []
    for i, block in enumerate(bb.layer2):
        block.register_forward_hook(lambda *a, i=i: order.append(f"block{i}"))
    for i, block in enumerate(bb.non_local[1]):
        block.register_forward_hook(lambda *a, i=i: order.append(f"nl{i}"))
    bb.eval()(torch.randn(1, 3, 64, 32))
    assert order == ["block0", "block1", "block2", "nl0", "block3", "nl1"]
    # Without non-local blocks the state dict is torchvision's.
    assert not any(k.startswith("non_local") for k in ResNetBackbone("resnet18").state_dict())


def test_non_local_settings_are_checked():
    with pytest.raises(ValueError, match="4 non-negative"):
        ResNetBackbone("resnet18", non_local=[0, 1])
    with pytest.raises(ValueError, match="stage 2, which has only 2"):
        ResNetBackbone("resnet18", non_local=[0, 3, 0, 0])


@pytest.mark.slow
def test_imagenet_file_leaves_non_local_blocks_at_identity_without_warnings(tmp_path):
    path = tmp_path / "r18.pth"
    torch.save(ResNetBackbone("resnet18").state_dict(), path)
    bb = ResNetBackbone("resnet18", non_local=[0, 1, 0, 0])
    missing, unexpected = bb.load_imagenet(str(path))
    assert missing == [] and unexpected == []
    assert float(bb.non_local[1][0].out_bn.weight.detach().abs().sum()) == 0.0


def test_fixed_gem_is_the_generalised_mean_with_p_fixed_and_no_tensor():
    from reid.modeling.pooling import build_pooling

    x = torch.rand(2, 3, 4, 5) + 0.1
    pool = build_pooling("gem_fixed", gem_p=3.0)
    want = x.pow(3).mean(dim=(2, 3)).pow(1 / 3)  # (mean x^p)^(1/p), fast-reid's GeneralizedMeanPooling
    torch.testing.assert_close(pool(x), want)
    assert not list(pool.parameters()) and not pool.state_dict()
    torch.testing.assert_close(build_pooling("gem", gem_p=3.0)(x), want)  # learnable p, same start
    with pytest.raises(ValueError, match="GEM_P must be > 0"):
        build_pooling("gem_fixed", gem_p=0.0)
