"""CLIP image encoders (clip_vit_b16, clip_rn50) and the clipreid meta architecture, at tiny widths.

The references are open_clip's own forward passes (the library the encoders are built from)
and the formulas of CLIP-ReID's changes: SIE on the class token only, overlapping patches,
last stride 1, bilinear resizing of OpenAI's position tables.
"""
from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F

from reid.modeling import build_model
from reid.modeling.backbones import PretrainedWeightsError, build_backbone
from tests._tools import backbone_cfg

open_clip = pytest.importorskip("open_clip", reason="CLIP backbones need open_clip (pip install 'circle-reid[clip]')")

from reid.modeling.backbones import clip as clip_module  # noqa: E402
from reid.modeling.backbones.clip import ClipResNet, ClipSpec, ClipViT  # noqa: E402
from reid.modeling.backbones.pos_embed import patch_grid  # noqa: E402

TINY_VIT = ClipSpec("vit", 32, (3,), 2, 16, 16, "ViT-B-16")
TINY_RN = ClipSpec("resnet", 8, (1, 1, 1, 1), 2, 24, 0, "RN50")
SIZE = (64, 32)


@pytest.fixture(autouse=True)
def _tiny(monkeypatch):
    """The registry names build tiny encoders (same code, other widths)."""
    monkeypatch.setitem(clip_module.CLIP_SPECS, "clip_vit_b16", TINY_VIT)
    monkeypatch.setitem(clip_module.CLIP_SPECS, "clip_rn50", TINY_RN)
    torch.manual_seed(0)


def _pixels(batch: int = 3, seed: int = 0, size=SIZE) -> torch.Tensor:
    return torch.rand(batch, 3, *size, generator=torch.Generator().manual_seed(seed))


def _cfg(name: str, meta: str = "clipreid", sie: bool = False, stride: int = 16, **extra):
    cfg = backbone_cfg(name)
    cfg.MODEL.META_ARCHITECTURE = meta
    cfg.INPUT.SIZE_TRAIN = list(SIZE)
    cfg.INPUT.SIZE_TEST = list(SIZE)
    cfg.MODEL.CLIP.STRIDE_SIZE = [stride, stride]
    cfg.MODEL.CLIP.SIE_CAMERA = sie
    cfg.MODEL.CLIP.NUM_CAMERAS = 3 if sie else 0
    cfg.MODEL.CLIP.SIE_COEF = 1.5
    cfg.MODEL.HEADS.NAME = "linear"
    cfg.MODEL.HEADS.NUM_CLASSES = 4
    cfg.MODEL.LOSSES.NAMES = ["identity", "triplet"]
    for key, value in extra.items():
        cfg.merge_from_list([key, value])
    return cfg


def _randomise(module: torch.nn.Module) -> None:
    """Weights far from initialisation, so that a wrong wiring cannot agree by accident."""
    with torch.no_grad():
        for name, p in module.state_dict().items():
            if p.is_floating_point() and p.dim() > 0:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if name.endswith("running_var") else 0.0))
                if name.endswith("running_var"):
                    p.abs_()


def _open_clip_vit(size=SIZE):
    from open_clip.transformer import QuickGELU, VisionTransformer

    return VisionTransformer(image_size=size, patch_size=16, width=32, layers=3, heads=2, mlp_ratio=4.0,
                             output_dim=16, act_layer=QuickGELU).eval()


def test_vit_without_overlap_and_sie_is_open_clips_forward():
    ours = ClipViT("clip_vit_b16", TINY_VIT, SIZE).eval()
    _randomise(ours)
    ref = _open_clip_vit()
    assert ref.load_state_dict(ours.state_dict(), strict=True)  # OpenAI's names, tensor for tensor
    x = _pixels()
    _, cls, proj = ours.features(x)
    torch.testing.assert_close(proj, ref(x), rtol=0, atol=1e-6)
    assert cls.shape == (3, 32) and ours.forward(x).shape == (3, 32, 1, 1)


def test_overlapping_patches_make_clip_reids_grid():
    assert patch_grid((256, 128), 16, (12, 12)) == (21, 10)
    vit = ClipViT("clip_vit_b16", TINY_VIT, (256, 128), (12, 12))
    assert vit.grid == (21, 10) and vit.positional_embedding.shape == (211, 32)
    assert vit.conv1.stride == (12, 12)


