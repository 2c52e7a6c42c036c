"""compute_distance against float64 brute force, plus its input checks."""
import numpy as np
import pytest
import torch

from reid.evaluation import compute_distance


def _brute(q, g, metric):
    q = q.astype(np.float64)
    g = g.astype(np.float64)
    if metric == "cosine":
        qn = q / np.linalg.norm(q, axis=1, keepdims=True)
        gn = g / np.linalg.norm(g, axis=1, keepdims=True)
        return 1.0 - qn @ gn.T
    return np.stack([np.sqrt(((g - row) ** 2).sum(axis=1)) for row in q])


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("chunk_size", [None, 1, 7])
def test_matches_brute_force(metric, chunk_size):
    rng = np.random.default_rng(0)
    # A large common offset: the |a|^2 + |b|^2 - 2ab form must still be accurate.
    q = (rng.normal(size=(23, 16)) + 5.0).astype(np.float32)
    g = (rng.normal(size=(31, 16)) + 5.0).astype(np.float32)
    d = compute_distance(q, g, metric=metric, chunk_size=chunk_size)
    assert d.dtype == np.float32 and d.shape == (23, 31)
    np.testing.assert_allclose(d, _brute(q, g, metric), atol=2e-5, rtol=1e-5)


def test_torch_input_and_self_distance():
    x = torch.randn(10, 8, generator=torch.Generator().manual_seed(0))
    # Self distances come out of a matrix product, so they are zero only up to rounding;
    # the Euclidean square root turns a ~1e-7 residue of d^2 into ~1e-3.
    for metric, tol in (("cosine", 1e-6), ("euclidean", 1e-2)):
        d = compute_distance(x, x, metric=metric)
        assert isinstance(d, np.ndarray)
        np.testing.assert_allclose(np.diag(d), 0.0, atol=tol)
        np.testing.assert_allclose(d, _brute(x.numpy(), x.numpy(), metric), atol=tol)
        assert (d >= 0).all()
    assert (compute_distance(x, -x, metric="cosine") <= 2.0).all()


def test_metric_name_is_case_insensitive():
    x = np.eye(3, dtype=np.float32)
    np.testing.assert_array_equal(compute_distance(x, x, "Cosine"), compute_distance(x, x, "cosine"))


def test_unknown_metric_lists_valid_ones():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="cosine, euclidean"):
        compute_distance(x, x, metric="manhattan")


@pytest.mark.parametrize("which", ["q_feats", "g_feats"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_features_name_the_argument(which, bad):
    q = np.ones((3, 4), np.float32)
    g = np.ones((5, 4), np.float32)
    (q if which == "q_feats" else g)[1, 2] = bad
    with pytest.raises(ValueError, match=f"{which} contains NaN or inf .*row: 1"):
        compute_distance(q, g)


def test_empty_and_mismatched_inputs():
    x = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match="q_feats is empty"):
        compute_distance(np.ones((0, 4), np.float32), x)
    with pytest.raises(ValueError, match="g_feats is empty"):
        compute_distance(x, np.ones((0, 4), np.float32))
    with pytest.raises(ValueError, match="q_feats has dimension 4 but g_feats has 5"):
        compute_distance(x, np.ones((2, 5), np.float32))
    with pytest.raises(ValueError, match="must be 2-D"):
        compute_distance(np.ones(4, np.float32), x)
    with pytest.raises(ValueError, match="chunk_size"):
        compute_distance(x, x, chunk_size=0)


@pytest.mark.slow
@pytest.mark.parametrize("onednn", [True, False])
def test_large_products_on_both_cpu_paths(monkeypatch, onednn):
    # 300 x 1200 x 256 multiply-adds is above the size where oneDNN is used (when present).
    from reid.evaluation import distance

    monkeypatch.setattr(distance, "_onednn_ok", distance._onednn_ok and onednn)
    assert distance._onednn_wanted(300, 1200, 256, torch.device("cpu")) == distance._onednn_ok
    rng = np.random.default_rng(1)
    q = (rng.normal(size=(300, 256)) + 1.0).astype(np.float32)
    g = (rng.normal(size=(1200, 256)) + 1.0).astype(np.float32)
    for metric in ("cosine", "euclidean"):
        d = compute_distance(q, g, metric=metric, chunk_size=300)
        np.testing.assert_allclose(d, _brute(q, g, metric), atol=1e-5, rtol=1e-5)
