"""CMC and mAP equal torchreid 0.2.5's own evaluation (its rank.py and distance.py, run from its source
distribution: tests/_references.py) on the same features, Market-1501's protocol (same identity and
camera left out), queries without a match skipped as torchreid skips them."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from reid.evaluation.rank import evaluate_rank, evaluate_rank_from_features
from tests._references import torchreid_module


def _torchreid():
    with warnings.catch_warnings():  # "Cython evaluation ... unavailable": its Python evaluation is the reference
        warnings.simplefilter("ignore")
        return torchreid_module("reid/metrics/rank.py"), torchreid_module("reid/metrics/distance.py")


def _features(seed, num_q=40, num_g=300, dim=32, people=60, cameras=4):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(people, dim))
    q_pids, g_pids = rng.integers(0, people, num_q), rng.integers(0, people, num_g)
    qf = centres[q_pids] + rng.normal(scale=1.2, size=(num_q, dim))
    gf = centres[g_pids] + rng.normal(scale=1.2, size=(num_g, dim))
    q_cams, g_cams = rng.integers(0, cameras, num_q), rng.integers(0, cameras, num_g)
    return (torch.tensor(qf, dtype=torch.float32), torch.tensor(gf, dtype=torch.float32), q_pids, g_pids,
            q_cams, g_cams)


@pytest.mark.parametrize("metric", ["euclidean", "cosine"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cmc_and_map_equal_torchreids_on_the_same_distances(metric, seed):
    rank, distance = _torchreid()
    qf, gf, q_pids, g_pids, q_cams, g_cams = _features(seed)
    distmat = distance.compute_distance_matrix(qf, gf, metric).numpy().astype(np.float64)
    # no ties within a row: torchreid's quicksort orders ties arbitrarily
    assert all(len(np.unique(row)) == len(row) for row in distmat)
    cmc, mAP = rank.evaluate_rank(distmat, q_pids, g_pids, q_cams, g_cams, max_rank=20, use_cython=False)
    ours = evaluate_rank(distmat, q_pids, g_pids, q_cams, g_cams, max_rank=20)
    np.testing.assert_allclose(ours["cmc"], cmc, rtol=0, atol=1e-6)
    assert ours["mAP"] == pytest.approx(mAP, abs=1e-9)
    # from the features, without the whole matrix (our cosine distance is torchreid's: 1 - cosine similarity)
    ours = evaluate_rank_from_features(qf, gf, q_pids, g_pids, q_cams, g_cams, metric=metric, max_rank=20)
    np.testing.assert_allclose(ours["cmc"], cmc, rtol=0, atol=1e-6)
    assert ours["mAP"] == pytest.approx(mAP, abs=1e-6)


def test_queries_whose_identity_the_gallery_lacks_are_skipped_as_torchreid_skips_them():
    rank, distance = _torchreid()
    qf, gf, q_pids, g_pids, q_cams, g_cams = _features(3)
    q_pids = q_pids.copy()
    q_pids[:5] = 10_000 + np.arange(5)  # five queries nobody in the gallery matches
    distmat = distance.compute_distance_matrix(qf, gf, "euclidean").numpy().astype(np.float64)
    cmc, mAP = rank.evaluate_rank(distmat, q_pids, g_pids, q_cams, g_cams, max_rank=10, use_cython=False)
    ours = evaluate_rank(distmat, q_pids, g_pids, q_cams, g_cams, max_rank=10)
    assert ours["num_valid_queries"] <= len(q_pids) - 5
    np.testing.assert_allclose(ours["cmc"], cmc, rtol=0, atol=1e-6)
    assert ours["mAP"] == pytest.approx(mAP, abs=1e-9)
