"""Baseline and MGN meta architectures: shapes, losses, neck, preprocessing, pooling."""
from __future__ import annotations

import glob
import math
import os
import subprocess
import sys

import pytest
import torch

from reid.config import get_cfg
from reid.modeling import build_model, model_summary
from reid.modeling.loss_assembly import LossAssembly
from reid.modeling.meta_arch import MGN, Baseline
from reid.modeling.meta_arch.mgn import stripe_max_pool
from reid.modeling.neck import BNNeck, build_neck
from reid.modeling.pooling import GeMPool, build_pooling

H, W = 64, 32  # tiny inputs keep resnet18 forwards fast


def make_cfg(arch: str = "baseline", backbone: str = "resnet18", num_classes: int = 4, **opts):
    """Default config with random init; `opts` are "A__B__C" -> value overrides."""
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = arch
    cfg.MODEL.BACKBONE.NAME = backbone
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.NUM_CLASSES = num_classes
    for key, value in opts.items():
        *path, leaf = key.split("__")
        node = cfg
        for part in path:
            node = getattr(node, part)
        setattr(node, leaf, value)
    return cfg


def images(batch: int = 4, h: int = H, w: int = W, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 3, h, w), generator=g, dtype=torch.uint8)


TARGETS = torch.tensor([0, 0, 1, 1])


