"""Identity heads: construction, formulas on hand-computed examples, numerics, training."""
import math

import pytest
import torch
import torch.nn.functional as F

from reid.modeling.heads import (
    COSINE_HEADS,
    HEAD_DEFAULTS,
    HEAD_REGISTRY,
    MARGIN_HEADS,
    AMSoftmaxHead,
    CurricularFaceHead,
    LinearHead,
    build_head,
)
from reid.modeling.losses import cross_entropy_loss

NAMES = ["linear", "normface", "amsoftmax", "cosface", "arcface", "circle", "curricularface"]
MARGIN_NAMES = ["amsoftmax", "arcface", "circle", "curricularface"]


def unit(deg):
    """2-d unit vector at `deg` degrees."""
    r = math.radians(deg)
    return torch.tensor([math.cos(r), math.sin(r)])


def head_with_weights(name, weight, **kwargs):
    head = build_head(name, weight.shape[1], weight.shape[0], **kwargs)
    with torch.no_grad():
        head.weight.copy_(weight)
    return head


# --------------------------------------------------------------------------- build_head
def test_registry_names():
    assert sorted(NAMES) == HEAD_REGISTRY.names()
    assert set(HEAD_DEFAULTS) == set(NAMES)


def test_unknown_name_lists_valid_names():
    with pytest.raises(KeyError) as err:
        build_head("sphereface", 8, 4)
    for name in NAMES:
        assert name in str(err.value)


@pytest.mark.parametrize("value", [None, -1.0, -0.5])
def test_none_or_negative_scale_and_margin_mean_the_published_default(value):
    expected = {"normface": (64, 0), "amsoftmax": (64, 0.35), "arcface": (64, 0.5),
                "circle": (128, 0.25), "curricularface": (64, 0.5)}
    for name, (scale, margin) in expected.items():
        head = build_head(name, 8, 4, scale=value, margin=value)
        assert (head.scale, head.margin) == (scale, margin)
        assert HEAD_DEFAULTS[name] == {"scale": scale, "margin": margin}
    linear = build_head("linear", 8, 4, scale=value, margin=value)
    assert linear.scale is None and linear.margin is None


def test_explicit_scale_and_margin_are_used():
    head = build_head("Circle", 8, 4, scale=80, margin=0.4)
    assert (head.scale, head.margin, head.gamma) == (80.0, 0.4, 80.0)


def test_cosface_is_amsoftmax():
    assert isinstance(build_head("cosface", 8, 4), AMSoftmaxHead)


def test_scale_and_margin_of_heads_without_them_are_ignored_with_a_warning(caplog):
    # Callers may pass scale/margin to every head (DESIGN.md); heads without one keep their own.
    with caplog.at_level("WARNING", logger="reid.modeling.heads.build"):
        linear = build_head("linear", 8, 4, scale=30.0, margin=0.35)
        normface = build_head("normface", 8, 4, scale=30.0, margin=0.35)
    assert isinstance(linear, LinearHead)
    assert (normface.scale, normface.margin) == (30.0, 0.0)  # its scale is used, not its margin
    text = caplog.text
    assert "'linear' has no scale" in text and "'normface' has no margin" in text and "amsoftmax" in text
    # Passing the head's own value (0 margin for normface) is not worth a warning.
    caplog.clear()
    with caplog.at_level("WARNING", logger="reid.modeling.heads.build"):
        build_head("normface", 8, 4, margin=0.0)
    assert caplog.text == ""


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="scale must be > 0"):
        build_head("circle", 8, 4, scale=0.0)
    with pytest.raises(ValueError, match=r"\[0, pi\)"):
        build_head("arcface", 8, 4, margin=4.0)
    with pytest.raises(ValueError, match="num_classes"):
        build_head("circle", 8, 1)
    with pytest.raises(ValueError, match="momentum"):
        build_head("curricularface", 8, 4, momentum=1.5)


def test_extra_keywords():
    with pytest.raises(TypeError, match="easy_margin"):  # the message lists the valid ones
        build_head("arcface", 8, 4, easy_margn=True)
    # Keywords of other heads are fine at their defaults (callers pass every config value) ...
    head = build_head("circle", 8, 4, easy_margin=False, momentum=0.99)
    assert isinstance(head, torch.nn.Module)
    # ... but a non-default value would be silently ignored, so it is an error.
    with pytest.raises(ValueError, match="applies only to arcface, curricularface"):
        build_head("circle", 8, 4, easy_margin=True)
    assert build_head("arcface", 8, 4, easy_margin=True).easy_margin is True
    assert build_head("curricularface", 8, 4, momentum=0.9).momentum == 0.9


