"""Cross-entropy, batch-hard triplet and pair-wise Circle losses against brute-force references."""
import math

import pytest
import torch
import torch.nn.functional as F

from reid.modeling.losses import (
    cross_entropy_loss,
    masked_logsumexp,
    pairwise_circle_loss,
    pairwise_distance,
    softplus_pair_loss,
    triplet_loss,
)

D64 = torch.float64


def batch(seed=0, labels=(0, 0, 0, 1, 1, 2, 2, 2, 3), dim=6):
    """Features and labels; label 3 has a single sample (no positive: excluded)."""
    torch.manual_seed(seed)
    return torch.randn(len(labels), dim), torch.tensor(labels)


# --------------------------------------------------------------------------- cross-entropy
@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_formula(eps):
    torch.manual_seed(0)
    logits, targets = torch.randn(5, 7) * 3, torch.tensor([0, 3, 6, 2, 2])
    logp = torch.log_softmax(logits.double(), dim=1)
    c = logits.shape[1]
    # q_c = (1 - eps) [c = y] + eps / C
    q = torch.full_like(logp, eps / c)
    q[torch.arange(5), targets] += 1 - eps
    expected = -(q * logp).sum(1).mean()
    torch.testing.assert_close(cross_entropy_loss(logits, targets, label_smooth=eps).double(), expected)
    if eps == 0:
        torch.testing.assert_close(expected, -logp[torch.arange(5), targets].mean())


def test_cross_entropy_rejects_bad_epsilon_and_shapes():
    with pytest.raises(ValueError, match="label_smooth"):
        cross_entropy_loss(torch.randn(2, 3), torch.tensor([0, 1]), label_smooth=1.0)
    with pytest.raises(ValueError, match=r"\[B, C\]"):
        cross_entropy_loss(torch.randn(2, 3), torch.tensor([0, 1, 2]))


# --------------------------------------------------------------------------- distances
def test_pairwise_distance():
    torch.manual_seed(0)
    x, y = torch.randn(5, 4, dtype=D64), torch.randn(3, 4, dtype=D64)
    torch.testing.assert_close(pairwise_distance(x, y, "euclidean"), torch.cdist(x, y))
    cos = torch.tensor([[F.cosine_similarity(a, b, dim=0) for b in y] for a in x], dtype=D64)
    torch.testing.assert_close(pairwise_distance(x, y, "cosine"), 1 - cos)
    with pytest.raises(ValueError, match="euclidean, cosine"):
        pairwise_distance(x, y, "manhattan")


# --------------------------------------------------------------------------- triplet
def triplet_reference(feats, labels, margin, soft, metric):
    """Loop over anchors: farthest positive, closest negative."""
    feats = feats.double()
    losses = []
    for a in range(len(labels)):
        def d(b):
            if metric == "euclidean":
                return float(torch.linalg.norm(feats[a] - feats[b]))
            return 1 - float(F.cosine_similarity(feats[a], feats[b], dim=0))
        pos = [d(b) for b in range(len(labels)) if b != a and labels[b] == labels[a]]
        neg = [d(b) for b in range(len(labels)) if labels[b] != labels[a]]
        if not pos or not neg:
            continue
        gap = max(pos) - min(neg)
        losses.append(math.log1p(math.exp(gap)) if soft else max(0.0, gap + margin))
    return sum(losses) / len(losses)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("soft", [False, True])
@pytest.mark.parametrize("margin", [0.3, 5.0])
def test_triplet_matches_brute_force(metric, soft, margin):
    feats, labels = batch(seed=1)
    got = triplet_loss(feats, labels, margin=margin, soft_margin=soft, metric=metric)
    assert got == pytest.approx(triplet_reference(feats, labels, margin, soft, metric), rel=1e-5, abs=1e-6)


def test_triplet_without_valid_anchor_is_zero_and_differentiable():
    feats = torch.randn(3, 4, requires_grad=True)
    loss = triplet_loss(feats, torch.tensor([0, 1, 2]))  # no positives at all
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert torch.equal(feats.grad, torch.zeros_like(feats))


