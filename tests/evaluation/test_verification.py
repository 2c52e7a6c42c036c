"""Verification metrics (TAR@FAR, thresholds, EER, ROC) against a brute-force reference that
lists every counted pair and sorts."""
import math

import numpy as np
import pytest
import torch

from reid.evaluation import compute_distance
from reid.evaluation.verification import (
    float_keys,
    key_values,
    verification_metrics,
    verification_metrics_from_features,
)


def brute_force(distmat, q_pids, g_pids, q_cams, g_cams, fars):
    same = q_pids[:, None] == g_pids[None, :]
    junk = same & (q_cams[:, None] == g_cams[None, :])
    gen = np.sort(distmat[same & ~junk].astype(np.float32))
    imp = np.sort(distmat[~same].astype(np.float32))
    out = {"tar": {}, "threshold": {}, "far_reached": {}}
    for f in fars:
        t = imp[int(math.floor(f * len(imp)))]
        out["threshold"][f] = float(t)
        out["tar"][f] = float(np.mean(gen < t))
        out["far_reached"][f] = float(np.mean(imp < t))
    candidates = np.concatenate([np.unique(np.concatenate([gen, imp])), [np.inf]])
    far = np.searchsorted(imp, candidates, side="left") / len(imp)
    frr = 1 - np.searchsorted(gen, candidates, side="left") / len(gen)
    i1 = int(np.flatnonzero(far >= frr)[0])
    i0 = i1 - 1
    assert max(far[i1], frr[i0]) >= np.maximum(far, frr).min()  # the crossing holds the minimum
    out["eer"] = float(min(far[i1], frr[i0]))
    assert out["eer"] == np.maximum(far, frr).min()
    out["eer_threshold"] = float(candidates[i1] if far[i1] <= frr[i0] else candidates[i0])
    return out, len(gen), len(imp)


def problem(seed, num_q=60, num_g=400, ids=25, cams=4, quantize=None):
    rng = np.random.default_rng(seed)
    q_pids, g_pids = rng.integers(0, ids, num_q), rng.integers(0, ids + 5, num_g)  # some gallery-only ids
    q_cams, g_cams = rng.integers(0, cams, num_q), rng.integers(0, cams, num_g)
    d = rng.random((num_q, num_g)).astype(np.float32) + 0.6 * (q_pids[:, None] != g_pids[None, :])
    if quantize:
        d = np.round(d * quantize) / quantize  # many exact ties
    return d.astype(np.float32), q_pids, g_pids, q_cams, g_cams


@pytest.mark.parametrize("seed, quantize", [(0, None), (1, None), (2, 20), (3, 3)])
def test_matches_the_brute_force_reference_exactly(seed, quantize):
    fars = (0.3, 1e-2, 1e-3, 1e-4)
    d, *ids = problem(seed, quantize=quantize)
    ref, n_gen, n_imp = brute_force(d, *ids, fars)
    got = verification_metrics(d, *ids, fars=fars)
    assert got["num_genuine"] == n_gen and got["num_impostor"] == n_imp
    for key in ("tar", "threshold", "far_reached"):
        assert got[key] == ref[key], key
    assert got["eer"] == ref["eer"] and got["eer_threshold"] == ref["eer_threshold"]
    assert all(got["far_reached"][f] <= f for f in fars)  # ties at the threshold are rejected


def test_roc_is_monotone_and_exact_at_its_points():
    d, *ids = problem(4)
    roc = verification_metrics(d, *ids)["roc"]
    assert np.all(np.diff(roc["far"]) >= 0) and np.all(np.diff(roc["tar"]) >= 0)
    assert np.all(np.diff(roc["threshold"]) >= 0)
    ref, _, _ = brute_force(d, *ids, [float(f) for f in roc["far"] if f > 0][:5])
    for f in list(ref["tar"])[:5]:
        i = int(np.flatnonzero(roc["far"] == f)[0])
        assert roc["tar"][i] == pytest.approx(ref["tar"][f], abs=1e-12) or roc["far"][i] < f


