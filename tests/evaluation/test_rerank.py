"""re_ranking against a small dense implementation of the published k-reciprocal algorithm."""
import tracemalloc

import numpy as np
import pytest
import torch

from reid.evaluation import re_ranking


def dense_re_ranking(q, g, k1, k2, lambda_value, metric, dtype=np.float64):
    """The original algorithm (Zhong et al. 2017, published code) with dense N x N arrays,
    one item at a time. Returns (final q x g distances, number of items whose set grew in
    the expansion step), the latter so tests can check that they exercise that step.

    benchmarks/bench_evaluation.py runs this with dtype=float32 (as the published code)
    as the dense baseline."""
    x = np.concatenate([q, g]).astype(dtype)
    nq = len(q)
    v, dist, grown = dense_k_reciprocal(x, k1, k2, metric, dtype)
    jaccard = dense_jaccard(v, nq, dtype)
    final = (1.0 - lambda_value) * jaccard + lambda_value * dist[:nq]
    return final[:, nq:], grown


def dense_k_reciprocal(x, k1, k2, metric, dtype=np.float64):
    """S1-S5 of the published code, dense: (V [N, N], normalised distances [N, N], grown)."""
    n = len(x)
    if metric == "cosine":
        x = x / np.linalg.norm(x, axis=1, keepdims=True)
    # The published code's base distance: squared Euclidean distance of the features (of the
    # L2-normalised ones for cosine, where it is 2 - 2 cos), each row divided by its maximum.
    dist = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    dist = dist / dist.max(axis=1, keepdims=True)
    rank = np.argsort(dist, axis=1).astype(np.int32)

    def reciprocal(i, k):
        forward = rank[i, : k + 1]
        return forward[(rank[forward, : k + 1] == i).any(axis=1)]

    v = np.zeros((n, n), dtype)
    half = int(np.around(k1 / 2.0))
    grown = 0
    for i in range(n):
        r = reciprocal(i, k1)
        members = [r]
        for c in r:
            rc = reciprocal(c, half)
            if len(np.intersect1d(rc, r)) > 2.0 / 3.0 * len(rc):
                members.append(rc)
        e = np.unique(np.concatenate(members))
        grown += len(e) > len(r)
        w = np.exp(-dist[i, e])
        v[i, e] = w / w.sum()
    if k2 != 1:
        v_qe = np.zeros_like(v)
        for i in range(n):
            v_qe[i] = v[rank[i, :k2]].mean(axis=0)
        v = v_qe
    return v, dist, grown


def dense_jaccard(v, num_rows, dtype=np.float64):
    """S6's Jaccard distance of the first `num_rows` items to all, through the inverted index."""
    n = len(v)
    inv = [np.nonzero(v[:, c])[0] for c in range(n)]
    jaccard = np.zeros((num_rows, n), dtype)
    for i in range(num_rows):
        s = np.zeros(n, dtype)
        for c in np.nonzero(v[i])[0]:
            s[inv[c]] += np.minimum(v[i, c], v[inv[c], c])
        jaccard[i] = 1.0 - s / (2.0 - s)
    return jaccard


def test_cosine_equals_euclidean_on_normalised_features():
    # On unit vectors 1 - cos is half the squared Euclidean distance, so after the row
    # normalisation the published algorithm gives the same result for both metrics.
    q, g = _clustered(seed=3)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    np.testing.assert_allclose(re_ranking(q, g, metric="cosine"), re_ranking(q, g, metric="euclidean"),
                               atol=2e-5, rtol=0)


def _clustered(seed, num_ids=30, per_id=10, dim=16, noise=0.6, num_q=60):
    """Identity clusters, so k-reciprocal sets are large and the expansion step fires."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_ids, dim))
    x = centers[np.repeat(np.arange(num_ids), per_id)] + noise * rng.normal(size=(num_ids * per_id, dim))
    x = x[rng.permutation(len(x))].astype(np.float32)
    return x[:num_q], x[num_q:]


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize(
    "k1,k2,lam",
    [(20, 6, 0.3), (7, 1, 0.5), (5, 3, 0.0), (3, 2, 1.0), (10, 25, 0.3)],
)
def test_matches_dense_original(metric, k1, k2, lam):
    q, g = _clustered(seed=k1 + k2)
    ref, grown = dense_re_ranking(q, g, k1, k2, lam, metric)
    # block_size 37 splits the 300 items into uneven blocks: every merge path runs.
    out = re_ranking(q, g, k1=k1, k2=k2, lambda_value=lam, metric=metric, block_size=37)
    assert out.dtype == np.float32 and out.shape == (60, 240)
    np.testing.assert_allclose(out, ref, atol=1e-5, rtol=0)
    if k1 >= 7:
        assert grown > 0  # the half-k1 expansion changed some sets


@pytest.mark.slow
def test_default_block_and_torch_input():
    q, g = _clustered(seed=3)
    ref, _ = dense_re_ranking(q, g, 20, 6, 0.3, "cosine")
    np.testing.assert_allclose(re_ranking(torch.from_numpy(q), torch.from_numpy(g)), ref, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_large_blocks_through_onednn():
    # 520 items of dimension 256: the one diagonal block is large enough for the oneDNN
    # product (where the build has it), the path real-size inputs take.
    q, g = _clustered(seed=6, num_ids=40, per_id=13, dim=256, noise=3.0, num_q=80)
    ref, grown = dense_re_ranking(q, g, 20, 6, 0.3, "cosine")
    np.testing.assert_allclose(re_ranking(q, g), ref, atol=1e-5, rtol=0)
    assert grown > 0


def test_fewer_items_than_k1():
    q, g = _clustered(seed=4, num_ids=3, per_id=4, num_q=4)  # N = 12 < k1 + 1
    ref, _ = dense_re_ranking(q, g, 20, 6, 0.3, "euclidean")
    np.testing.assert_allclose(re_ranking(q, g, metric="euclidean"), ref, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_no_dense_n_by_n_numpy_array():
    # N = 6000: one dense N x N float32 array would take 144 MB; the output is 11 MB.
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6000, 8)).astype(np.float32)
    tracemalloc.start()
    try:
        re_ranking(x[:500], x[500:], k1=10, k2=3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 60e6, f"numpy peak {peak / 1e6:.0f} MB"


def test_bad_arguments():
    q, g = _clustered(seed=5)
    with pytest.raises(ValueError, match="k1 must be an integer >= 1"):
        re_ranking(q, g, k1=0)
    with pytest.raises(ValueError, match="k2 must be"):
        re_ranking(q, g, k2=0)
    with pytest.raises(ValueError, match=r"lambda_value must lie in \[0, 1\]"):
        re_ranking(q, g, lambda_value=1.5)
    with pytest.raises(ValueError, match="Valid metrics: cosine, euclidean"):
        re_ranking(q, g, metric="l1")
    bad = g.copy()
    bad[3, 0] = np.nan
    with pytest.raises(ValueError, match="g_feats contains NaN"):
        re_ranking(q, bad)
    with pytest.raises(ValueError, match="q_feats is empty"):
        re_ranking(q[:0], g)


def test_membership_by_sorted_keys_is_the_pairwise_comparison():
    from reid.evaluation.rerank import _members_of

    rng = np.random.default_rng(3)
    items = rng.integers(0, 50, (40, 7, 5))
    sets = np.where(rng.random((40, 9)) < 0.3, -1, rng.integers(0, 50, (40, 9)))
    want = (items[:, :, :, None] == sets[:, None, None, :]).any(axis=3)
    np.testing.assert_array_equal(_members_of(items, sets, 50), want)
    assert want.any() and not want.all()