def build(cfg, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(cfg)


# --------------------------------------------------------------------------- shapes
@pytest.mark.slow
def test_resnet50_baseline_eval_feature_is_2048d():
    model = build(make_cfg(backbone="resnet50")).eval()
    with torch.no_grad():
        feat = model(images(2, 256, 128))
    assert feat.shape == (2, 2048) and model.feature_dim == 2048
    assert torch.isfinite(feat).all()


@pytest.mark.slow
def test_resnet50_mgn_eval_feature_is_2048d():
    model = build(make_cfg("mgn", backbone="resnet50")).eval()
    with torch.no_grad():
        feat = model(images(2, 384, 128))
    assert feat.shape == (2, 2048) and model.feature_dim == 8 * 256
    assert torch.isfinite(feat).all()


@pytest.mark.slow
def test_resnet18_feature_dims_and_reduction_dim():
    base = build(make_cfg()).eval()
    mgn = build(make_cfg("mgn", MODEL__MGN__REDUCTION_DIM=32)).eval()
    with torch.no_grad():
        assert base(images(2)).shape == (2, 512)
        assert mgn(images(2)).shape == (2, 8 * 32)
    assert base.feature_dim == 512 and mgn.feature_dim == 256


def test_model_summary_reports_parameters_and_feature_dim():
    model = build(make_cfg())
    assert isinstance(model, Baseline)
    text = model_summary(model)
    total = sum(p.numel() for p in model.parameters())
    assert "Baseline" in text and "resnet18" in text and "feature dim 512" in text
    assert f"{total / 1e6:.2f}M" in text


# --------------------------------------------------------------------------- losses
@pytest.mark.slow
def test_train_mode_returns_configured_finite_losses_and_stats():
    cfg = make_cfg(MODEL__LOSSES__NAMES=["identity", "triplet", "pair_circle"])
    model = build(cfg).train()
    losses = model(images(), TARGETS)
    assert set(losses) == {"loss_id", "loss_triplet", "loss_pair_circle"}
    for value in losses.values():
        assert value.dim() == 0 and torch.isfinite(value)
    assert set(model.last_stats) == {"s_p", "s_n"}
    # Detached 0-d tensors (logging them needs no device-to-host copy inside the forward).
    for v in model.last_stats.values():
        assert isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad
        assert -1.0 <= float(v) <= 1.0


@pytest.mark.slow
def test_loss_weights_scale_the_losses():
    names = ["identity", "triplet", "pair_circle"]
    one = build(make_cfg(MODEL__LOSSES__NAMES=names), seed=1).train()(images(), TARGETS)
    two = build(
        make_cfg(
            MODEL__LOSSES__NAMES=names,
            MODEL__LOSSES__ID__WEIGHT=2.0,
            MODEL__LOSSES__TRIPLET__WEIGHT=2.0,
            MODEL__LOSSES__PAIR_CIRCLE__WEIGHT=2.0,
        ),
        seed=1,
    ).train()(images(), TARGETS)
    for key in one:
        torch.testing.assert_close(two[key], 2.0 * one[key])


@pytest.mark.slow
def test_pair_losses_see_the_configured_feature(monkeypatch):
    seen = {}

    def fake_triplet(features, targets, **kwargs):
        seen["triplet"] = features
        return features.sum() * 0

    monkeypatch.setattr("reid.modeling.loss_assembly.triplet_loss", fake_triplet)
    for feat in ("before", "after"):
        model = build(make_cfg(MODEL__LOSSES__NAMES=["triplet"], MODEL__LOSSES__TRIPLET__FEAT=feat))
        model.train()(images(), TARGETS)
        before = model.pool(model.backbone(model.preprocess(images())))
        expected = before if feat == "before" else model.neck(before)
        torch.testing.assert_close(seen["triplet"], expected)


def test_identity_loss_without_classes_is_a_clear_error_but_eval_works():
    model = build(make_cfg(num_classes=0))
    assert model.head is None
    with pytest.raises(RuntimeError, match="NUM_CLASSES"):
        model.train()(images(), TARGETS)
    assert model.eval()(images(2)).shape == (2, 512)


@pytest.mark.slow
def test_no_head_without_identity_loss():
    model = build(make_cfg(MODEL__LOSSES__NAMES=["triplet"]))
    assert model.head is None
    losses = model.train()(images(), TARGETS)
    assert set(losses) == {"loss_triplet"} and model.last_stats == {}


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch,opts",
    [
        ("baseline", {"MODEL__LOSSES__NAMES": ["identity", "triplet"]}),
        ("baseline", {"MODEL__LOSSES__NAMES": ["triplet"]}),  # FEAT before: the neck is unreached
        ("baseline", {"MODEL__LOSSES__NAMES": ["triplet"], "MODEL__LOSSES__TRIPLET__FEAT": "after"}),
        ("baseline", {"MODEL__LOSSES__NAMES": ["pair_circle"], "MODEL__LOSSES__PAIR_CIRCLE__FEAT": "before"}),
        ("mgn", {"MODEL__LOSSES__NAMES": ["identity", "triplet"]}),
        ("mgn", {"MODEL__LOSSES__NAMES": ["triplet"]}),
        ("mgn", {"MODEL__LOSSES__NAMES": ["identity", "triplet"], "MODEL__MGN__LOSS_LAYOUT": "per_branch"}),
        ("mgn", {"MODEL__LOSSES__NAMES": ["triplet"], "MODEL__MGN__LOSS_LAYOUT": "per_branch"}),
    ],
)
def test_every_trainable_parameter_gets_a_gradient(arch, opts):
    # DistributedDataParallel stops at the second iteration when a parameter it manages gets
    # no gradient, so whatever the losses, the parts they do not reach must be frozen.
    model = build(make_cfg(arch, MODEL__MGN__REDUCTION_DIM=16, **opts)).train()
    sum(model(images(), TARGETS).values()).backward()
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    neck_used = "identity" in opts["MODEL__LOSSES__NAMES"] or "after" in opts.values()
    assert ("neck.weight" in frozen) == (not neck_used)
    assert "neck.bias" in frozen  # the BNNeck shift is frozen in any case


@pytest.mark.slow
def test_train_mode_without_targets_is_a_clear_error():
    model = build(make_cfg()).train()
    with pytest.raises(ValueError, match="targets"):
        model(images())