def test_from_features_equals_the_matrix_version_and_negative_distances_order_right():
    rng = np.random.default_rng(5)
    q, g = rng.standard_normal((30, 8)).astype(np.float32), rng.standard_normal((200, 8)).astype(np.float32)
    ids = (rng.integers(0, 10, 30), rng.integers(0, 10, 200), rng.integers(0, 3, 30), rng.integers(0, 3, 200))
    a = verification_metrics_from_features(q, g, *ids, metric="euclidean", fars=(0.1, 0.01))
    b = verification_metrics(compute_distance(q, g, metric="euclidean"), *ids, fars=(0.1, 0.01))
    assert a["tar"] == b["tar"] and a["threshold"] == b["threshold"] and a["eer"] == b["eer"]
    shifted = np.asarray(compute_distance(q, g, metric="cosine")) - 1.0  # distances in [-1, 1]
    ref, _, _ = brute_force(shifted, *ids, (0.1,))
    got = verification_metrics(torch.from_numpy(shifted), *ids, fars=(0.1,))
    assert got["threshold"] == ref["threshold"] and got["eer"] == ref["eer"]


def test_keys_order_like_the_floats_and_invert_exactly():
    x = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-40, 1e-30, 0.5, 2.0, 3e38, np.inf], np.float32)
    keys = float_keys(x).astype(np.int64)
    assert np.all(np.diff(keys) > 0)
    np.testing.assert_array_equal(key_values(keys)[1:-1], x[1:-1].astype(np.float64))
    assert key_values(np.array([1 << 32]))[0] == np.inf


@pytest.mark.parametrize("fars, message", [
    ((0.0,), r"must lie in \(0, 1\)"), ((1.0,), r"must lie in \(0, 1\)"), ((-1e-3,), "got -0.001"),
    (("x",), "must be a number"), ((), "No false accept rate"),
])
def test_bad_false_accept_rates_are_one_line(fars, message):
    d, *ids = problem(6, num_q=5, num_g=20)
    with pytest.raises(ValueError, match=message):
        verification_metrics(d, *ids, fars=fars)


def test_problems_without_genuine_or_impostor_pairs_and_nan_are_named():
    d = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="No genuine pair"):
        verification_metrics(d, [1, 2], [3, 4, 5], [0, 0], [1, 1, 1])
    with pytest.raises(ValueError, match="No impostor pair"):
        verification_metrics(d, [1, 1], [1, 1, 1], [0, 0], [1, 1, 1])
    d[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN or inf.*query row: 1"):
        verification_metrics(d, [1, 2], [1, 2, 3], [0, 0], [1, 1, 1])


@pytest.mark.parametrize("transform", [
    lambda d: 0.5 + d * 1e-5,          # every distance in one or two top-16-bit bins
    lambda d: d * 1e6 - 3e5,           # negative and positive, many bins
    lambda d: np.exp(d * 40) * 1e-30,  # many orders of magnitude
])
def test_exact_however_the_distances_spread_over_the_key_bins(transform):
    d, *ids = problem(7, num_q=40, num_g=300)
    d = transform(d.astype(np.float64)).astype(np.float32)
    fars = (0.2, 0.01, 1e-3)
    ref, _, _ = brute_force(d, *ids, fars)
    got = verification_metrics(d, *ids, fars=fars)
    assert got["threshold"] == ref["threshold"] and got["tar"] == ref["tar"]
    assert got["eer"] == ref["eer"] and got["eer_threshold"] == ref["eer_threshold"]


def test_a_genuine_distance_alone_in_its_key_bin_beyond_the_crossing():
    # Few pairs: the first genuine distance after the EER's bin lies in a bin that holds no impostor
    # (and was never refined). It once failed with a KeyError (found calibrating 68 pairs).
    q_pids, g_pids = np.array([0, 1, 2, 0]), np.array([0] * 7 + [1] * 9 + [2] * 9)
    q_cams, g_cams = np.zeros(4, np.int64), np.ones(25, np.int64)
    rng = np.random.default_rng(1)
    centers = rng.standard_normal((3, 16)).astype(np.float32)
    q = centers[q_pids] + 0.5 * rng.standard_normal((4, 16)).astype(np.float32)
    g = centers[g_pids] + 0.5 * rng.standard_normal((25, 16)).astype(np.float32)
    d = np.asarray(compute_distance(torch.from_numpy(q), torch.from_numpy(g), metric="cosine"))
    fars = (0.1, 0.05)
    ref, _, n_imp = brute_force(d, q_pids, g_pids, q_cams, g_cams, fars)
    for got in (verification_metrics(d, q_pids, g_pids, q_cams, g_cams, fars=fars),
                verification_metrics_from_features(q, g, q_pids, g_pids, q_cams, g_cams, fars=fars)):
        assert n_imp == 68 and got["num_impostor"] == 68
        assert got["eer"] == pytest.approx(ref["eer"]) and got["eer_threshold"] == pytest.approx(ref["eer_threshold"])
        assert got["threshold"] == pytest.approx(ref["threshold"]) and got["tar"] == pytest.approx(ref["tar"])