@pytest.mark.parametrize("stride", [[0, 12], [12, 17], [12]])
def test_a_stride_outside_the_patch_is_one_line(stride):
    with pytest.raises(ValueError, match=r"^MODEL.CLIP.STRIDE_SIZE must be between 1 and the patch size 16"):
        ClipViT("clip_vit_b16", TINY_VIT, SIZE, stride)
    with pytest.raises(ValueError, match="smaller than one 16-pixel patch"):
        ClipViT("clip_vit_b16", TINY_VIT, (8, 32), (16, 16))


def test_the_clip_backbone_reads_model_clip_and_not_model_transreid():
    # TransReID's keys set for another model in the same config tree: the CLIP encoder ignores them.
    cfg = _cfg("clip_vit_b16", meta="baseline", **{"MODEL.TRANSREID.STRIDE_SIZE": [8, 8],
                                                   "MODEL.TRANSREID.SIE_CAMERA": True,
                                                   "MODEL.TRANSREID.NUM_CAMERAS": 7})
    plain = build_backbone(cfg)
    assert plain.conv1.stride == (16, 16) and not plain.uses_camids and not hasattr(plain, "sie_embed")
    cfg = _cfg("clip_vit_b16", meta="baseline", sie=True, stride=12)
    vit = build_backbone(cfg)
    assert vit.conv1.stride == (12, 12) and vit.grid == patch_grid(SIZE, 16, (12, 12))
    assert vit.sie_embed.shape == (3, 32) and vit.num_cameras == 3 and vit.sie_coef == 1.5
    cfg.MODEL.CLIP.NUM_CAMERAS = 0  # SIE on, but no cameras counted: the message names the key read
    with pytest.raises(ValueError, match=r"^MODEL.CLIP.SIE_CAMERA needs camera ids from at least 2 cameras, but "
                                         r"MODEL.CLIP.NUM_CAMERAS is 0"):
        build_backbone(cfg)
    with pytest.raises(ValueError, match=r"^MODEL.CLIP.SIE_CAMERA: clip_rn50 has no camera embedding"):
        build_backbone(_cfg("clip_rn50", meta="baseline", sie=True))


def test_sie_is_added_to_the_class_token_alone():
    vit = ClipViT("clip_vit_b16", TINY_VIT, SIZE, num_cameras=3, sie_coef=1.5).eval()
    _randomise(vit)
    x, cams = _pixels(4), torch.tensor([0, 2, 1, 2])
    got = vit.features(x, cams)
    plain = ClipViT("clip_vit_b16", TINY_VIT, SIZE).eval()
    for cam in range(3):
        state = {k: v for k, v in vit.state_dict().items() if k != "sie_embed"}
        state["class_embedding"] = vit.class_embedding + 1.5 * vit.sie_embed[cam]  # Eq.: x_cls + lambda S(c)
        plain.load_state_dict(state)
        rows = cams == cam
        want = plain.features(x[rows])
        for g, w in zip(got, want):
            torch.testing.assert_close(g[rows], w, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="camids"):
        vit.features(x)
    with pytest.raises(ValueError, match=r"Camera ids 0\.\.5 are outside the 3 cameras"):
        vit.features(x, torch.tensor([0, 5, 1, 2]))