# --------------------------------------------------------------------------- shapes, stats
@pytest.mark.parametrize("name", NAMES)
def test_shapes_and_last_stats(name):
    torch.manual_seed(0)
    head = build_head(name, 16, 5)
    assert head.weight.shape == (5, 16)
    feats, targets = torch.randn(7, 16), torch.tensor([0, 1, 2, 3, 4, 0, 1])
    logits = head(feats, targets)
    assert logits.shape == (7, 5) and logits.dtype == torch.float32
    cos = F.normalize(feats, dim=1) @ F.normalize(head.weight.detach(), dim=1).t()
    mask = F.one_hot(targets, 5).bool()
    torch.testing.assert_close(head.last_stats["s_p"], cos[mask].mean())
    torch.testing.assert_close(head.last_stats["s_n"], cos[~mask].mean())
    assert not head.last_stats["s_p"].requires_grad
    # Without targets: margin-free logits and no stats.
    plain = head(feats)
    expected = feats @ head.weight.detach().t() if name == "linear" else head.scale * cos
    torch.testing.assert_close(plain.detach(), expected, rtol=1e-5, atol=1e-5)
    assert head.last_stats == {}


def test_bad_inputs_are_reported():
    head = build_head("circle", 16, 5)
    with pytest.raises(ValueError, match=r"\[B, 16\]"):
        head(torch.randn(4, 8), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 4\]"):
        head(torch.randn(4, 16), torch.tensor([0, 1, 2, 5]))
    with pytest.raises(ValueError, match="integer"):
        head(torch.randn(4, 16), torch.zeros(4))


def test_linear_head_is_plain_and_initialised_small():
    torch.manual_seed(0)
    head = build_head("linear", 64, 200)
    assert 0.0009 < float(head.weight.detach().std()) < 0.0011
    feats = torch.randn(3, 64)
    torch.testing.assert_close(head(feats, torch.tensor([0, 1, 2])), feats @ head.weight.t())
    assert not any("bias" in n for n, _ in head.named_parameters())


def test_linear_head_bias_is_added_to_the_logits_and_only_linear_takes_it():
    head = build_head("linear", 8, 3, bias=True)
    assert head.bias.shape == (3,) and not head.bias.any()  # starts at zero
    with torch.no_grad():
        head.bias.copy_(torch.tensor([1.0, -2.0, 0.5]))
    feats = torch.randn(4, 8)
    torch.testing.assert_close(head(feats), feats @ head.weight.t() + head.bias)
    with pytest.raises(ValueError, match="bias=True has no effect on head 'circle'.*linear"):
        build_head("circle", 8, 3, bias=True)


# --------------------------------------------------------------------------- formulas
def test_amsoftmax_and_normface_logits():
    weight = torch.stack([unit(30), unit(100)])
    feats, targets = unit(0).unsqueeze(0), torch.tensor([0])
    am = head_with_weights("amsoftmax", weight)(feats, targets)
    c30, c100 = math.cos(math.radians(30)), math.cos(math.radians(100))
    torch.testing.assert_close(am, torch.tensor([[64 * (c30 - 0.35), 64 * c100]]))
    nf = head_with_weights("normface", weight)(feats, targets)
    torch.testing.assert_close(nf, torch.tensor([[64 * c30, 64 * c100]]))


def test_arcface_hand_computed():
    m, s = 0.5, 64.0
    weight = torch.stack([unit(30), unit(100), unit(170)])
    head = head_with_weights("arcface", weight)
    feats = unit(0).expand(3, 2)
    logits = head(feats, torch.tensor([0, 1, 2]))
    cosd = lambda deg: math.cos(math.radians(deg))  # noqa: E731
    expected = torch.tensor([
        [s * math.cos(math.radians(30) + m), s * cosd(100), s * cosd(170)],
        [s * cosd(30), s * math.cos(math.radians(100) + m), s * cosd(170)],
        # theta + m = 170 deg + 28.6 deg > 180 deg: fallback cos(theta) - m sin(m)
        [s * cosd(30), s * cosd(100), s * (cosd(170) - m * math.sin(m))],
    ])
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-4)
    # The fallback keeps the target logit decreasing in theta where cos(theta + m) would rise.
    assert expected[2, 2] < s * math.cos(math.radians(170) + m)


def test_arcface_easy_margin():
    m, s = 0.5, 64.0
    weight = torch.stack([unit(30), unit(100)])
    head = head_with_weights("arcface", weight, easy_margin=True)
    logits = head(unit(0).expand(2, 2), torch.tensor([0, 1]))
    # margin applied at 30 deg (cos > 0), not at 100 deg (cos < 0)
    torch.testing.assert_close(logits[0, 0], torch.tensor(s * math.cos(math.radians(30) + m)))
    torch.testing.assert_close(logits[1, 1], torch.tensor(s * math.cos(math.radians(100))))


