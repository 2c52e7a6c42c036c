"""The Circle loss and the unified loss checked against the paper's equations.

Sun et al., "Circle Loss: A Unified Perspective of Pair Similarity Optimization", CVPR 2020.
Each reference below is the paper's formula typed out here, independently of the library.
"""
import math

import pytest
import torch

from reid.modeling.heads import build_head
from reid.modeling.losses import (
    amsoftmax_loss_sp_sn,
    circle_loss_from_similarities,
    circle_loss_sp_sn,
    cross_entropy_loss,
    triplet_loss_sp_sn,
    unified_loss,
)
from reid.modeling.heads.functional import circle_logits

D64 = torch.float64


def eq6(s_p, s_n, gamma, m):
    """Eq. 6 literally: log(1 + sum_j exp(g a_n (s_n - D_n)) * sum_i exp(-g a_p (s_p - D_p)))."""
    o_p, o_n, delta_p, delta_n = 1 + m, -m, 1 - m, m
    a_p = torch.clamp(o_p - s_p, min=0)
    a_n = torch.clamp(s_n - o_n, min=0)
    neg = torch.exp(gamma * a_n * (s_n - delta_n)).sum(-1)
    pos = torch.exp(-gamma * a_p * (s_p - delta_p)).sum(-1)
    return torch.log(1 + neg * pos)


def eq9_eq10(s_p, s_n, gamma, m):
    """Closed-form gradients (Eq. 9 for s_n, Eq. 10 for s_p), valid where both alphas > 0."""
    loss = eq6(s_p, s_n, gamma, m)
    z = 1 - torch.exp(-loss)
    w_n = torch.softmax(gamma * (s_n**2 - m**2), dim=-1)
    w_p = torch.softmax(gamma * ((s_p - 1) ** 2 - m**2), dim=-1)
    grad_n = z.unsqueeze(-1) * w_n * gamma * (s_n + m)
    grad_p = z.unsqueeze(-1) * w_p * gamma * (s_p - 1 - m)
    return grad_p, grad_n


def split_by_target(cos, targets):
    """(s_p [B, 1], s_n [B, C-1]) from cosines [B, C]."""
    mask = torch.nn.functional.one_hot(targets, cos.shape[1]).bool()
    return cos[mask].view(-1, 1), cos[~mask].view(cos.shape[0], -1)


