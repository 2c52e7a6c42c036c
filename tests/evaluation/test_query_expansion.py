"""aqe against the alpha-QE formula written out per query."""
import numpy as np
import pytest
import torch

from reid.evaluation import aqe


def brute_aqe(q, g, k, alpha):
    q = q / np.linalg.norm(q, axis=1, keepdims=True)
    g = g / np.linalg.norm(g, axis=1, keepdims=True)
    out = []
    for row in q:
        sim = g @ row
        top = np.argsort(-sim, kind="stable")[:k]
        expanded = row + sum(max(sim[j], 0.0) ** alpha * g[j] for j in top)
        out.append(expanded / np.linalg.norm(expanded))
    return np.array(out)


@pytest.mark.parametrize("k,alpha", [(5, 3.0), (1, 1.0), (3, 0.0), (50, 3.0), (0, 3.0)])
def test_matches_formula(k, alpha):
    rng = np.random.default_rng(k)
    q = rng.normal(size=(17, 8)).astype(np.float32)
    g = rng.normal(size=(40, 8)).astype(np.float32)
    out = aqe(q, g, k=k, alpha=alpha, chunk_size=4)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_allclose(out, brute_aqe(q.astype(np.float64), g.astype(np.float64), min(k, 40), alpha), atol=1e-5)


def test_torch_in_torch_out_and_inputs_untouched():
    gen = torch.Generator().manual_seed(0)
    q, g = torch.randn(6, 4, generator=gen), torch.randn(9, 4, generator=gen)
    q0, g0 = q.clone(), g.clone()
    out = aqe(q, g, k=2)
    assert isinstance(out, torch.Tensor) and out.shape == (6, 4)
    assert torch.equal(q, q0) and torch.equal(g, g0)
    np.testing.assert_allclose(out.numpy(), brute_aqe(q.double().numpy(), g.double().numpy(), 2, 3.0), atol=1e-5)


def test_bad_arguments():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="k must be an integer >= 0"):
        aqe(x, x, k=-1)
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        aqe(x, x, alpha=-1.0)
    with pytest.raises(ValueError, match="q_feats has dimension 4 but g_feats has 3"):
        aqe(x, np.ones((3, 3), np.float32))