def test_triplet_gradients_finite_for_identical_features():
    feats = torch.ones(4, 5, requires_grad=True)  # every distance is 0
    loss = triplet_loss(feats, torch.tensor([0, 0, 1, 1]), metric="euclidean")
    assert float(loss.detach()) == pytest.approx(0.3, abs=1e-5)
    loss.backward()
    assert torch.isfinite(feats.grad).all()


# --------------------------------------------------------------------------- pair-wise Circle
def pair_circle_reference(feats, labels, gamma, m):
    """Eq. 6 per anchor with explicit loops, in float64 and with a shifted log-sum-exp."""
    feats = F.normalize(feats.double(), dim=1)
    losses = []
    for a in range(len(labels)):
        pos_terms, neg_terms = [], []
        for b in range(len(labels)):
            s = float(feats[a] @ feats[b])
            if b != a and labels[b] == labels[a]:
                alpha_p = max(1 + m - s, 0.0)
                pos_terms.append(-gamma * alpha_p * (s - (1 - m)))
            elif labels[b] != labels[a]:
                alpha_n = max(s + m, 0.0)
                neg_terms.append(gamma * alpha_n * (s - m))
        if not pos_terms or not neg_terms:
            continue

        def lse(v):
            top = max(v)
            return top + math.log(sum(math.exp(x - top) for x in v))

        z = lse(neg_terms) + lse(pos_terms)  # log(sum exp(neg) * sum exp(-pos))
        losses.append(z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z)))
    return sum(losses) / len(losses)


@pytest.mark.parametrize("gamma,m", [(80.0, 0.4), (2.0, 0.25), (1e4, 0.4)])
def test_pairwise_circle_matches_brute_force(gamma, m):
    feats, labels = batch(seed=2)
    feats.requires_grad_()
    loss = pairwise_circle_loss(feats, labels, gamma=gamma, margin=m)
    assert float(loss.detach()) == pytest.approx(pair_circle_reference(feats.detach(), labels, gamma, m), rel=1e-5)
    loss.backward()
    assert torch.isfinite(feats.grad).all()  # no overflow even at gamma = 1e4


def test_pairwise_circle_defaults_and_no_valid_anchor():
    feats, labels = batch(seed=3)
    assert float(pairwise_circle_loss(feats, labels)) == pytest.approx(
        pair_circle_reference(feats, labels, 80.0, 0.4), rel=1e-5
    )
    lonely = torch.randn(3, 4, requires_grad=True)
    loss = pairwise_circle_loss(lonely, torch.tensor([0, 1, 2]))
    assert float(loss.detach()) == 0.0
    loss.backward()
    assert torch.equal(lonely.grad, torch.zeros_like(lonely))


def test_masked_logsumexp_empty_rows_have_no_nan_gradient():
    x = torch.randn(3, 4, requires_grad=True)
    pos = torch.tensor([[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    lse = masked_logsumexp(x, pos)
    assert lse[1] == float("-inf")
    torch.testing.assert_close(lse[0], torch.logsumexp(x[0, [0, 3]], 0))
    loss = softplus_pair_loss(x, x, pos, pos)
    assert float(loss[1].detach()) == 0.0
    loss.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.equal(x.grad[1], torch.zeros(4))


def test_pair_losses_under_bf16_autocast_are_finite():
    feats, labels = batch(seed=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        values = [
            pairwise_circle_loss(feats.bfloat16(), labels, gamma=256.0),
            triplet_loss(feats.bfloat16(), labels),
            triplet_loss(feats.bfloat16(), labels, metric="cosine", soft_margin=True),
        ]
    assert all(torch.isfinite(v) and v.dtype == torch.float32 for v in values)
    # computed in float32, not bf16: equal to the float32 result on the same (rounded) inputs
    torch.testing.assert_close(values[0], pairwise_circle_loss(feats.bfloat16().float(), labels, gamma=256.0))
    torch.testing.assert_close(values[1], triplet_loss(feats.bfloat16().float(), labels))


@pytest.mark.parametrize("fn", [triplet_loss, pairwise_circle_loss])
def test_pair_losses_reject_mismatched_shapes(fn):
    with pytest.raises(ValueError, match=r"\[B, D\]"):
        fn(torch.randn(4, 3), torch.tensor([0, 1]))