@pytest.mark.parametrize("gamma,m", [(128.0, 0.25), (16.0, 0.4)])
def test_circle_head_cross_entropy_equals_eq6(gamma, m):
    torch.manual_seed(0)
    head = build_head("circle", 12, 7, scale=gamma, margin=m)
    feats = torch.randn(10, 12)
    targets = torch.randint(0, 7, (10,))
    logits = head(feats, targets)
    per_sample = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
    cos = head.cosine(feats).to(D64)
    s_p, s_n = split_by_target(cos, targets)
    expected = eq6(s_p, s_n, gamma, m)
    torch.testing.assert_close(per_sample.to(D64), expected, rtol=1e-4, atol=1e-4)
    # and the mean the trainer uses
    torch.testing.assert_close(cross_entropy_loss(logits, targets).to(D64), expected.mean(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("gamma,m", [(128.0, 0.25), (4.0, 0.25), (2.0, 0.4)])
def test_circle_head_gradients_equal_eq9_eq10(gamma, m):
    torch.manual_seed(1)
    b, c = 6, 5
    # cosines inside the region where alpha_p, alpha_n > 0 (s_n > -m; s_p < 1 + m always)
    cos = (torch.rand(b, c, dtype=D64) * (1.0 - (-m + 0.05)) + (-m + 0.05)).requires_grad_()
    targets = torch.tensor([0, 1, 2, 3, 4, 0])
    head = build_head("circle", 3, c, scale=gamma, margin=m)
    loss = torch.nn.functional.cross_entropy(head.logits_from_cosine(cos, targets), targets, reduction="sum")
    loss.backward()
    s_p, s_n = split_by_target(cos.detach(), targets)
    grad_p, grad_n = eq9_eq10(s_p, s_n, gamma, m)
    mask = torch.nn.functional.one_hot(targets, c).bool()
    torch.testing.assert_close(cos.grad[mask].view(-1, 1), grad_p, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(cos.grad[~mask].view(b, -1), grad_n, rtol=1e-6, atol=1e-9)
    # (Had alpha been differentiated, the negative gradient would be Z w_n 2 gamma s_n
    # instead of Eq. 9's Z w_n gamma (s_n + m), and the comparison above would fail.)


def test_circle_zero_alpha_gives_zero_gradient():
    """A negative with s_n <= -m (alpha_n = 0) and a positive with s_p >= 1 + m are done."""
    m = 0.25
    cos = torch.tensor([[0.5, -0.6, 0.2]], dtype=D64, requires_grad=True)
    targets = torch.tensor([0])
    logits = circle_logits(cos, torch.nn.functional.one_hot(targets, 3).bool(), 64.0, m)
    torch.nn.functional.cross_entropy(logits, targets).backward()
    assert cos.grad[0, 1] == 0
    assert cos.grad[0, 0] < 0 and cos.grad[0, 2] > 0


def test_pairwise_circle_gradients_equal_eq9_eq10_with_several_positives():
    torch.manual_seed(2)
    gamma, m = 8.0, 0.4
    k, l = 3, 5
    sim = (torch.rand(4, k + l, dtype=D64) * 1.2 - 0.3).requires_grad_()  # all > -m
    pos = torch.zeros(4, k + l, dtype=torch.bool)
    pos[:, :k] = True
    loss = circle_loss_from_similarities(sim, pos, ~pos, gamma, m)
    s_p, s_n = sim.detach()[:, :k], sim.detach()[:, k:]
    torch.testing.assert_close(loss, eq6(s_p, s_n, gamma, m))
    loss.sum().backward()
    grad_p, grad_n = eq9_eq10(s_p, s_n, gamma, m)
    torch.testing.assert_close(sim.grad[:, :k], grad_p)
    torch.testing.assert_close(sim.grad[:, k:], grad_n)


def test_decision_boundary_is_the_circle_of_eq8():
    """gamma a_n (s_n - D_n) = gamma a_p (s_p - D_p) exactly on s_n^2 + (s_p - 1)^2 = 2 m^2."""
    gamma, m = 128.0, 0.25
    radius = math.sqrt(2) * m
    angles = torch.linspace(0, 2 * math.pi, 200, dtype=D64)

    def logit_gap(r):
        s_n = r * torch.cos(angles)
        s_p = 1 + r * torch.sin(angles)
        keep = (s_n > -m) & (s_p < 1 + m) & (s_p <= 1)  # both alphas positive, valid cosine
        cos = torch.stack([s_p[keep], s_n[keep]], dim=1)
        mask = torch.zeros_like(cos, dtype=torch.bool)
        mask[:, 0] = True
        logits = circle_logits(cos, mask, gamma, m)
        return logits[:, 0] - logits[:, 1], keep.sum()

    gap, n = logit_gap(radius)
    assert n > 50
    torch.testing.assert_close(gap, torch.zeros_like(gap), atol=1e-10, rtol=0)
    # Inside the circle the positive term wins (loss < log 2), outside it loses.
    inside, _ = logit_gap(0.9 * radius)
    outside, _ = logit_gap(1.1 * radius)
    assert (inside > 0).all() and (outside < 0).all()


def test_unified_loss_is_amsoftmax_with_class_level_labels():
    """Eq. 1 with one positive = Eq. 2 = cross-entropy over the AM-Softmax head's logits."""
    torch.manual_seed(3)
    scale, m = 64.0, 0.35
    head = build_head("amsoftmax", 10, 6, scale=scale, margin=m)
    feats, targets = torch.randn(9, 10), torch.randint(0, 6, (9,))
    per_sample = torch.nn.functional.cross_entropy(head(feats, targets), targets, reduction="none")
    s_p, s_n = split_by_target(head.cosine(feats).to(D64), targets)
    eq2 = torch.log(1 + torch.exp(scale * (s_n + m)).sum(-1) * torch.exp(-scale * s_p[:, 0]))
    torch.testing.assert_close(unified_loss(s_p, s_n, scale, m), eq2)
    torch.testing.assert_close(per_sample.to(D64), eq2, rtol=1e-4, atol=1e-4)


def test_unified_loss_is_normface_with_zero_margin():
    torch.manual_seed(4)
    head = build_head("normface", 10, 6)
    feats, targets = torch.randn(9, 10), torch.randint(0, 6, (9,))
    per_sample = torch.nn.functional.cross_entropy(head(feats, targets), targets, reduction="none")
    s_p, s_n = split_by_target(head.cosine(feats).to(D64), targets)
    torch.testing.assert_close(per_sample.to(D64), unified_loss(s_p, s_n, head.scale, 0.0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shift", [0.0, -0.8])  # hinge active / hinge inactive
def test_unified_loss_over_gamma_tends_to_hard_mined_triplet(shift):
    torch.manual_seed(5)
    m = 0.3
    s_p = torch.rand(4, dtype=D64) * 0.5 + 0.4
    s_n = torch.rand(6, dtype=D64) * 0.5 + shift
    eq3 = torch.clamp(s_n.max() - s_p.min() + m, min=0)  # [max s_n - min s_p + m]_+
    gammas = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 8192.0]
    errors = [abs(float(unified_loss(s_p, s_n, g, m) / g - eq3)) for g in gammas]
    assert all(a > b for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 1e-3


def test_similarity_functions_follow_the_equations():
    """The (s_p, s_n) functions for gradient plots: values and gradients."""
    s_p = torch.linspace(0.0, 1.0, 11, dtype=D64).view(-1, 1).expand(11, 7).clone().requires_grad_()
    s_n = torch.linspace(-0.2, 1.0, 7, dtype=D64).view(1, -1).expand(11, 7).clone().requires_grad_()
    gamma, m = 32.0, 0.25
    circle = circle_loss_sp_sn(s_p, s_n, gamma, m)
    assert circle.shape == (11, 7)
    torch.testing.assert_close(circle, eq6(s_p.detach()[..., None], s_n.detach()[..., None], gamma, m))
    circle.sum().backward()
    grad_p, grad_n = eq9_eq10(s_p.detach()[..., None], s_n.detach()[..., None], gamma, m)
    torch.testing.assert_close(s_p.grad, grad_p[..., 0])
    torch.testing.assert_close(s_n.grad, grad_n[..., 0])

    am = amsoftmax_loss_sp_sn(s_p.detach(), s_n.detach(), 64.0, 0.35)
    torch.testing.assert_close(am, torch.nn.functional.softplus(64.0 * (s_n.detach() + 0.35 - s_p.detach())))
    tri = triplet_loss_sp_sn(s_p.detach(), s_n.detach(), 0.3)
    torch.testing.assert_close(tri, torch.clamp(s_n.detach() - s_p.detach() + 0.3, min=0))
    # broadcasting a scalar s_n
    assert circle_loss_sp_sn(s_p.detach()[:, 0], torch.tensor(0.1, dtype=D64)).shape == (11,)