def test_curricularface_hand_computed_and_t_update():
    s, m = 64.0, 0.5
    # Target at 40 deg; negatives at 20 and 55 deg are hard (cos above cos(40 deg + m) =
    # cos 68.6 deg = 0.364; 55 deg is hard only because the comparison uses the margin),
    # the one at 100 deg is easy.
    weight = torch.stack([unit(40), unit(20), unit(55), unit(100)])
    head = head_with_weights("curricularface", weight)
    assert float(head.t) == 0.0
    head.train()
    logits = head(unit(0).unsqueeze(0), torch.tensor([0]))
    cosd = lambda deg: math.cos(math.radians(deg))  # noqa: E731
    t1 = 0.01 * cosd(40)  # 0.99 * 0 + 0.01 * mean target cos, used in this same step
    assert float(head.t) == pytest.approx(t1, rel=1e-6)
    phi = math.cos(math.radians(40) + m)
    hard = lambda deg, t: s * cosd(deg) * (t + cosd(deg))  # noqa: E731
    expected = torch.tensor([[s * phi, hard(20, t1), hard(55, t1), s * cosd(100)]])
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-4)

    # Second step: batch of two with target cosines cos 10 and cos 50.
    feats = torch.stack([unit(30), unit(90)])
    head(feats, torch.tensor([1, 0]))
    t2 = 0.99 * t1 + 0.01 * (cosd(10) + cosd(50)) / 2
    assert float(head.t) == pytest.approx(t2, rel=1e-6)

    # Eval mode uses t but never changes it.
    head.eval()
    out = head(unit(0).unsqueeze(0), torch.tensor([0]))
    assert float(head.t) == pytest.approx(t2, rel=1e-6)
    torch.testing.assert_close(out[0, 1], torch.tensor(hard(20, t2)), rtol=1e-5, atol=1e-4)

    # t is part of the state dict and restored from it.
    state = head.state_dict()
    assert "t" in state
    fresh = CurricularFaceHead(2, 4)
    fresh.load_state_dict(state)
    assert float(fresh.t) == pytest.approx(t2, rel=1e-6)


# --------------------------------------------------------------------------- numerics
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_no_nan_for_cosines_of_exactly_plus_minus_one(name, sign):
    torch.manual_seed(0)
    head = build_head(name, 8, 4)
    targets = torch.tensor([0, 1, 2, 3])
    feats = (sign * head.weight.detach().clone()).requires_grad_()
    logits = head(feats, targets)
    assert torch.isfinite(logits).all()
    cross_entropy_loss(logits, targets).backward()
    assert torch.isfinite(feats.grad).all() and torch.isfinite(head.weight.grad).all()
    # also directly at cos = +-1 without normalisation rounding
    if name != "linear":
        cos = torch.full((4, 4), sign * 0.3)
        cos[torch.arange(4), targets] = sign
        cos.requires_grad_()
        cross_entropy_loss(head.logits_from_cosine(cos, targets), targets).backward()
        assert torch.isfinite(cos.grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_bf16_autocast_is_finite(name):
    torch.manual_seed(0)
    head = build_head(name, 16, 6)
    targets = torch.tensor([0, 1, 2, 3, 4, 5])
    cases = [torch.randn(6, 16) * 50, head.weight.detach().clone(), -head.weight.detach().clone()]
    for feats in cases:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = head(feats.bfloat16(), targets)
            loss = cross_entropy_loss(logits, targets)
        assert logits.shape == (6, 6)
        assert torch.isfinite(logits).all() and torch.isfinite(loss)


# --------------------------------------------------------------------------- training
@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_each_head_overfits_a_tiny_batch(name):
    torch.manual_seed(0)
    inputs = torch.randn(8, 32)
    targets = torch.arange(4).repeat(2)
    net = torch.nn.Linear(32, 16)
    head = build_head(name, 16, 4)
    head.train()
    opt = torch.optim.Adam(list(net.parameters()) + list(head.parameters()), lr=0.05)
    losses = []
    for _ in range(60):
        loss = cross_entropy_loss(head(net(inputs), targets), targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    # and the head separates the classes: s_p well above s_n
    assert float(head.last_stats["s_p"]) > float(head.last_stats["s_n"]) + 0.3


def test_cosine_and_margin_head_lists_follow_the_classes():
    assert set(COSINE_HEADS) == set(NAMES) - {"linear"}
    assert set(MARGIN_HEADS) == set(NAMES) - {"linear", "normface"}  # normface's margin is fixed at 0