def test_resnet_keeps_the_last_stage_resolution_and_the_rest_is_open_clips():
    from open_clip.modified_resnet import ModifiedResNet

    ours = ClipResNet("clip_rn50", TINY_RN, SIZE).eval()
    _randomise(ours)
    ref = ModifiedResNet([1, 1, 1, 1], 24, 2, image_size=SIZE[0], width=8).eval()
    state = {k: v for k, v in ours.state_dict().items() if k != "attnpool.positional_embedding"}
    missing = ref.load_state_dict(state, strict=False).missing_keys
    assert missing == ["attnpool.positional_embedding"]
    x = _pixels()
    x3, x4, proj = ours.features(x)
    assert x4.shape[-2:] == (SIZE[0] // 16, SIZE[1] // 16)  # last stride 1
    torch.testing.assert_close(x3, ref.layer3(ref.layer2(ref.layer1(ref.stem(x)))), rtol=0, atol=0)
    # The pooled projection is the attention pooling's output for the mean query.
    pool = ours.attnpool
    tokens = x4.flatten(2).permute(2, 0, 1)
    tokens = torch.cat([tokens.mean(0, keepdim=True), tokens]) + pool.positional_embedding[:, None]
    q = F.linear(tokens[:1], pool.q_proj.weight, pool.q_proj.bias)
    k = F.linear(tokens, pool.k_proj.weight, pool.k_proj.bias)
    v = F.linear(tokens, pool.v_proj.weight, pool.v_proj.bias)
    heads, width = pool.num_heads, tokens.shape[-1]
    q, k, v = (t.reshape(t.shape[0], -1, heads, width // heads).permute(1, 2, 0, 3) for t in (q, k, v))
    attn = torch.softmax(q @ k.transpose(-1, -2) / (width // heads) ** 0.5, dim=-1) @ v
    want = pool.c_proj(attn.permute(0, 2, 1, 3).reshape(x.shape[0], width))
    torch.testing.assert_close(proj, want, rtol=1e-5, atol=1e-5)


def _openai_file(tmp_path, model: torch.nn.Module, prefix: str = "visual.", name: str = "clip.pt") -> str:
    state = {prefix + k: v.half() for k, v in model.state_dict().items()}
    state["token_embedding.weight"] = torch.zeros(10, 4)  # the text side, ignored
    path = str(tmp_path / name)
    torch.save(state, path)
    return path


def test_openai_vit_file_loads_with_its_14x14_grid_resized_bilinearly(tmp_path):
    src = _open_clip_vit(size=(224, 224))
    _randomise(src)
    path = _openai_file(tmp_path, src)
    vit = ClipViT("clip_vit_b16", TINY_VIT, (256, 128), (12, 12), num_cameras=2)
    vit.load_openai(path)
    grid = src.positional_embedding.detach().half().float()[1:].reshape(1, 14, 14, -1).permute(0, 3, 1, 2)
    want = F.interpolate(grid, size=(21, 10), mode="bilinear", align_corners=False).permute(0, 2, 3, 1).reshape(210, -1)
    torch.testing.assert_close(vit.positional_embedding.detach()[1:], want, rtol=0, atol=1e-6)
    torch.testing.assert_close(vit.proj.detach(), src.proj.detach().half().float())


def test_openai_resnet_file_loads_with_its_attention_positions_resized(tmp_path):
    from open_clip.modified_resnet import ModifiedResNet

    src = ModifiedResNet([1, 1, 1, 1], 24, 2, image_size=224, width=8)
    _randomise(src)
    rn = ClipResNet("clip_rn50", TINY_RN, (256, 128))
    rn.load_openai(_openai_file(tmp_path, src))
    assert rn.attnpool.positional_embedding.shape == (16 * 8 + 1, 256)
    torch.testing.assert_close(rn.layer4[0].conv1.weight.detach(), src.layer4[0].conv1.weight.detach().half().float())


def test_clip_reid_image_encoder_tensors_load_as_pretrained_weights(tmp_path):
    src = ClipViT("clip_vit_b16", TINY_VIT, SIZE)
    _randomise(src)
    path = _openai_file(tmp_path, src, prefix="image_encoder.")
    vit = ClipViT("clip_vit_b16", TINY_VIT, SIZE)
    vit.load_openai(path)
    torch.testing.assert_close(vit.conv1.weight.detach(), src.conv1.weight.detach().half().float())


def test_a_torchscript_archive_is_read_as_openai_publishes_it(tmp_path):
    class Holder(torch.nn.Module):
        def __init__(self, visual):
            super().__init__()
            self.visual = visual

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x

    src = ClipViT("clip_vit_b16", TINY_VIT, SIZE)
    _randomise(src)
    holder = Holder(torch.nn.Module())
    for name, p in src.named_parameters():  # a plain parameter tree with the encoder's names
        owner = holder.visual
        *path, leaf = name.split(".")
        for part in path:
            if not hasattr(owner, part):
                owner.add_module(part, torch.nn.Module())
            owner = getattr(owner, part)
        owner.register_parameter(leaf, torch.nn.Parameter(p.detach().clone()))
    path = str(tmp_path / "ViT-B-16.pt")
    torch.jit.save(torch.jit.script(holder), path)
    vit = ClipViT("clip_vit_b16", TINY_VIT, SIZE)
    vit.load_openai(path)
    torch.testing.assert_close(vit.proj.detach(), src.proj.detach())


def test_a_clip_file_of_another_width_or_patch_size_is_refused_in_one_line(tmp_path):
    wide = ClipViT("w", ClipSpec("vit", 64, (3,), 2, 16, 16), SIZE)
    coarse = ClipViT("p", ClipSpec("vit", 32, (3,), 2, 16, 14), SIZE, (14, 14))
    for other, what in ((wide, "width 64 and 16-pixel"), (coarse, "width 32 and 14-pixel")):
        path = _openai_file(tmp_path, other, name=f"{other.name}.pt")
        with pytest.raises(PretrainedWeightsError) as info:
            ClipViT("clip_vit_b16", TINY_VIT, SIZE).load_openai(path)
        message = str(info.value)
        assert what in message and "clip_vit_b16 has width 32 and 16-pixel" in message
        assert "ViT-B-16" in message and "\n" not in message


def test_a_file_without_an_image_encoder_is_refused_in_one_line(tmp_path):
    path = str(tmp_path / "text.pt")
    torch.save({"token_embedding.weight": torch.zeros(3, 2)}, path)
    with pytest.raises(PretrainedWeightsError, match=r"holds no CLIP image encoder .*'visual\.'.*OpenAI's CLIP ViT-B-16"):
        ClipViT("clip_vit_b16", TINY_VIT, SIZE).load_openai(path)


def test_a_failed_download_names_the_source_and_the_local_setting(monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr(open_clip.pretrained, "download_pretrained", offline)
    cfg = _cfg("clip_vit_b16", meta="baseline")
    cfg.MODEL.BACKBONE.PRETRAINED = True
    with pytest.raises(PretrainedWeightsError) as info:
        build_backbone(cfg)
    message = str(info.value)
    assert "vit_base_patch16_clip_224.openai" in message and "MODEL.BACKBONE.PRETRAINED_PATH" in message
    assert "OSError" in message and "\n" not in message


def test_without_open_clip_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "open_clip", None)
    with pytest.raises(ImportError, match=r"pip install 'circle-reid\[clip\]'"):
        build_backbone(_cfg("clip_vit_b16", meta="baseline"))


@pytest.mark.parametrize("neck_feat", ["before", "after"])
def test_clipreid_test_feature_is_the_two_features_concatenated(neck_feat):
    model = build_model(_cfg("clip_vit_b16", sie=True, stride=12, **{"MODEL.HEADS.NECK_FEAT": neck_feat})).eval()
    _randomise(model)
    x, cams = _pixels(4) * 255, torch.tensor([0, 1, 2, 0])
    last, feat, proj = model.branch_features(x, cams)
    if neck_feat == "after":
        feat, proj = model.neck(feat), model.neck_proj(proj)
    torch.testing.assert_close(model(x, camids=cams), torch.cat([feat, proj], dim=1))
    assert model.feature_dim == 32 + 16 and model.uses_camids and model.num_cameras == 3


def test_clipreid_trains_both_heads_and_the_three_triplet_features():
    from reid.modeling.losses import cross_entropy_loss, triplet_loss

    model = build_model(_cfg("clip_rn50", **{"MODEL.LOSSES.ID.LABEL_SMOOTH": 0.1}))
    _randomise(model)
    model.train()
    x, targets = _pixels(8, seed=1) * 255, torch.arange(8) % 4
    losses = model(x, targets)
    last, feat, proj = model.branch_features(x)
    ce = [cross_entropy_loss(h(n(f), targets), targets, label_smooth=0.1)
          for h, n, f in ((model.head, model.neck, feat), (model.proj_head, model.neck_proj, proj))]
    tri = [triplet_loss(f, targets, margin=0.3) for f in (last, feat, proj)]
    torch.testing.assert_close(losses["loss_id"], torch.stack(ce).mean(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(losses["loss_triplet"], torch.stack(tri).mean(), rtol=1e-5, atol=1e-5)
    sum(losses.values()).backward()
    assert model.proj_head.weight.grad is not None and model.backbone.attnpool.c_proj.weight.grad is not None


def test_clipreid_refuses_other_backbones_and_sie_on_the_resnet():
    with pytest.raises(ValueError, match="clipreid needs a CLIP backbone .*clip_vit_b16, clip_rn50"):
        build_model(_cfg("resnet18"))
    with pytest.raises(ValueError, match="clip_rn50 has no camera embedding"):
        build_model(_cfg("clip_rn50", sie=True))


@pytest.mark.parametrize("kind", ["fifo", "folder", "missing"])
def test_a_path_that_is_not_a_file_is_one_line_without_blocking(tmp_path, kind):
    import os

    path = tmp_path / "ViT-B-16.pt"
    if kind == "fifo":
        os.mkfifo(path)  # opening it to probe for a zip archive would wait for a writer forever
    elif kind == "folder":
        path.mkdir()
    with pytest.raises(PretrainedWeightsError) as info:
        ClipViT("clip_vit_b16", TINY_VIT, SIZE).load_openai(str(path))
    message = str(info.value)
    assert str(path) in message and "MODEL.BACKBONE.PRETRAINED False" in message and "\n" not in message
