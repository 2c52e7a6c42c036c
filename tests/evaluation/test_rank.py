"""evaluate_rank / evaluate_rank_from_features against a plain per-query reference."""
import numpy as np
import pytest
import torch

from reid.evaluation import compute_distance, cross_camera_matches, evaluate_rank, evaluate_rank_from_features


def reference_rank(distmat, q_pids, g_pids, q_camids, g_camids, max_rank):
    """One query at a time, exactly as the protocol reads: stable sort of the row, drop
    same-pid same-camera items, AP = mean precision at each hit, INP = m / last hit rank."""
    num_q = distmat.shape[0]
    all_ap = np.full(num_q, np.nan)
    all_inp = np.full(num_q, np.nan)
    cmc_sum = np.zeros(max_rank)
    for i in range(num_q):
        order = np.argsort(distmat[i], kind="stable")
        keep = ~((g_pids[order] == q_pids[i]) & (g_camids[order] == q_camids[i]))
        hits = np.nonzero(g_pids[order][keep] == q_pids[i])[0] + 1  # 1-based ranks
        if hits.size == 0:
            continue
        all_ap[i] = np.mean(np.arange(1, hits.size + 1) / hits)
        all_inp[i] = hits.size / hits[-1]
        cmc_sum[hits[0] - 1 :] += 1
    valid = ~np.isnan(all_ap)
    return {
        "cmc": cmc_sum / valid.sum(),
        "mAP": np.nanmean(all_ap),
        "mINP": np.nanmean(all_inp),
        "num_valid_queries": int(valid.sum()),
        "all_AP": all_ap,
        "all_INP": all_inp,
    }


def _random_problem(rng, num_q, num_g, num_ids, num_cams, ties):
    q_pids = rng.integers(0, num_ids, num_q)
    g_pids = rng.integers(0, num_ids, num_g)
    q_cams = rng.integers(0, num_cams, num_q)
    g_cams = rng.integers(0, num_cams, num_g)
    # Query 0's identity is absent from the gallery and query 1's only gallery image is
    # junk (same camera): both must be skipped and counted out.
    q_pids[0], q_pids[1], g_pids[0], g_cams[0] = num_ids + 1, num_ids + 2, num_ids + 2, q_cams[1]
    if ties:
        d = rng.integers(0, 4, (num_q, num_g)).astype(np.float32)  # many equal distances
    else:
        d = rng.random((num_q, num_g)).astype(np.float32)
    return d, q_pids, g_pids, q_cams, g_cams


def _assert_same(out, ref):
    np.testing.assert_allclose(out["cmc"], ref["cmc"], rtol=0, atol=1e-12)
    assert out["num_valid_queries"] == ref["num_valid_queries"]
    np.testing.assert_allclose(out["mAP"], ref["mAP"], rtol=1e-12)
    np.testing.assert_allclose(out["mINP"], ref["mINP"], rtol=1e-12)
    np.testing.assert_allclose(out["all_AP"], ref["all_AP"], rtol=1e-12)
    np.testing.assert_allclose(out["all_INP"], ref["all_INP"], rtol=1e-12)
    assert np.array_equal(np.isnan(out["all_AP"]), np.isnan(ref["all_AP"]))


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_matches_reference_on_random_problems(ties, seed):
    rng = np.random.default_rng(seed)
    num_q, num_g = int(rng.integers(20, 60)), int(rng.integers(30, 120))
    problem = _random_problem(rng, num_q, num_g, num_ids=8, num_cams=3, ties=ties)
    ref = reference_rank(*problem, max_rank=20)
    for chunk_size, threads in ((None, None), (1, 1), (7, 2)):
        out = evaluate_rank(*problem, max_rank=20, chunk_size=chunk_size, num_threads=threads)
        _assert_same(out, ref)
    assert ref["num_valid_queries"] <= num_q - 2
    assert np.isnan(ref["all_AP"][:2]).all()


def test_gallery_smaller_than_max_rank_pads_with_final_value():
    rng = np.random.default_rng(5)
    problem = _random_problem(rng, 15, 8, num_ids=3, num_cams=2, ties=False)
    out = evaluate_rank(*problem, max_rank=50)
    ref = reference_rank(*problem, max_rank=50)
    _assert_same(out, ref)
    assert out["cmc"].shape == (50,)
    np.testing.assert_allclose(out["cmc"][7:], 1.0)


def test_hand_computed_example_uses_plain_ap():
    # Gallery: match (cam 1), other id, junk (same id, same cam 0), match (cam 2), other id.
    d = np.array([[0.1, 0.2, 0.05, 0.3, 0.4]])
    out = evaluate_rank(d, [1], [1, 2, 1, 1, 3], [0], [1, 1, 0, 2, 1], max_rank=4)
    # Junk removed -> matches at ranks 1 and 3.
    assert out["mAP"] == pytest.approx((1 / 1 + 2 / 3) / 2)  # trapezoid AP would give 0.75
    assert out["mINP"] == pytest.approx(2 / 3)
    np.testing.assert_allclose(out["cmc"], [1, 1, 1, 1])
    assert out["num_valid_queries"] == 1


