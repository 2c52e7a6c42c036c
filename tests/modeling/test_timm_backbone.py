"""timm models as backbones ("timm/<name>"): feature layout, weights files, errors, training, export.

The models are timm's own test models (a few hundred thousand parameters) at 128 x 64, so
every test but the export and the end-to-end run takes milliseconds on a CPU.
"""
from __future__ import annotations

import sys

import pytest
import torch

from reid.modeling import build_model
from reid.modeling.backbones import PretrainedWeightsError, build_backbone
from tests._tools import backbone_cfg

SIZE = (128, 64)
NEEDS_TIMM = "timm backbones need timm (pip install 'circle-reid[timm]')"


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread_module):
    """One torch thread (see conftest.one_torch_thread_module)."""


def _timm():
    return pytest.importorskip("timm", reason=NEEDS_TIMM)


def _cfg(name: str, **backbone):
    cfg = backbone_cfg(name, **backbone)
    cfg.INPUT.SIZE_TRAIN = list(SIZE)
    cfg.INPUT.SIZE_TEST = list(SIZE)
    return cfg


def _pixels(batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 256, (batch, 3, *SIZE), generator=torch.Generator().manual_seed(seed)).float()


def test_vit_class_token_and_patch_grid_are_what_timm_computes():
    timm = _timm()
    torch.manual_seed(0)
    cls_bb = build_backbone(_cfg("timm/test_vit")).eval()
    patches_bb = build_backbone(_cfg("timm/test_vit", TOKEN_FEATURE="patches")).eval()
    patches_bb.load_state_dict(cls_bb.state_dict())
    reference = timm.create_model("test_vit", num_classes=0, global_pool="", img_size=SIZE).eval()
    reference.load_state_dict(cls_bb.model.state_dict())
    x = torch.randn(2, 3, *SIZE)
    with torch.no_grad():
        tokens = reference.forward_features(x)  # [B, 1 + 8 * 4, C]: class token, then rows of patches
        cls_map, grid = cls_bb(x), patches_bb(x)
    assert cls_bb.is_tokens and cls_bb.out_channels == tokens.shape[2]
    assert cls_map.shape == (2, tokens.shape[2], 1, 1)
    torch.testing.assert_close(cls_map[:, :, 0, 0], tokens[:, 0], rtol=0, atol=0)
    assert grid.shape == (2, tokens.shape[2], SIZE[0] // 16, SIZE[1] // 16)
    # Patch (row 2, column 3) is token 1 + 2 * 4 + 3.
    torch.testing.assert_close(grid[:, :, 2, 3], tokens[:, 1 + 2 * 4 + 3], rtol=0, atol=0)


@pytest.mark.parametrize("name", ["test_resnet", "test_convnext", "test_mambaout"])
def test_cnn_and_channels_last_models_give_their_feature_map(name):
    _timm()
    backbone = build_backbone(_cfg("timm/" + name)).eval()
    x = torch.randn(1, 3, *SIZE)
    with torch.no_grad():
        out = backbone(x)
        ref = backbone.model.forward_features(x)
    assert not backbone.is_tokens and out.shape[1] == backbone.out_channels
    if name == "test_mambaout":  # timm's MambaOut gives channels-last maps [B, h, w, C]
        ref = ref.permute(0, 3, 1, 2)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_every_head_trains_on_a_timm_vit_with_bnneck_and_pair_losses():
    _timm()
    for head in ("circle", "amsoftmax", "arcface", "linear"):
        cfg = _cfg("timm/test_vit")
        cfg.MODEL.HEADS.NAME = head
        cfg.MODEL.HEADS.NUM_CLASSES = 3
        cfg.MODEL.LOSSES.NAMES = ["identity", "triplet", "pair_circle"]
        torch.manual_seed(1)
        model = build_model(cfg).train()
        losses = model(_pixels(4), torch.tensor([0, 0, 1, 1]))
        assert set(losses) == {"loss_id", "loss_triplet", "loss_pair_circle"}
        sum(losses.values()).backward()
        grads = [p.grad for p in model.backbone.parameters() if p.requires_grad]
        assert grads and all(g is not None and torch.isfinite(g).all() for g in grads), head
        assert model.eval()(_pixels(3)).shape == (3, model.feature_dim)


def test_bf16_autocast_forward_stays_close_to_float32():
    _timm()
    torch.manual_seed(2)
    model = build_model(_cfg("timm/test_vit")).eval()
    x = _pixels(2)
    with torch.no_grad():
        full = torch.nn.functional.normalize(model(x), dim=1)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            half = torch.nn.functional.normalize(model(x).float(), dim=1)
    assert (full * half).sum(1).min() > 0.99


def _save_pretrained(path, name="test_vit", grid_size=(160, 160), seed=3):
    """A timm model with its classifier, at its ImageNet input size, saved as timm's files are."""
    import timm

    torch.manual_seed(seed)
    model = timm.create_model(name, num_classes=10, img_size=grid_size)
    state = model.state_dict()
    if str(path).endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(state, str(path))
    else:
        torch.save(state, path)
    return state


@pytest.mark.parametrize("ext", ["pth", "safetensors"])
def test_pretrained_path_loads_every_tensor_and_resamples_the_position_grid(tmp_path, ext):
    timm = _timm()
    if ext == "safetensors":
        pytest.importorskip("safetensors")
    path = tmp_path / f"vit.{ext}"
    state = _save_pretrained(path)
    backbone = build_backbone(_cfg("timm/test_vit", PRETRAINED=True, PRETRAINED_PATH=str(path)))
    own = backbone.model.state_dict()
    torch.testing.assert_close(own["blocks.0.attn.qkv.weight"], state["blocks.0.attn.qkv.weight"], rtol=0, atol=0)
    # 10 x 10 ImageNet grid -> 8 x 4 re-ID grid, resampled as timm resamples it; the class token kept.
    expected = timm.layers.resample_abs_pos_embed(state["pos_embed"], new_size=[8, 4], num_prefix_tokens=1)
    assert own["pos_embed"].shape == (1, 1 + 8 * 4, state["pos_embed"].shape[2])
    torch.testing.assert_close(own["pos_embed"], expected)
    torch.testing.assert_close(own["pos_embed"][:, 0], state["pos_embed"][:, 0], rtol=0, atol=0)
    assert not any(k.startswith("head.") for k in own)


def test_pretrained_file_of_another_model_is_one_line_naming_the_key(tmp_path):
    _timm()
    path = tmp_path / "vit2.pth"
    _save_pretrained(path, name="test_vit3")
    with pytest.raises(PretrainedWeightsError) as info:
        build_backbone(_cfg("timm/test_vit", PRETRAINED=True, PRETRAINED_PATH=str(path)))
    message = str(info.value)
    assert "\n" not in message and str(path) in message and "timm's test_vit" in message
    assert "has shape (1, 33, 96) in the file but (1, 33, 64) in the model" in message  # test_vit3 is wider


def test_pretrained_file_with_nan_is_refused(tmp_path):
    _timm()
    path = tmp_path / "vit.pth"
    state = _save_pretrained(path)
    state["blocks.1.mlp.fc1.weight"][0, 0] = float("nan")
    torch.save(state, path)
    with pytest.raises(PretrainedWeightsError, match=r"blocks\.1\.mlp\.fc1\.weight holds NaN"):
        build_backbone(_cfg("timm/test_vit", PRETRAINED=True, PRETRAINED_PATH=str(path)))


def test_offline_download_is_one_line_naming_the_source_and_the_key(monkeypatch):
    timm = _timm()
    real = timm.create_model

    def offline(name, pretrained=False, **kwargs):
        if pretrained:
            raise OSError("[Errno -3] Temporary failure in name resolution")
        return real(name, pretrained=False, **kwargs)

    monkeypatch.setattr(timm, "create_model", offline)
    with pytest.raises(PretrainedWeightsError) as info:
        build_backbone(_cfg("timm/vit_tiny_patch16_224", PRETRAINED=True))
    message = str(info.value)
    assert "\n" not in message and "vit_tiny_patch16_224" in message
    assert "huggingface.co/timm/vit_tiny_patch16_224" in message and "MODEL.BACKBONE.PRETRAINED_PATH" in message


def test_misspelled_timm_name_suggests_the_right_one():
    _timm()
    with pytest.raises(ValueError) as info:
        build_backbone(_cfg("timm/vit_smal_patch16_224"))
    message = str(info.value)
    assert "'vit_smal_patch16_224'" in message and "timm/vit_small_patch16_224" in message


def test_unknown_backbone_lists_the_timm_form_and_the_placeholder_says_what_to_write():
    with pytest.raises(KeyError, match=r"timm/<model name>"):
        build_backbone(_cfg("resnet51"))
    with pytest.raises(ValueError, match="timm model's name"):
        build_backbone(_cfg("timm/<model name>"))


def test_without_timm_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)
    with pytest.raises(ImportError, match=r"pip install 'circle-reid\[timm\]'"):
        build_backbone(_cfg("timm/test_vit"))