@pytest.mark.parametrize(
    "opts,fragment",
    [
        ({"MODEL__META_ARCHITECTURE": "resnet_mgn"}, "baseline, clipreid, mgn, transreid"),
        ({"MODEL__BACKBONE__NAME": "vgg16"}, "resnet50"),
        ({"MODEL__HEADS__POOLING": "median"}, "avg, gem, gem_fixed, max"),
        ({"MODEL__HEADS__NECK": "bn"}, "bnneck, none"),
        ({"MODEL__HEADS__NECK_FEAT": "middle"}, "before, after"),
        ({"MODEL__LOSSES__NAMES": ["identity", "center"]}, "identity, triplet, pair_circle"),
        ({"MODEL__LOSSES__NAMES": []}, "identity, triplet, pair_circle"),
        ({"MODEL__LOSSES__TRIPLET__FEAT": "bn"}, "before, after"),
        ({"MODEL__LOSSES__TRIPLET__METRIC": "manhattan"}, "euclidean, cosine"),
        ({"MODEL__META_ARCHITECTURE": "mgn", "MODEL__MGN__LOSS_LAYOUT": "parts"}, "concat, per_branch"),
    ],
)
def test_unknown_names_list_the_valid_ones(opts, fragment):
    with pytest.raises((KeyError, ValueError)) as err:
        build_model(make_cfg(**opts))
    assert fragment in str(err.value)


def test_head_config_mistake_names_the_config_keys():
    # momentum only applies to curricularface; a non-default value on circle is a mistake.
    cfg = make_cfg(MODEL__HEADS__NAME="circle", MODEL__HEADS__CURRICULAR_MOMENTUM=0.9)
    with pytest.raises(ValueError) as err:
        build_model(cfg)
    assert "CURRICULAR_MOMENTUM" in str(err.value) and "momentum" in str(err.value)


@pytest.mark.slow
def test_resolved_head_defaults_are_used():
    model = build(make_cfg(MODEL__HEADS__NAME="circle"))
    assert (model.head.scale, model.head.margin) == (128.0, 0.25)  # SCALE/MARGIN -1 = paper values
    model = build(make_cfg(MODEL__HEADS__NAME="amsoftmax", MODEL__HEADS__SCALE=30.0))
    assert model.head.scale == 30.0 and model.head.weight.shape == (4, 512)


@pytest.mark.slow
@pytest.mark.parametrize("arch,pooling", [("baseline", "gem"), ("mgn", "avg")])
def test_bf16_autocast_gives_finite_features(arch, pooling):
    model = build(make_cfg(arch, MODEL__HEADS__POOLING=pooling, MODEL__MGN__REDUCTION_DIM=16)).eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        feat = model(images(2))
    assert feat.shape == (2, model.feature_dim) and torch.isfinite(feat.float()).all()