def test_ties_are_ordered_by_gallery_index():
    q = dict(q_pids=[1], q_camids=[0])
    # Equal distances: the non-match comes first by index, so the match is at rank 2.
    out = evaluate_rank(np.array([[0.5, 0.5]]), g_pids=[2, 1], g_camids=[1, 1], **q)
    assert out["mAP"] == pytest.approx(0.5) and out["cmc"][0] == 0.0
    out = evaluate_rank(np.array([[0.5, 0.5]]), g_pids=[1, 2], g_camids=[1, 1], **q)
    assert out["mAP"] == pytest.approx(1.0) and out["cmc"][0] == 1.0


def test_torch_and_float64_inputs_agree():
    rng = np.random.default_rng(1)
    d, qp, gp, qc, gc = _random_problem(rng, 30, 50, 5, 3, ties=False)
    ref = evaluate_rank(d, qp, gp, qc, gc, max_rank=10)
    _assert_same(evaluate_rank(torch.from_numpy(d), torch.from_numpy(qp), gp, qc, gc, max_rank=10), ref)
    _assert_same(evaluate_rank(d.astype(np.float64), list(qp), gp, qc, gc, max_rank=10), ref)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_distmat_matches_cpu():
    rng = np.random.default_rng(2)
    for ties in (False, True):
        problem = _random_problem(rng, 40, 90, 6, 3, ties=ties)
        ref = evaluate_rank(*problem, max_rank=10)
        out = evaluate_rank(torch.from_numpy(problem[0]).cuda(), *problem[1:], max_rank=10)
        _assert_same(out, ref)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_from_features_equals_full_matrix(metric):
    rng = np.random.default_rng(3)
    q = rng.normal(size=(37, 12)).astype(np.float32)
    g = rng.normal(size=(83, 12)).astype(np.float32)
    qp, gp = rng.integers(0, 6, 37), rng.integers(0, 6, 83)
    qc, gc = rng.integers(0, 3, 37), rng.integers(0, 3, 83)
    ref = reference_rank(compute_distance(q, g, metric), qp, gp, qc, gc, max_rank=10)
    for chunk_size in (None, 5):
        out = evaluate_rank_from_features(q, g, qp, gp, qc, gc, metric=metric, max_rank=10, chunk_size=chunk_size)
        _assert_same(out, ref)


def test_bad_inputs_say_what_is_wrong():
    d = np.random.default_rng(0).random((3, 4))
    ids = dict(q_pids=[0, 1, 2], g_pids=[0, 1, 2, 3], q_camids=[0, 0, 0], g_camids=[1, 1, 1, 1])
    with pytest.raises(ValueError, match="query set is empty"):
        evaluate_rank(np.zeros((0, 4)), [], [0, 1, 2, 3], [], [1, 1, 1, 1])
    with pytest.raises(ValueError, match="gallery set is empty"):
        evaluate_rank(np.zeros((3, 0)), [0, 1, 2], [], [0, 0, 0], [])
    with pytest.raises(ValueError, match="g_pids has 3 entries but there are 4"):
        evaluate_rank(d, **{**ids, "g_pids": [0, 1, 2]})
    with pytest.raises(ValueError, match="q_camids has 2 entries but there are 3"):
        evaluate_rank(d, **{**ids, "q_camids": [0, 0]})
    with pytest.raises(ValueError, match="max_rank"):
        evaluate_rank(d, **ids, max_rank=0)
    for bad_value, where in ((np.nan, (1, 2)), (np.inf, (2, 3)), (-np.inf, (0, 0)), (np.nan, (1, 1))):
        bad = d.copy()
        bad[where] = bad_value
        with pytest.raises(ValueError, match=f"NaN or inf .*row: {where[0]}"):
            evaluate_rank(bad, **ids)
    with pytest.raises(ValueError, match="No query has a valid match"):
        evaluate_rank(d, **{**ids, "g_pids": [7, 7, 7, 7]})
    with pytest.raises(ValueError, match="No query has a valid match"):
        evaluate_rank(d, **{**ids, "g_camids": [0, 0, 0, 0]})  # every match is junk


def test_nan_on_a_junk_entry_is_still_rejected():
    d = np.array([[0.1, np.nan, 0.3]])
    # Gallery item 1 has the query's pid and camera: it is removed, but its NaN is reported.
    with pytest.raises(ValueError, match="NaN or inf"):
        evaluate_rank(d, [1], [1, 1, 2], [0], [1, 0, 1])


def test_cross_camera_matches_equal_a_per_query_count_and_the_skipped_queries():
    rng = np.random.default_rng(3)
    q_pids, g_pids = rng.integers(-1, 6, 40), rng.integers(-1, 6, 300)
    q_cams, g_cams = rng.integers(0, 3, 40), rng.integers(0, 3, 300)
    counts = cross_camera_matches(q_pids, g_pids, q_cams, g_cams)
    brute = [int(((g_pids == p) & (g_cams != c)).sum()) for p, c in zip(q_pids, q_cams)]
    assert counts.tolist() == brute
    # A query with no cross-camera match is exactly one that evaluate_rank skips.
    q_pids[0] = 99
    res = evaluate_rank(rng.random((40, 300)), q_pids, g_pids, q_cams, g_cams)
    valid = cross_camera_matches(q_pids, g_pids, q_cams, g_cams) > 0
    assert res["num_valid_queries"] == int(valid.sum()) and np.isnan(res["all_AP"][0])
    with pytest.raises(ValueError, match="camid"):
        cross_camera_matches(q_pids, g_pids, q_cams[:3], g_cams)