def test_settings_that_do_not_fit_a_vit_are_refused():
    _timm()
    cfg = _cfg("timm/test_vit")
    cfg.INPUT.SIZE_TEST = [256, 128]
    with pytest.raises(ValueError, match=r"INPUT.SIZE_TEST \[256, 128\] must equal INPUT.SIZE_TRAIN"):
        build_backbone(cfg)
    cfg = _cfg("timm/test_vit")
    cfg.MODEL.HEADS.POOLING = "gem"
    with pytest.raises(ValueError, match="POOLING gem"):
        build_backbone(cfg)
    with pytest.raises(ValueError, match="TOKEN_FEATURE"):
        build_backbone(_cfg("timm/test_vit", TOKEN_FEATURE="mean"))


def test_drop_path_reaches_the_blocks():
    _timm()
    backbone = build_backbone(_cfg("timm/test_vit", DROP_PATH=0.2))
    rates = [m.drop_prob for m in backbone.modules() if type(m).__name__ == "DropPath"]
    assert rates and max(rates) == pytest.approx(0.2)


def test_pixel_statistics_that_differ_from_the_weights_are_logged(tmp_path, reid_log):
    _timm()
    path = tmp_path / "vit.pth"
    _save_pretrained(path)
    cfg = _cfg("timm/test_vit", PRETRAINED=True, PRETRAINED_PATH=str(path))
    cfg.MODEL.PIXEL_MEAN = [127.5, 127.5, 127.5]  # test_vit's weights expect 0.5 mean and std
    cfg.MODEL.PIXEL_STD = [127.5, 127.5, 127.5]
    build_backbone(cfg)
    assert "MODEL.PIXEL_MEAN" not in reid_log.text
    build_backbone(_cfg("timm/test_vit", PRETRAINED=True, PRETRAINED_PATH=str(path)))  # ImageNet statistics
    assert "mean [127.5, 127.5, 127.5]" in reid_log.text and "set them to match the weights" in reid_log.text


@pytest.mark.slow
@pytest.mark.parametrize("name, token_feature", [("test_vit", "cls"), ("test_vit", "patches"), ("test_convnext", "cls")])
def test_timm_backbones_export_with_a_free_batch_axis(tmp_path, name, token_feature):
    _timm()
    from reid.export.writer import compare_with_export, export_onnx, export_pt2

    cfg = _cfg("timm/" + name, TOKEN_FEATURE=token_feature)
    cfg.MODEL.HEADS.NUM_CLASSES = 4
    torch.manual_seed(4)
    model = build_model(cfg).eval()
    check = compare_with_export(model, export_pt2(model, tmp_path / "m.pt2", SIZE), SIZE)
    assert check.batch_sizes == (1, 7, 32) and check.max_abs_diff < 1e-5
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    check = compare_with_export(model, export_onnx(model, tmp_path / "m.onnx", SIZE), SIZE)
    assert check.batch_sizes == (1, 7, 32) and check.max_abs_diff < 1e-5
