"""The sparse all-pairs k-reciprocal Jaccard graph against the dense published algorithm."""
import numpy as np
import pytest
import torch

from reid.evaluation.jaccard import jaccard_graph
from tests.evaluation.test_rerank import _clustered, dense_jaccard, dense_k_reciprocal


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("k1,k2,eps", [(20, 6, 0.6), (7, 1, 0.5), (5, 3, 0.8), (10, 4, 0.3)])
def test_graph_holds_exactly_the_dense_pairs_within_eps(metric, k1, k2, eps):
    q, g = _clustered(seed=11, num_ids=12, per_id=8, num_q=0)
    x = np.concatenate([q, g])
    v, _, _ = dense_k_reciprocal(x.astype(np.float64), k1, k2, metric)
    dense = dense_jaccard(v, len(x))
    graph = jaccard_graph(x, k1, k2, eps, metric)
    assert graph.shape == dense.shape
    within = dense <= eps + 1e-9
    stored = np.zeros_like(within)
    coo = graph.tocoo()
    stored[coo.row, coo.col] = True
    # Pairs right at the border may fall either way by float rounding; none is that close here.
    assert np.abs(dense - eps).min() > 1e-6
    np.testing.assert_array_equal(stored, within)
    np.testing.assert_allclose(coo.data, np.maximum(dense[coo.row, coo.col], 0), atol=1e-6)
    np.testing.assert_array_equal(graph.diagonal(), 0)
    assert (graph != graph.T).nnz == 0


def test_graph_takes_torch_features_and_leaves_them_untouched():
    q, g = _clustered(seed=2, num_ids=6, per_id=6, num_q=0)
    x = torch.from_numpy(np.concatenate([q, g]) * 3)
    before = x.clone()
    a = jaccard_graph(x, 5, 2, 0.7)
    torch.testing.assert_close(x, before)  # the encoding normalises a copy
    b = jaccard_graph(before.numpy(), 5, 2, 0.7)
    assert (a != b).nnz == 0


@pytest.mark.parametrize("eps", [1.0, -0.1, 1.5])
def test_eps_outside_its_range_is_refused(eps):
    with pytest.raises(ValueError, match=r"max_distance must lie in \[0, 1\)"):
        jaccard_graph(np.eye(4, dtype=np.float32), 2, 1, eps)


def test_a_stop_request_abandons_the_graph_and_re_ranking_between_chunks():
    # A training run stopped by a scheduler gives up its clustering (learning without labels) and its
    # re-ranked evaluation instead of finishing them past the scheduler's grace period.
    import signal

    from reid.evaluation import re_ranking
    from reid.utils import stop_request

    feats = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    stop_request.request_stop(signal.SIGUSR1)
    try:
        with pytest.raises(stop_request.StopRequested, match="abandoned: SIGUSR1 asked the run to stop"):
            jaccard_graph(feats, k1=5, k2=2)
        with pytest.raises(stop_request.StopRequested):
            re_ranking(feats[:10], feats[10:], k1=5, k2=2)
    finally:
        stop_request.clear_stop()
    assert jaccard_graph(feats, k1=5, k2=2).shape == (40, 40)
