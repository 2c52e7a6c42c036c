"""Nearest neighbours for re-ranking and clustering: the exact block pass and the approximate
inverted-file pass (reid/evaluation/neighbours.py), the size threshold and the settings."""
import logging
import sys

import numpy as np
import pytest
import torch

from reid.config import ConfigError, get_cfg
from reid.evaluation import neighbours as neighbours_module
from reid.evaluation import re_ranking
from reid.evaluation.distance import prepare_features
from reid.evaluation.jaccard import jaccard_graph
from reid.evaluation.neighbours import NeighbourSearch, exact_pass, ivf_pass, nearest_neighbours
from reid.uda import ClusterSettings, dbscan, pseudo_label_scores
from tests.inference.synthetic_features import tracklet_features

faiss = pytest.importorskip("faiss")


def separated(num_groups=40, per_group=25, dim=32, seed=0):
    """Tight groups on random directions: every item's nearest others are its group's."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((num_groups, dim)).astype(np.float32)
    x = np.repeat(centres, per_group, axis=0) + 0.05 * rng.standard_normal((num_groups * per_group, dim)).astype(
        np.float32)
    return x, np.repeat(np.arange(num_groups), per_group)


def prepared(x, metric):
    return prepare_features(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)), metric)


def singletons(labels):
    out = labels.copy()
    out[out < 0] = out.max(initial=-1) + 1 + np.arange(int((out < 0).sum()))
    return out


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_on_separated_groups_the_approximate_lists_are_the_exact_ones(metric):
    x, groups = separated()
    xt, sq = prepared(x, metric)
    k = 20  # within the 25 items of a group
    exact = exact_pass(xt, sq, 0, metric, k)
    # 1,000 items in cells of ~16, each probing 4 cells: the pass sees a tenth of the items.
    approx = ivf_pass(xt, sq, 0, metric, k, list_size=16, nprobe=4, far_probe=4)
    # The same items (two products of different libraries may order near-ties differently),
    # at the same distances.
    np.testing.assert_array_equal(np.sort(approx.indices, axis=1), np.sort(exact.indices, axis=1))
    # (euclidean: sqrt of a rounding error near 0 differs by up to 0.004 between libraries)
    np.testing.assert_allclose(approx.distances, exact.distances, rtol=1e-5, atol=1e-6 if metric == "cosine" else 5e-3)
    assert (approx.indices[:, 0] == np.arange(len(x))).all()  # each list starts with its item
    assert (groups[approx.indices] == groups[:, None]).all()
    # The largest distance is sought on the far side: a lower bound, close to the true one.
    assert (approx.row_max <= exact.row_max * (1 + 1e-6)).all()
    assert np.median(approx.row_max / exact.row_max) > 0.97


def test_the_approximate_pass_measures_how_many_exact_neighbours_it_finds(caplog):
    x, _ = separated(num_groups=30, per_group=25, seed=6)
    xt, sq = prepared(x, "cosine")
    with caplog.at_level(logging.INFO, logger="reid.evaluation.neighbours"):
        good = nearest_neighbours(xt, sq, 0, "cosine", 20, NeighbourSearch("ivf", list_size=16, nprobe=4))
    assert good.recall == 1.0 and exact_pass(xt, sq, 0, "cosine", 20).recall is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("ivf neighbour pass: the 20 nearest of 750 items in ") and \
        line.endswith("s; its lists hold 100% of the exact neighbours (measured on 256 items)")
    # Directions without any structure: cells of 16 probing 2 cells find few true neighbours.
    noise = np.random.default_rng(7).standard_normal((2000, 64)).astype(np.float32)
    nt, nsq = prepared(noise, "cosine")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="reid.evaluation.neighbours"):
        bad = nearest_neighbours(nt, nsq, 0, "cosine", 20, NeighbourSearch("ivf", list_size=16, nprobe=2))
    exact = exact_pass(nt, nsq, 0, "cosine", 20).indices
    rows = np.sort(np.random.default_rng(0).choice(2000, 256, replace=False))
    found = np.mean([len(set(bad.indices[r]) & set(exact[r])) / 20 for r in rows])
    assert bad.recall == pytest.approx(found) and bad.recall < 0.5
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == [f"The approximate neighbour pass finds only {100 * bad.recall:.0f}% of the exact 20 nearest "
                       "neighbours of these 2000 features: its clusters (or re-ranked distances) will differ noticeably "
                       "from the exact pass's; where its time allows, use it (NEIGHBOURS exact, or a higher "
                       "APPROX_MIN_SIZE)."]


def test_query_rows_get_exact_gallery_distances_and_maxima():
    x, _ = separated(num_groups=20, per_group=20, seed=1)
    xt, sq = prepared(x, "cosine")
    exact = exact_pass(xt, sq, 50, "cosine", 10)
    approx = ivf_pass(xt, sq, 50, "cosine", 10, list_size=16, nprobe=3)
    np.testing.assert_allclose(approx.qg, exact.qg, atol=1e-6)
    np.testing.assert_allclose(approx.row_max[:50], exact.row_max[:50], atol=1e-6)


def test_re_ranking_and_the_jaccard_graph_take_either_pass():
    x, groups = separated(num_groups=30, per_group=20, dim=24, seed=2)
    wide = NeighbourSearch("ivf", list_size=16, nprobe=200)  # probes every cell: exact lists
    a = re_ranking(x[:60], x[60:], k1=8, k2=3)
    b = re_ranking(x[:60], x[60:], k1=8, k2=3, neighbours=wide)
    np.testing.assert_allclose(b, a, atol=1e-6)
    g_exact = jaccard_graph(x, 8, 3, 0.6)
    g_approx = jaccard_graph(x, 8, 3, 0.6, neighbours=NeighbourSearch("ivf", list_size=16, nprobe=4))
    assert (g_exact != g_approx).nnz == 0 or abs(g_exact - g_approx).max() < 1e-6
    np.testing.assert_array_equal(dbscan(g_approx, 0.6, 4), dbscan(g_exact, 0.6, 4))


@pytest.mark.slow
def test_clusters_of_tracklets_agree_with_the_exact_ones():
    """Crops in tracklets across cameras (the benchmark's generator, small): probing about a
    quarter of the cells, the approximate graph gives nearly the exact clusters; probing too
    few cells visibly does not (the check can fail)."""
    x, pids, _ = tracklet_features(6000, 64, seed=3)
    exact = dbscan(jaccard_graph(x, 20, 6, 0.6), 0.6, 4)
    wide = dbscan(jaccard_graph(x, 20, 6, 0.6, neighbours=NeighbourSearch("ivf", list_size=32, nprobe=48)), 0.6, 4)
    narrow = dbscan(jaccard_graph(x, 20, 6, 0.6, neighbours=NeighbourSearch("ivf", list_size=32, nprobe=2)), 0.6, 4)
    ari_wide = pseudo_label_scores(wide, singletons(exact))["ari"]
    ari_narrow = pseudo_label_scores(narrow, singletons(exact))["ari"]
    assert ari_wide >= 0.95, ari_wide
    assert ari_narrow < ari_wide - 0.1, (ari_narrow, ari_wide)


def test_the_size_threshold_picks_the_pass(caplog):
    search = NeighbourSearch("auto", approx_min_size=500)
    assert [search.route(n) for n in (1, 499, 500, 10**7)] == ["exact", "exact", "ivf", "ivf"]
    assert NeighbourSearch("exact").route(10**9) == "exact" and NeighbourSearch("ivf").route(2) == "ivf"
    x, _ = separated(num_groups=25, per_group=20, seed=4)
    xt, sq = prepared(x, "cosine")
    for size, route in ((501, "exact"), (500, "ivf")):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="reid.evaluation.neighbours"):
            nearest_neighbours(xt, sq, 0, "cosine", 5, NeighbourSearch("auto", approx_min_size=size))
        assert [r.getMessage().split()[0] for r in caplog.records] == [route]


def test_without_faiss_auto_stays_exact_with_a_warning_and_ivf_says_how_to_install(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "faiss", None)
    monkeypatch.setattr(neighbours_module, "_TOLD_NO_FAISS", set())
    x, _ = separated(num_groups=10, per_group=10, seed=5)
    xt, sq = prepared(x, "cosine")
    with caplog.at_level(logging.WARNING, logger="reid.evaluation.neighbours"):
        # Asked every epoch by clustering: said once.
        for _ in range(3):
            out = nearest_neighbours(xt, sq, 0, "cosine", 5, NeighbourSearch("auto", approx_min_size=10))
    np.testing.assert_array_equal(out.indices, exact_pass(xt, sq, 0, "cosine", 5).indices)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "faiss is not installed: the neighbours are computed exactly" in warning
    assert "pip install faiss-cpu" in warning and "\n" not in warning
    with pytest.raises(ImportError, match=r"^The 'ivf' neighbour backend needs the faiss package: pip install "
                                          r"faiss-cpu .*or use the 'exact' backend\.$"):
        nearest_neighbours(xt, sq, 0, "cosine", 5, NeighbourSearch("ivf"))


@pytest.mark.parametrize("backend", ["faiss", "hnsw", "", "approx"])
def test_an_unknown_backend_is_one_line_listing_the_valid_ones(backend):
    with pytest.raises(ValueError, match=rf"^neighbour backend '{backend}' is not one of: auto, exact, ivf\.$"):
        NeighbourSearch(backend)


@pytest.mark.parametrize("size", [0, -3, 2.5, "100", True, None])
def test_a_size_threshold_that_is_not_a_positive_integer_is_refused(size):
    with pytest.raises(ValueError, match=rf"^approx_min_size must be a positive integer \(items\), got {size!r}\.$"):
        NeighbourSearch("auto", approx_min_size=size)


def test_config_settings_are_checked_naming_their_keys():
    cfg = get_cfg()
    assert ClusterSettings.from_cfg(cfg).neighbours == NeighbourSearch(
        "auto", 500_000, backend_key="UDA.NEIGHBOURS", size_key="UDA.APPROX_MIN_SIZE")
    cfg.UDA.NEIGHBOURS = "HNSW"
    with pytest.raises(ValueError, match=r"^UDA.NEIGHBOURS 'HNSW' is not one of: auto, exact, ivf\.$"):
        ClusterSettings.from_cfg(cfg)
    cfg.UDA.NEIGHBOURS = "Exact"
    cfg.UDA.APPROX_MIN_SIZE = 0
    with pytest.raises(ValueError, match=r"^UDA.APPROX_MIN_SIZE must be a positive integer \(items\), got 0\.$"):
        ClusterSettings.from_cfg(cfg)
    from reid.evaluation.eval_sets import check_test_settings

    cfg = get_cfg()
    cfg.TEST.RERANK.APPROX_MIN_SIZE = -1
    with pytest.raises(ConfigError, match=r"^TEST.RERANK.APPROX_MIN_SIZE must be a positive integer \(items\), "
                                          r"got -1\.$"):
        check_test_settings(cfg)
    cfg.TEST.RERANK.APPROX_MIN_SIZE = 10
    cfg.TEST.RERANK.NEIGHBOURS = "annoy"
    with pytest.raises(ConfigError, match=r"^TEST.RERANK.NEIGHBOURS 'annoy' is not one of: auto, exact, ivf\.$"):
        check_test_settings(cfg)
    cfg.TEST.RERANK.NEIGHBOURS = "auto"
    cfg.TEST.RERANK.APPROX_PROBES = 0
    with pytest.raises(ConfigError, match=r"^TEST.RERANK.APPROX_PROBES must be a positive integer \(cells of the "
                                          r"approximate pass\), got 0\.$"):
        check_test_settings(cfg)
    cfg = get_cfg()
    cfg.UDA.APPROX_PROBES = 512
    assert ClusterSettings.from_cfg(cfg).neighbours.nprobe == 512  # reaches the pass


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_the_approximate_lists_do_not_depend_on_the_block_size(metric, monkeypatch):
    from reid.evaluation import ivf_neighbours

    x, _ = separated()
    xt, sq = prepared(x, metric)
    whole = ivf_pass(xt, sq, 0, metric, 20, list_size=16, nprobe=4, far_probe=4)
    # A cell's candidates in blocks of ~3 columns: the near/far split falls inside blocks.
    monkeypatch.setattr(ivf_neighbours, "_BLOCK_ELEMENTS", 64)
    split = ivf_pass(xt, sq, 0, metric, 20, list_size=16, nprobe=4, far_probe=4)
    # Other block shapes round the products differently: near-ties may trade places, nothing else.
    same = np.mean([len(set(a) & set(b)) / 20 for a, b in zip(split.indices, whole.indices)])
    assert same > 0.995
    np.testing.assert_allclose(split.distances, whole.distances, rtol=1e-5, atol=1e-6 if metric == "cosine" else 5e-3)
    np.testing.assert_allclose(split.row_max, whole.row_max, rtol=1e-5)
