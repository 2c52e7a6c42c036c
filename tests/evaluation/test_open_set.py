"""Open-set identification (DIR at FAR) on constructed cases, and the held-out gallery split."""
import numpy as np
import pytest

from reid.evaluation.open_set import holdout_gallery, open_set_metrics


def test_a_constructed_case_gives_the_hand_computed_rates():
    # Gallery: pid 1 (cam 0), pid 2 (cam 0), pid 3 (cam 1).  Queries (all cam 1):
    #   q0 pid 1: best match g0 (pid 1) at 0.1           -> known, correct
    #   q1 pid 2: best match g0 (pid 1) at 0.2           -> known, wrong
    #   q2 pid 9: best 0.3  q3 pid 8: best 0.5  q4 pid 7: best 0.7 -> unknown
    #   q5 pid 3: its only image is in its own camera    -> neither (not counted)
    g_pids, g_cams = np.array([1, 2, 3]), np.array([0, 0, 1])
    q_pids, q_cams = np.array([1, 2, 9, 8, 7, 3]), np.ones(6, int)
    d = np.array([
        [0.1, 0.9, 0.9],
        [0.2, 0.4, 0.9],
        [0.3, 0.8, 0.9],
        [0.9, 0.5, 0.9],
        [0.9, 0.9, 0.7],
        [0.6, 0.6, 0.0],  # the 0.0 is junk (same pid, same camera) and is ignored
    ], np.float32)
    res = open_set_metrics(d, q_pids, g_pids, q_cams, g_cams, fars=(0.5, 0.1))
    assert res["num_known"] == 2 and res["num_unknown"] == 3 and res["far_resolution"] == pytest.approx(1 / 3)
    assert res["rank1"] == 0.5
    # FAR 0.5: k = floor(1.5) = 1 -> threshold = 2nd smallest unknown best distance = 0.5
    assert res["threshold"][0.5] == pytest.approx(0.5) and res["far_reached"][0.5] == pytest.approx(1 / 3)
    assert res["dir"][0.5] == 0.5  # q0 accepted and right; q1 accepted but wrong
    # FAR 0.1: k = 0 -> threshold 0.3: no unknown accepted; q0 (0.1 < 0.3) still identified
    assert res["threshold"][0.1] == pytest.approx(0.3) and res["far_reached"][0.1] == 0.0
    assert res["dir"][0.1] == 0.5
    assert d[5, 2] == 0.0  # the input is not modified


def test_dir_never_exceeds_rank1_and_grows_with_far():
    rng = np.random.default_rng(0)
    q_pids, g_pids = rng.integers(1, 40, 300), rng.integers(1, 40, 900)
    q_cams, g_cams = rng.integers(0, 4, 300), rng.integers(0, 4, 900)
    keep = holdout_gallery(q_pids, g_pids, 10, seed=3)
    d = rng.random((300, 900)).astype(np.float32) + 0.5 * (q_pids[:, None] != g_pids[None, :])
    res = open_set_metrics(d[:, keep], q_pids, g_pids[keep], q_cams, g_cams[keep], fars=(0.5, 0.2, 0.05))
    dirs = [res["dir"][f] for f in (0.05, 0.2, 0.5)]
    assert dirs == sorted(dirs) and dirs[-1] <= res["rank1"]
    assert all(res["far_reached"][f] <= f for f in (0.5, 0.2, 0.05))


def test_holdout_gallery_removes_whole_identities_deterministically():
    q = np.array([1, 2, 3, 4, 0, -1])
    g = np.array([1, 1, 2, 3, 3, 4, 5, 0, 0])
    keep = holdout_gallery(q, g, 2, seed=1)
    removed = set(g[~keep])
    assert len(removed) == 2 and removed <= {1, 2, 3, 4} and not set(g[keep]) & removed
    np.testing.assert_array_equal(keep, holdout_gallery(q, g, 2, seed=1))
    with pytest.raises(ValueError, match="Cannot hold out 4 identities.*share 4"):
        holdout_gallery(q, g, 4)


def test_without_unknown_or_known_queries_the_error_says_what_to_do():
    d = np.ones((2, 2), np.float32)
    with pytest.raises(ValueError, match="No unknown query.*holdout_gallery"):
        open_set_metrics(d, [1, 2], [1, 2], [0, 0], [1, 1])
    with pytest.raises(ValueError, match="No known query"):
        open_set_metrics(d, [5, 6], [1, 2], [0, 0], [1, 1])
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        open_set_metrics(d, [1, 6], [1, 2], [0, 0], [1, 1], fars=(2,))


def test_from_features_equals_the_matrix_version():
    from reid.evaluation import compute_distance
    from reid.evaluation.open_set import open_set_metrics_from_features

    rng = np.random.default_rng(1)
    q, g = rng.standard_normal((50, 8)).astype(np.float32), rng.standard_normal((120, 8)).astype(np.float32)
    q_pids, g_pids = rng.integers(1, 15, 50), rng.integers(1, 12, 120)  # pids 12-14: unknown queries
    ids = (q_pids, g_pids, rng.integers(0, 3, 50), rng.integers(0, 3, 120))
    a = open_set_metrics_from_features(q, g, *ids, fars=(0.3, 0.1))
    b = open_set_metrics(compute_distance(q, g), *ids, fars=(0.3, 0.1))
    assert a == b and a["num_unknown"] > 0
