"""Approximate indexes tuned to a recall target on the gallery they index (reid/search/tuning.py)."""
import logging

import numpy as np
import pytest
import torch

from reid.inference import build_index, load_index, save_index
from reid.search.indexes import search
from reid.search.tuning import exact_top, recall_at
from tests.inference.synthetic_features import clustered_features, tracklet_features

faiss = pytest.importorskip("faiss")


def uniform(num, dim, seed):
    """Features with no structure at all: the hardest case for an inverted file."""
    x = np.random.default_rng(seed).standard_normal((num, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def held_out_recall(index, gallery, queries):
    return recall_at(index.search(queries, 10).indices, search(queries, gallery, k=10).indices)


def test_nprobe_is_raised_until_the_target_is_met():
    gallery, queries = uniform(6000, 32, 0), uniform(200, 32, 1)
    fixed = build_index(gallery, "ivf", nlist=100, nprobe=4)
    assert fixed.nprobe == 4 and fixed.measured_recall < 0.9  # given: measured, not changed
    tuned = build_index(gallery, "ivf", nlist=100, target_recall=0.95)
    assert tuned.nprobe > 16 and tuned.measured_recall >= 0.95 and tuned.target_recall == 0.95
    tuned.set_search_params(nprobe=tuned.nprobe // 2)  # the step before was not enough
    rows = np.sort(np.random.default_rng(0).choice(6000, 512, replace=False))
    q = torch.from_numpy(gallery[rows])
    assert recall_at(tuned.search(q, 10).indices, exact_top(gallery, q, 10)) < 0.95
    assert held_out_recall(build_index(gallery, "ivf", nlist=100), gallery, queries) >= 0.93


@pytest.mark.slow
def test_ef_search_is_raised_for_a_sparse_graph_and_the_result_is_saved(tmp_path):
    gallery, queries = uniform(4000, 32, 2), uniform(200, 32, 3)
    tuned = build_index(gallery, "hnsw", hnsw_m=4, ef_construction=16, target_recall=0.98)
    assert tuned.measured_recall >= 0.98 and tuned.ef_search > 128
    back = load_index(save_index(tuned, tmp_path / "h.index"))
    assert back.ef_search == tuned.ef_search and back.measured_recall == tuned.measured_recall
    assert back.target_recall == 0.98 and held_out_recall(back, gallery, queries) >= 0.95


def test_a_target_that_cannot_be_reached_is_reported_with_what_to_do(caplog):
    gallery = uniform(3000, 32, 4)
    with caplog.at_level(logging.WARNING):
        pq = build_index(gallery, "ivf", nlist=20, pq_m=4, pq_nbits=4, target_recall=0.99)
    assert pq.nprobe == 20 and pq.measured_recall < 0.99  # every list scanned: the codes are the limit
    assert any("IVF-PQ ranks by compressed codes" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        build_index(gallery, "ivf", nlist=60, nprobe=1)
    assert any("leave nprobe unset to let it be tuned" in r.getMessage() for r in caplog.records)


def test_exact_backends_report_full_recall_and_bad_targets_are_refused():
    gallery = uniform(100, 8, 5)
    assert build_index(gallery, "exact").measured_recall == 1.0
    assert build_index(gallery, "faiss").measured_recall == 1.0
    for bad in (0, 1.5, "x", -0.1):
        with pytest.raises(ValueError, match=r"target_recall must"):
            build_index(gallery, "hnsw", target_recall=bad)


def tight_clusters(num, dim, num_queries, per_id=50, seed=0):
    """Many near-duplicates per identity (long tracks of one person): neighbours nearly tied."""
    return clustered_features(num, dim, num_queries=num_queries, per_id=per_id, seed=seed, noise=0.1)


# The default target on 200,000 clustered features with new queries: test_index_backends.py
# (test_default_parameters_reach_recall_095_at_200k); here the galleries of long tracks.
@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ivf", "hnsw"])
def test_the_target_holds_at_200k_on_long_tracks_of_near_duplicates(backend):
    gallery, queries = tight_clusters(200_000, 256, num_queries=500, seed=7)
    index = build_index(gallery, backend)
    assert index.measured_recall >= 0.95
    assert held_out_recall(index, gallery, queries) >= 0.95, repr(index)


def own_row_free_recall(index, gallery, rows, k=10):
    """Independent reference: each sample row's k nearest *other* gallery rows (exact, by a
    plain matrix product) against the index's k+1 answers with the row itself removed."""
    g = torch.nn.functional.normalize(torch.from_numpy(gallery), dim=1)
    sims = g[rows] @ g.T
    sims[torch.arange(len(rows)), torch.from_numpy(rows)] = -9.0
    truth = torch.topk(sims, k, dim=1).indices.numpy()
    found = index.search(gallery[rows], k + 1).indices
    hits = [len(set(f[f != r][:k]) & set(t)) for f, r, t in zip(found, rows, truth)]
    return float(np.mean(hits)) / k


def test_recall_is_measured_without_each_querys_own_row():
    """A row of the index finds itself; counted, that free hit made the recorded recall read
    higher than new queries get (the old measurement: recall@10 with the row's own match)."""
    gallery = uniform(5000, 32, 6)
    index = build_index(gallery, "ivf", nlist=100, nprobe=2)  # given, so not tuned: a weak index
    rows = index.recall_sample.rows
    assert len(rows) == 512 and index.recall_sample.truth.shape == (512, 10)
    assert not (index.recall_sample.truth == rows[:, None]).any()
    honest = own_row_free_recall(index, gallery, rows)
    assert index.measured_recall == pytest.approx(honest, abs=1e-9)
    with_itself = recall_at(index.search(gallery[rows], 10).indices,
                            search(gallery[rows], gallery, k=10).indices)
    assert with_itself > honest + 0.05  # what the old measurement recorded


def test_a_one_row_gallery_has_nothing_to_miss():
    index = build_index(uniform(1, 8, 7), "hnsw")
    assert index.measured_recall == 1.0 and index.recall_sample is None


def perturbed_crops(gallery, num, seed):
    """New crops of existing tracks: gallery rows moved by about the spread within a tracklet."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(len(gallery), num, replace=False)
    q = gallery[rows] + rng.standard_normal((num, gallery.shape[1])).astype(np.float32) * np.float32(
        0.25 / gallery.shape[1] ** 0.5)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["ivf", "hnsw"])
def test_the_target_holds_for_new_crops_of_tight_tracklets_at_200k(backend):
    """The issue's case: 200,000 x 256 crops in tracklets of 5 near-duplicates, queried with new
    crops of those tracks; every backend built for the default target meets it on them."""
    gallery, _, _ = tracklet_features(200_000, 256, seed=8)
    queries = perturbed_crops(gallery, 1000, seed=9)
    index = build_index(gallery, backend)
    recall = held_out_recall(index, gallery, queries)
    assert index.measured_recall >= 0.95 and recall >= index.target_recall == 0.95, (repr(index), recall)