@pytest.mark.slow
def test_overfit_tiny_batch_with_circle_head():
    torch.manual_seed(0)
    cfg = make_cfg(num_classes=4, MODEL__HEADS__NAME="circle")
    model = build(cfg).train()
    x = images(8, seed=3)
    y = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    history = []
    for _ in range(20):
        loss = sum(model(x, y).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        history.append(float(loss.detach()))
    assert all(math.isfinite(v) for v in history)
    assert history[-1] < 0.1 * history[0]
    assert model.last_stats["s_p"] > model.last_stats["s_n"]


# --------------------------------------------------------------------------- neck
@pytest.mark.slow
def test_bnneck_bias_is_frozen_at_zero_through_training():
    model = build(make_cfg(MODEL__LOSSES__NAMES=["identity", "triplet"]))
    neck = model.neck
    assert isinstance(neck, BNNeck)
    assert not neck.bias.requires_grad and torch.count_nonzero(neck.bias) == 0
    weight_before = neck.weight.detach().clone()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    for _ in range(2):
        loss = sum(model.train()(images(), TARGETS).values())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert neck.bias.grad is None and torch.count_nonzero(neck.bias) == 0
    assert not torch.equal(neck.weight, weight_before)  # the scale does train


@pytest.mark.slow
def test_neck_none_and_eval_feature_before_or_after_bn():
    after_model = build(make_cfg(MODEL__HEADS__NECK_FEAT="after"), seed=2).eval()
    before_model = build(make_cfg(MODEL__HEADS__NECK_FEAT="before"), seed=2).eval()
    # Non-trivial running statistics, so that "after" really differs from "before".
    after_model.neck.running_mean.fill_(0.5)
    after_model.neck.running_var.fill_(4.0)
    with torch.no_grad():
        before = before_model(images(2))
        after = after_model(images(2))
    torch.testing.assert_close(after, (before - 0.5) / torch.sqrt(torch.tensor(4.0) + 1e-5))
    assert isinstance(build_neck("none", 8), torch.nn.Identity)


# --------------------------------------------------------------------------- preprocessing
def test_preprocess_does_not_mutate_and_uint8_equals_float():
    model = build(make_cfg()).eval()
    as_uint8 = images(2)
    as_float = as_uint8.float()
    kept_uint8, kept_float = as_uint8.clone(), as_float.clone()
    with torch.no_grad():
        out_uint8 = model(as_uint8)
        out_float = model(as_float)
    assert torch.equal(as_uint8, kept_uint8) and torch.equal(as_float, kept_float)
    torch.testing.assert_close(out_uint8, out_float)
    mean = torch.tensor(get_cfg().MODEL.PIXEL_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(get_cfg().MODEL.PIXEL_STD).view(1, 3, 1, 1)
    torch.testing.assert_close(model.preprocess(as_uint8), (as_float - mean) / std)


def test_preprocess_buffers_follow_the_model_but_stay_out_of_checkpoints():
    model = build(make_cfg())
    assert "preprocess.pixel_mean" not in model.state_dict()
    assert any(name == "preprocess.pixel_mean" for name, _ in model.named_buffers())


# --------------------------------------------------------------------------- pooling
def test_gem_interpolates_between_avg_and_max():
    x = torch.rand(2, 5, 4, 3) + 0.5  # positive, as after a ReLU
    torch.testing.assert_close(GeMPool(p=1.0)(x), build_pooling("avg")(x))
    high = GeMPool(p=200.0)(x)
    max_pooled = build_pooling("max")(x)
    assert torch.all(high <= max_pooled + 1e-5)
    torch.testing.assert_close(high, max_pooled, rtol=0.02, atol=0.0)
    assert isinstance(GeMPool().p, torch.nn.Parameter)


def test_baseline_uses_configured_gem_with_learnable_p():
    model = build(make_cfg(MODEL__HEADS__POOLING="gem", MODEL__HEADS__GEM_P=4.0))
    assert isinstance(model.pool, GeMPool) and float(model.pool.p.detach()) == 4.0
    assert any(p is model.pool.p for p in model.parameters())


# --------------------------------------------------------------------------- MGN
def test_stripes_cover_every_row_when_height_is_not_divisible():
    height = 7  # not a multiple of 2 or 3
    for parts in (2, 3):
        covered = set()
        for row in range(height):
            fmap = torch.zeros(1, 1, height, 2)
            fmap[0, 0, row, 1] = 1.0
            hits = [i for i, s in enumerate(stripe_max_pool(fmap, parts)) if float(s) == 1.0]
            assert hits, f"row {row} is in no stripe of {parts}"
            covered.add(row)
            # Stripes run top to bottom: the first row is in the first, the last in the last.
            if row == 0:
                assert hits == [0]
            if row == height - 1:
                assert hits == [parts - 1]
        assert covered == set(range(height))


@pytest.mark.slow
def test_mgn_bottom_image_rows_reach_the_last_stripe():
    model = build(make_cfg("mgn", MODEL__MGN__REDUCTION_DIM=16)).eval()
    x = images(2, h=80)  # conv5 maps of 5 rows: not a multiple of 3
    y = x.clone()
    y[:, :, -8:, :] = 255 - y[:, :, -8:, :]
    with torch.no_grad():
        a, b = model.reduced_features(x), model.reduced_features(y)
    assert len(a) == 8 and all(f.shape == (2, 16) for f in a)
    assert not torch.allclose(a[7], b[7])  # bottom stripe of the 3-part branch
    assert not torch.allclose(a[4], b[4])  # bottom stripe of the 2-part branch


@pytest.mark.slow
def test_mgn_global_branch_downsamples_only_when_configured():
    x = torch.randn(1, 3, H, W)
    for downsample, ratio in ((True, 2), (False, 1)):
        model = build(make_cfg("mgn", MODEL__MGN__GLOBAL_DOWNSAMPLE=downsample)).eval()
        with torch.no_grad():
            shared = model.trunk(x)
            g, p2, p3 = model.branch_global(shared), model.branch_part2(shared), model.branch_part3(shared)
        assert p2.shape == p3.shape == (1, 512, 4, 2)
        assert g.shape == (1, 512, 4 // ratio, 2 // ratio)
    # Each branch owns its conv5 weights.
    assert model.branch_part2[1][0].conv1.weight is not model.branch_part3[1][0].conv1.weight


@pytest.mark.slow
def test_mgn_concat_layout_one_head_on_the_concatenation():
    model = build(make_cfg("mgn", MODEL__MGN__REDUCTION_DIM=16, MODEL__LOSSES__NAMES=["identity", "triplet"]))
    assert isinstance(model, MGN)
    assert len(model.heads) == 1 and model.heads[0].weight.shape == (4, 128)
    losses = model.train()(images(), TARGETS)
    assert set(losses) == {"loss_id", "loss_triplet"}
    assert all(torch.isfinite(v) for v in losses.values())
    assert set(model.last_stats) == {"s_p", "s_n"}


@pytest.mark.slow
def test_mgn_per_branch_layout_heads_and_losses():
    cfg = make_cfg(
        "mgn",
        MODEL__MGN__REDUCTION_DIM=16,
        MODEL__MGN__LOSS_LAYOUT="per_branch",
        MODEL__LOSSES__NAMES=["identity", "triplet"],
    )
    model = build(cfg)
    assert len(model.heads) == 8 and all(h.weight.shape == (4, 16) for h in model.heads)
    losses = model.train()(images(), TARGETS)
    assert set(losses) == {"loss_id", "loss_triplet"}
    assert all(torch.isfinite(v) for v in losses.values())
    # Every head receives gradient: all 8 features are classified.
    sum(losses.values()).backward()
    assert all(h.weight.grad is not None and h.weight.grad.abs().sum() > 0 for h in model.heads)


@pytest.mark.slow
def test_mgn_per_branch_triplet_is_mean_over_the_three_globals(monkeypatch):
    calls = []

    def fake_triplet(features, targets, **kwargs):
        calls.append(features)
        return torch.tensor(float(len(calls)))

    monkeypatch.setattr("reid.modeling.loss_assembly.triplet_loss", fake_triplet)
    cfg = make_cfg(
        "mgn",
        MODEL__MGN__REDUCTION_DIM=16,
        MODEL__MGN__LOSS_LAYOUT="per_branch",
        MODEL__LOSSES__NAMES=["triplet"],
        MODEL__LOSSES__TRIPLET__WEIGHT=3.0,
    )
    losses = build(cfg).train()(images(), TARGETS)
    assert len(calls) == 3 and all(c.shape == (4, 16) for c in calls)
    torch.testing.assert_close(losses["loss_triplet"], torch.tensor(3.0 * (1 + 2 + 3) / 3))


def test_loss_assembly_dedupes_names():
    assembly = LossAssembly.from_cfg(make_cfg(MODEL__LOSSES__NAMES=["Identity", "identity"]))
    assert assembly.names == ("identity",)


# --------------------------------------------------------------------------- layering
@pytest.mark.slow
def test_modeling_does_not_import_higher_layers():
    code = (
        "import sys, reid.modeling, reid.modeling.heads, reid.modeling.losses;"
        "bad = [m for m in sys.modules if m.split('.')[:2] in "
        "(['reid', 'data'], ['reid', 'engine'], ['reid', 'evaluation'])];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.slow
def test_mgn_backbone_parameters_are_trunk_and_branches_only():
    from reid.config import get_cfg
    from reid.modeling import build_model

    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = "mgn"
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.NUM_CLASSES = 4
    model = build_model(cfg)
    frozen = {id(p) for p in model.backbone_parameters()}
    trunk_and_branches = [model.trunk, model.branch_global, model.branch_part2, model.branch_part3]
    assert frozen == {id(p) for m in trunk_and_branches for p in m.parameters()}
    # The reductions and the head must stay trainable while the backbone is frozen.
    assert not frozen & {id(p) for p in model.reductions.parameters()}
    assert not frozen & {id(p) for p in model.heads.parameters()}



ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIPPED_CONFIGS = sorted(p for p in glob.glob(os.path.join(ROOT, "configs", "**", "*.yml"), recursive=True)
                         if not os.path.basename(p).startswith("Base-"))
LOSS_KEYS = {"identity": "loss_id", "triplet": "loss_triplet", "pair_circle": "loss_pair_circle"}


@pytest.mark.slow
@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: os.path.relpath(p, os.path.join(ROOT, "configs")))
def test_every_shipped_config_builds_its_model_and_runs_a_forward_pass(path, one_torch_thread_module):
    from reid.config import load_config

    opts = ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.HEADS.NUM_CLASSES", 4, "MODEL.DEVICE", "cpu"]
    from reid.config.sie_keys import sie_node

    shipped = load_config(path)
    h, w = shipped.INPUT.SIZE_TRAIN
    # Half the configured size: the same model and code paths at a quarter of the CPU time (a ViT's
    # patch grid is built for the input size; SIE gets the cameras that tools/train.py counts).
    opts += ["INPUT.SIZE_TRAIN", [h // 2, w // 2], "INPUT.SIZE_TEST", [h // 2, w // 2],
             f"{sie_node(shipped)[1]}.NUM_CAMERAS", 6]
    cfg = load_config(path, opts)
    torch.manual_seed(0)
    model = build_model(cfg)
    images = torch.randint(0, 256, (4, 3, h // 2, w // 2), dtype=torch.uint8)
    targets = torch.tensor([0, 0, 1, 1])  # P=2 x K=2: pair losses have positives and negatives
    cams = {"camids": torch.tensor([0, 1, 2, 5])} if getattr(model, "uses_camids", False) else {}
    two_stage = getattr(model, "text_head", None) is not None  # CLIP-ReID's: text features from its first stage
    if two_stage:
        model.text_head.set_features(torch.randn(model.text_head.features.shape))
    losses = model.train()(images, targets, **cams)
    assert set(losses) == {LOSS_KEYS[n] for n in cfg.MODEL.LOSSES.NAMES} | ({"loss_i2t"} if two_stage else set())
    assert all(torch.isfinite(v) and v > 0 for v in losses.values())
    with torch.no_grad():
        feats = model.eval()(images[:2], **{k: v[:2] for k, v in cams.items()})
    assert feats.shape == (2, model.feature_dim) and torch.isfinite(feats).all()


def test_fc_embedding_sets_the_feature_width_and_feeds_neck_and_head():
    model = build(make_cfg(MODEL__HEADS__FC_DIM=24)).train()
    assert model.feature_dim == 24 and model.neck.num_features == 24 and model.head.weight.shape == (4, 24)
    assert [type(m).__name__ for m in model.embedding] == ["Linear", "BatchNorm1d", "ReLU"]
    sum(model(images(), TARGETS).values()).backward()
    assert model.embedding[0].weight.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="MODEL.HEADS.FC_DIM must be >= 0"):
        build(make_cfg(MODEL__HEADS__FC_DIM=-1))
