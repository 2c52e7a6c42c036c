"""TransReID's ViT (overlapping patches, position-embedding resizing, SIE) and JPM meta architecture.

Fast tests shrink the ViT families to 2 blocks of width 32 (``small_vits``); the layout rules
do not depend on the width.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from reid.config import get_cfg
from reid.modeling import build_model
from reid.modeling.backbones import PretrainedWeightsError, ReIDViT, VIT_SPECS, build_backbone
from reid.modeling.backbones.vit import Attention, ViTSpec, resize_pos_embed
from reid.modeling.meta_arch.transreid import jigsaw_order

SIZE = (64, 32)


@pytest.fixture(autouse=True)
def small_vits(monkeypatch):
    for name in list(VIT_SPECS):
        monkeypatch.setitem(VIT_SPECS, name, ViTSpec(32, 2, 2, url=VIT_SPECS[name].url))


def _cfg(arch="transreid", stride=(16, 16), sie=False, cameras=0, **extra):
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = arch
    cfg.MODEL.BACKBONE.NAME = "vit_base_transreid"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.TRANSREID.STRIDE_SIZE = list(stride)
    cfg.MODEL.TRANSREID.SIE_CAMERA = sie
    cfg.MODEL.TRANSREID.NUM_CAMERAS = cameras
    cfg.INPUT.SIZE_TRAIN = list(SIZE)
    cfg.INPUT.SIZE_TEST = list(SIZE)
    cfg.merge_from_list([x for kv in extra.items() for x in kv])
    return cfg


def _pixels(batch=2, seed=0):
    return torch.randint(0, 256, (batch, 3, *SIZE), generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.parametrize("size, stride, grid", [((256, 128), 16, (16, 8)), ((256, 128), 12, (21, 10)),
                                                ((64, 32), 12, (5, 2)), ((384, 128), 12, (31, 10))])
def test_overlapping_patch_grid_is_floor_of_size_minus_patch_over_stride_plus_one(size, stride, grid):
    vit = ReIDViT("vit_base_transreid", img_size=size, stride=(stride, stride))
    assert vit.patch_embed.grid == grid == ((size[0] - 16) // stride + 1, (size[1] - 16) // stride + 1)
    assert vit.pos_embed.shape == (1, 1 + grid[0] * grid[1], 32)
    with torch.no_grad():
        assert vit.forward_tokens(torch.randn(1, 3, *size)).shape == (1, 1 + grid[0] * grid[1], 32)


def test_attention_is_softmax_of_scaled_dot_products():
    torch.manual_seed(0)
    attn = Attention(8, num_heads=2, qkv_bias=True, qk_scale=0.3)
    x = torch.randn(2, 5, 8)
    q, k, v = attn.qkv(x).reshape(2, 5, 3, 2, 4).permute(2, 0, 3, 1, 4)
    weights = torch.softmax(q @ k.transpose(-2, -1) * 0.3, dim=-1)  # Vaswani et al. Eq. 1, scale 0.3
    expected = attn.proj((weights @ v).transpose(1, 2).reshape(2, 5, 8))
    torch.testing.assert_close(attn(x), expected, rtol=1e-5, atol=1e-6)


def test_position_embedding_resize_keeps_the_class_token_and_interpolates_the_grid():
    side = 4
    yy, xx = torch.meshgrid(torch.arange(side, dtype=torch.float32), torch.arange(side, dtype=torch.float32),
                            indexing="ij")
    grid = torch.stack([yy, xx], dim=-1).reshape(1, side * side, 2)
    pos = torch.cat([torch.tensor([[[7.0, -7.0]]]), grid], dim=1)
    out = resize_pos_embed(pos, (8, 2))
    assert out.shape == (1, 1 + 16, 2)
    torch.testing.assert_close(out[0, 0], torch.tensor([7.0, -7.0]))
    new = out[0, 1:].reshape(8, 2, 2)
    # Bilinear with half-pixel centres: output row i samples input row (i + 0.5) * 4 / 8 - 0.5, clamped.
    rows = torch.clamp((torch.arange(8) + 0.5) * side / 8 - 0.5, 0, side - 1)
    torch.testing.assert_close(new[:, 0, 0], rows)
    cols = torch.clamp((torch.arange(2) + 0.5) * side / 2 - 0.5, 0, side - 1)
    torch.testing.assert_close(new[0, :, 1], cols)


def test_sie_adds_lambda_times_the_camera_embedding_to_every_token():
    torch.manual_seed(1)
    vit = ReIDViT("vit_base_transreid", img_size=SIZE, num_cameras=3, sie_coef=2.5).eval()
    plain = ReIDViT("vit_base_transreid", img_size=SIZE).eval()
    plain.load_state_dict({k: v for k, v in vit.state_dict().items() if k != "sie_embed"})
    x = torch.randn(2, 3, *SIZE)
    camids = torch.tensor([2, 0])
    with torch.no_grad():
        expected = plain.embed(x) + 2.5 * vit.sie_embed[camids]  # TransReID Eq. 5
        torch.testing.assert_close(vit.embed(x, camids), expected)
    assert vit.sie_embed.shape == (3, 1, 32) and vit.uses_camids and not plain.uses_camids
    with pytest.raises(ValueError, match="camids"):
        vit(x)
    with pytest.raises(ValueError, match=r"Camera ids 0\.\.5 are outside the 3 cameras"):
        vit(x, torch.tensor([5, 0]))


def test_sie_without_camera_ids_in_the_data_is_one_line():
    with pytest.raises(ValueError) as info:
        build_model(_cfg("baseline", sie=True, cameras=1))
    message = str(info.value)
    assert "\n" not in message and "SIE_CAMERA" in message and "set SIE_CAMERA False" in message


@pytest.mark.parametrize("num, shift, groups, expected", [
    (8, 3, 2, [2, 6, 3, 7, 4, 0, 5, 1]),  # rotate left by shift - 1, then interleave the 2 halves
    (7, 5, 2, [4, 1, 5, 2, 6, 3, 0, 2]),  # 7 is odd: the second-to-last patch is repeated at the end
    (6, 1, 3, [0, 2, 4, 1, 3, 5]),  # shift 1 moves nothing
])
def test_jigsaw_order_shifts_then_shuffles_as_transreid(num, shift, groups, expected):
    assert jigsaw_order(num, shift, groups).tolist() == expected


def test_jpm_features_layout_and_test_feature():
    torch.manual_seed(2)
    model = build_model(_cfg(**{"MODEL.HEADS.NECK_FEAT": "before"})).eval()
    assert model.parts == 4 and model.feature_dim == 5 * 32
    x = _pixels()
    with torch.no_grad():
        global_feat, local_feats = model.branch_features(x)
        feat = model(x)
        tokens = model.backbone.forward_tokens(model.preprocess(x), last=False)
        # Local branch 2 by hand: the class token and patches 2 * (8 // 4) .. of the shuffled sequence.
        order = jigsaw_order(8, 5, 2) + 1
        part = tokens[:, order[4:6]]
        expected_local = model.b2(torch.cat([tokens[:, :1], part], dim=1))[:, 0]
    torch.testing.assert_close(local_feats[2], expected_local, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(feat[:, :32], global_feat)
    torch.testing.assert_close(feat[:, 32 * 3:32 * 4], local_feats[2] / 4)
    with torch.no_grad():  # an empty batch (e.g. a frame without detections) gives [0, D], as ONNX does
        assert model(x[:0]).shape == (0, 5 * 32)
    # The ViT's own last block and norm are kept for TransReID's files but unused: frozen.
    assert not any(p.requires_grad for p in model.backbone.blocks[-1].parameters())
    assert all(p.requires_grad for p in model.b1.parameters())


def test_jpm_losses_are_half_global_half_mean_of_locals():
    torch.manual_seed(3)
    cfg = _cfg(**{"MODEL.HEADS.NAME": "linear", "MODEL.HEADS.NUM_CLASSES": 3,
                  "MODEL.LOSSES.NAMES": ["identity", "triplet"], "MODEL.LOSSES.TRIPLET.SOFT_MARGIN": True})
    model = build_model(cfg).train()
    x, y = _pixels(4), torch.tensor([0, 0, 1, 1])
    torch.manual_seed(9)
    losses = model(x, y)
    torch.manual_seed(9)  # same drop-path draws
    g, locs = model.branch_features(x)
    ce = [F.cross_entropy(model.head(model.neck(g), y), y)]
    ce += [F.cross_entropy(h(n(f), y), y) for h, n, f in zip(model.local_heads, model.local_necks, locs)]
    expected_id = 0.5 * ce[0] + 0.5 * torch.stack(ce[1:]).mean()
    torch.testing.assert_close(losses["loss_id"], expected_id, rtol=1e-4, atol=1e-5)
    losses["loss_id"].backward()
    assert model.b2[0].attn.qkv.weight.grad is not None and model.local_heads[3].weight.grad is not None


def test_sie_model_takes_camera_ids_in_train_and_eval():
    torch.manual_seed(4)
    cfg = _cfg(sie=True, cameras=4, **{"MODEL.HEADS.NUM_CLASSES": 2})
    model = build_model(cfg)
    assert model.uses_camids
    losses = model(_pixels(2), torch.tensor([0, 1]), camids=torch.tensor([0, 3]))
    assert torch.isfinite(losses["loss_id"])
    model.eval()
    with torch.no_grad():
        a = model(_pixels(1), camids=torch.tensor([0]))
        b = model(_pixels(1), camids=torch.tensor([1]))
    assert not torch.allclose(a, b)


def test_imagenet_files_load_with_position_resize_and_distillation_token_dropped(tmp_path):
    torch.manual_seed(5)
    source = ReIDViT("vit_base_transreid", img_size=(64, 64), stride=(16, 16))  # a 4 x 4 "ImageNet" grid
    state = dict(source.state_dict())
    state["head.weight"], state["head.bias"] = torch.randn(10, 32), torch.randn(10)
    torch.save(state, tmp_path / "vit.pth")
    vit = build_backbone(_cfg("baseline", stride=(12, 12), **{"MODEL.BACKBONE.PRETRAINED": True,
                                                              "MODEL.BACKBONE.PRETRAINED_PATH": str(tmp_path / "vit.pth")}))
    torch.testing.assert_close(vit.blocks[1].mlp.fc2.weight, source.blocks[1].mlp.fc2.weight)
    torch.testing.assert_close(vit.pos_embed, resize_pos_embed(source.pos_embed.detach(), (5, 2)))
    # DeiT's distilled files: {"model": ...} with a distillation token at position 1.
    deit = dict(state)
    deit["dist_token"] = torch.randn(1, 1, 32)
    deit["pos_embed"] = torch.cat([state["pos_embed"][:, :1], torch.randn(1, 1, 32), state["pos_embed"][:, 1:]], 1)
    torch.save({"model": deit}, tmp_path / "deit.pth")
    vit2 = build_backbone(_cfg("baseline", stride=(12, 12), **{"MODEL.BACKBONE.PRETRAINED": True,
                                                               "MODEL.BACKBONE.PRETRAINED_PATH": str(tmp_path / "deit.pth")}))
    torch.testing.assert_close(vit2.pos_embed, vit.pos_embed)


def test_person_pretrained_teacher_files_load_with_their_2_to_1_position_grid(tmp_path):
    torch.manual_seed(6)
    source = ReIDViT("vit_base_transreid", img_size=(64, 32), stride=(16, 16))  # 4 x 2 grid, as 256x128 at 16
    teacher = {f"module.backbone.{k}": v for k, v in source.state_dict().items()}
    teacher["module.head.mlp.0.weight"] = torch.randn(8, 32)  # the self-supervised projection head: not loaded
    torch.save({"teacher": teacher}, tmp_path / "lup.pth")
    vit = build_backbone(_cfg("baseline", stride=(12, 12), **{"MODEL.BACKBONE.PRETRAINED": True,
                                                              "MODEL.BACKBONE.PRETRAINED_PATH": str(tmp_path / "lup.pth")}))
    torch.testing.assert_close(vit.blocks[0].attn.qkv.weight, source.blocks[0].attn.qkv.weight)
    grid = source.pos_embed.detach()[0, 1:].reshape(1, 4, 2, 32).permute(0, 3, 1, 2)  # rows x cols = 4 x 2
    expected = F.interpolate(grid, size=(5, 2), mode="bilinear", align_corners=False).permute(0, 2, 3, 1)
    torch.testing.assert_close(vit.pos_embed[0, 1:], expected.reshape(10, 32))
    torch.testing.assert_close(vit.pos_embed[0, 0], source.pos_embed[0, 0])
    with pytest.raises(PretrainedWeightsError, match="6 patch positions, neither a square grid"):
        resize_pos_embed(torch.zeros(1, 7, 4), (5, 2))


def test_imagenet_file_of_another_width_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(VIT_SPECS, "vit_small_transreid", ViTSpec(48, 2, 2))
    torch.save(ReIDViT("vit_small_transreid", img_size=(64, 64)).state_dict(), tmp_path / "small.pth")
    with pytest.raises(PretrainedWeightsError) as info:
        build_backbone(_cfg("baseline", **{"MODEL.BACKBONE.PRETRAINED": True,
                                           "MODEL.BACKBONE.PRETRAINED_PATH": str(tmp_path / "small.pth")}))
    message = str(info.value)
    assert "\n" not in message and "vit_base_transreid" in message and "(1, 1, 48) in the file but (1, 1, 32)" in message
    # A file of the old linear patchification at another width: the same line, not a reshape error.
    state = torch.load(tmp_path / "small.pth", weights_only=True)
    state["patch_embed.proj.weight"] = state["patch_embed.proj.weight"].reshape(48, -1)
    torch.save(state, tmp_path / "linear.pth")
    with pytest.raises(PretrainedWeightsError, match=r"linear.pth.*in the file but"):
        build_backbone(_cfg("baseline", **{"MODEL.BACKBONE.PRETRAINED": True,
                                           "MODEL.BACKBONE.PRETRAINED_PATH": str(tmp_path / "linear.pth")}))


def test_offline_imagenet_download_names_the_url_and_the_key(offline_hub):
    with pytest.raises(PretrainedWeightsError) as info:
        build_backbone(_cfg("baseline", **{"MODEL.BACKBONE.PRETRAINED": True}))
    message = str(info.value)
    assert "jx_vit_base_p16_224-80ecf9dd.pth" in message and "MODEL.BACKBONE.PRETRAINED_PATH" in message


def test_settings_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="INPUT.SIZE_TEST"):
        build_backbone(_cfg(**{"INPUT.SIZE_TEST": [128, 64]}))
    with pytest.raises(ValueError, match="STRIDE_SIZE"):
        build_backbone(_cfg(stride=(20, 20)))
    with pytest.raises(ValueError, match="JPM_PARTS"):
        build_model(_cfg(**{"MODEL.TRANSREID.JPM_PARTS": 9}))  # 8 patches
    cfg = _cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    with pytest.raises(ValueError, match="needs a TransReID ViT"):
        build_model(cfg)


def _vit_from(path, **extra):
    return build_backbone(_cfg("baseline", stride=(12, 12), **{"MODEL.BACKBONE.PRETRAINED": True,
                                                               "MODEL.BACKBONE.PRETRAINED_PATH": str(path), **extra}))


def test_a_grid_its_length_cannot_tell_is_given_by_pretrained_grid_and_the_assumed_grid_is_logged(tmp_path, caplog):
    # An 8 x 2 grid (as 288x128 is 18 x 8) has 16 positions, the length of a 4 x 4 square one.
    torch.manual_seed(7)
    source = ReIDViT("vit_base_transreid", img_size=(128, 32), stride=(16, 16))
    torch.save(source.state_dict(), tmp_path / "tall.pth")
    with caplog.at_level("INFO", logger="reid.modeling.backbones.vit"):
        _vit_from(tmp_path / "tall.pth")
    assert "tall.pth: position embedding of a 4x4 patch grid (square or 2:1, from its length)" in caplog.text
    vit = _vit_from(tmp_path / "tall.pth", **{"MODEL.BACKBONE.PRETRAINED_GRID": [8, 2]})
    grid = source.pos_embed.detach()[0, 1:].reshape(1, 8, 2, 32).permute(0, 3, 1, 2)
    expected = F.interpolate(grid, size=(5, 2), mode="bilinear", align_corners=False).permute(0, 2, 3, 1)
    torch.testing.assert_close(vit.pos_embed[0, 1:], expected.reshape(10, 32))
    with pytest.raises(PretrainedWeightsError) as info:
        _vit_from(tmp_path / "tall.pth", **{"MODEL.BACKBONE.PRETRAINED_GRID": [6, 2]})
    assert f"MODEL.BACKBONE.PRETRAINED_PATH={tmp_path / 'tall.pth'}: pos_embed has 16 patch positions, " \
           "MODEL.BACKBONE.PRETRAINED_GRID [6, 2] has 12" in str(info.value)


@pytest.mark.parametrize("pos_embed, fragment", [
    (torch.zeros(1, 1, 32), "pos_embed has shape (1, 1, 32), not [1, 1 + positions, width]"),  # class token only
    (torch.zeros(9, 32), "pos_embed has shape (9, 32), not [1, 1 + positions, width]"),  # 2-D
    (torch.zeros(1, 7, 32), "pos_embed has 6 patch positions, neither a square grid"),
])
def test_bad_pretrained_position_embeddings_are_one_line_naming_the_file(pos_embed, fragment, tmp_path):
    state = dict(ReIDViT("vit_base_transreid", img_size=(64, 32)).state_dict())
    state["pos_embed"] = pos_embed
    torch.save(state, tmp_path / "bad.pth")
    with pytest.raises(PretrainedWeightsError) as info:
        _vit_from(tmp_path / "bad.pth")
    message = str(info.value)
    assert f"MODEL.BACKBONE.PRETRAINED_PATH={tmp_path / 'bad.pth'}: {fragment}" in message and "\n" not in message


def test_a_teacher_without_backbone_prefixes_loads_and_fine_tuned_checkpoints_are_pointed_to_weights(tmp_path):
    torch.manual_seed(8)
    source = ReIDViT("vit_base_transreid", img_size=(64, 32), stride=(16, 16))
    torch.save({"teacher": dict(source.state_dict()), "epoch": 3}, tmp_path / "teacher.pth")
    torch.testing.assert_close(_vit_from(tmp_path / "teacher.pth").cls_token, source.cls_token)
    fine_tuned = {
        "ours.pth": {"model": build_model(_cfg()).state_dict(), "cfg": "..."},
        "transreid.pth": {**{f"base.{k}": v for k, v in source.state_dict().items()},
                          "bottleneck.weight": torch.ones(32)},
    }
    for name, obj in fine_tuned.items():
        torch.save(obj, tmp_path / name)
        with pytest.raises(PretrainedWeightsError) as info:
            _vit_from(tmp_path / name)
        message = str(info.value)
        assert name in message and "is a fine-tuned re-ID checkpoint" in message and "MODEL.WEIGHTS" in message
    torch.save({"teacher": {}}, tmp_path / "empty.pth")
    with pytest.raises(PretrainedWeightsError, match="does not hold a state dict of tensors"):
        _vit_from(tmp_path / "empty.pth")
