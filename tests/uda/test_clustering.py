"""Pseudo-labels: DBSCAN on the sparse Jaccard graph, against an independent core-point reference."""
import numpy as np
import pytest
import scipy.sparse as sp
import torch
from scipy.sparse.csgraph import connected_components

from reid.uda import ClusterSettings, cluster_centroids, cluster_features, dbscan


def _same_partition(a, b):
    """Whether two labelings split the items the same way (label values may differ)."""
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


def _random_graph(n, eps, seed):
    rng = np.random.default_rng(seed)
    d = rng.uniform(0, 1, (n, n)) ** 0.3
    d = np.minimum(d, d.T)
    np.fill_diagonal(d, 0)
    keep = d <= eps
    r, c = np.nonzero(keep)
    return sp.csr_matrix((d[r, c], (r, c)), shape=(n, n)), keep


@pytest.mark.parametrize("seed,min_samples", [(0, 3), (1, 4), (2, 2)])
def test_dbscan_on_the_sparse_graph_matches_the_definition(seed, min_samples):
    eps = 0.35
    graph, within = _random_graph(60, eps, seed)
    labels = dbscan(graph, eps, min_samples)
    # DBSCAN (Ester et al. 1996): a core point has >= min_samples points within eps (itself
    # included); clusters are the connected core points, plus border points next to a core.
    core = within.sum(axis=1) >= min_samples
    core_idx = np.flatnonzero(core)
    _, comp = connected_components(sp.csr_matrix(within[np.ix_(core_idx, core_idx)]), directed=False)
    assert core.any() and (labels[core] >= 0).all()
    assert _same_partition(labels[core], comp)
    for i in np.flatnonzero(~core):
        near = core_idx[within[i, core_idx]]
        if near.size:  # border: joins the cluster of one of its core neighbours
            assert labels[i] in set(labels[near].tolist())
        else:
            assert labels[i] == -1
    assert set(labels.tolist()) - {-1} == set(range(labels.max() + 1))


def test_cluster_features_recovers_separated_identities_and_outliers():
    rng = np.random.default_rng(4)
    centres = rng.normal(size=(8, 32))
    truth = np.repeat(np.arange(8), 12)
    feats = centres[truth] + 0.15 * rng.normal(size=(96, 32))
    lonely = rng.normal(size=(3, 32)) * 3  # three one-off images far from everyone
    x = torch.from_numpy(np.concatenate([feats, lonely]).astype(np.float32))
    x = torch.nn.functional.normalize(x, dim=1)
    clusters = cluster_features(x, ClusterSettings(k1=11, k2=2, eps=0.6, min_samples=4))
    assert clusters.num_clusters == 8 and clusters.kept == 96
    assert _same_partition(clusters.labels[:96], truth)
    assert (clusters.labels[96:] == -1).all()
    centroids = cluster_centroids(x, clusters.labels, clusters.num_clusters)
    for k in range(8):
        torch.testing.assert_close(centroids[k], x[:96][torch.from_numpy(clusters.labels[:96] == k)].mean(0))


@pytest.mark.parametrize("key,value,match", [
    ("EPS", 1.0, r"UDA.EPS must lie in \(0, 1\)"),
    ("EPS", 0.0, r"UDA.EPS must lie in \(0, 1\)"),
    ("MIN_SAMPLES", 0, "UDA.MIN_SAMPLES must be >= 1"),
    ("K1", 0, "UDA.K1 and UDA.K2 must be >= 1"),
])
def test_bad_settings_name_the_key(key, value, match):
    from reid.config import get_cfg

    cfg = get_cfg()
    setattr(cfg.UDA, key, value)
    with pytest.raises(ValueError, match=match):
        ClusterSettings.from_cfg(cfg)
