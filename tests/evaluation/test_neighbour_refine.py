"""Second chances for approximate neighbour lists (reid.evaluation.neighbour_refine), against
per-row brute-force references."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reid.evaluation.distance import prepare_features
from reid.evaluation.exact_neighbours import exact_pass
from reid.evaluation.neighbour_refine import merge_candidates, refine_lists, reverse_lists


def _features(n=300, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n // 10, dim))
    x = centres.repeat(10, axis=0) + 0.4 * rng.standard_normal((n, dim))
    return prepare_features(torch.from_numpy(x.astype(np.float32)), "cosine")


def test_merge_keeps_the_k_nearest_distinct_items_ties_by_index():
    d = np.array([[0.0, 0.2, 0.5]], np.float32)
    i = np.array([[4, 7, 9]])
    cd = np.array([[0.2, 0.1, 0.5, np.inf, 0.2]], np.float32)
    ci = np.array([[7, 3, 1, -1, 2]])
    md, mi = merge_candidates(d, i, cd, ci)
    assert mi.tolist() == [[4, 3, 2]] and md[0].tolist() == pytest.approx([0.0, 0.1, 0.2])
    # Items 2 and 7 tie at 0.2: the lower index first; 7 (in both lists) appears once.
    md, mi = merge_candidates(np.array([[0.0, 0.2, 0.9, 0.9]], np.float32), np.array([[4, 7, 5, 6]]), cd, ci)
    assert mi.tolist() == [[4, 3, 2, 7]]


def test_reverse_lists_hold_who_lists_whom_nearest_first():
    rng = np.random.default_rng(1)
    n, k = 40, 5
    i = np.stack([rng.choice(n, k, replace=False) for _ in range(n)])
    d = rng.random((n, k)).astype(np.float32)
    rd, ri = reverse_lists(d, i, cap=3)
    for j in range(n):
        holders = sorted((d[a, b], a) for a in range(n) for b in range(k) if i[a, b] == j)[:3]
        got = [(rd[j, c], ri[j, c]) for c in range(3) if ri[j, c] >= 0]
        assert [a for _, a in got] == [a for _, a in holders]
        assert [x for x, _ in got] == pytest.approx([x for x, _ in holders])
    block_d, block_i = reverse_lists(d, i, cap=3, targets=slice(10, 25))  # a block of targets alone
    np.testing.assert_array_equal(block_i, ri[10:25])
    np.testing.assert_array_equal(block_d, rd[10:25])


def test_exact_lists_stay_exact_and_damaged_lists_are_repaired():
    x, x_sq = _features()
    k = 12
    exact = exact_pass(x, x_sq, 0, "cosine", k, 64)
    d, i = refine_lists(x, x_sq, "cosine", exact.distances, exact.indices)
    np.testing.assert_allclose(np.sort(d, axis=1), np.sort(exact.distances, axis=1), atol=1e-6)
    # Damage: every row loses its 4th-8th nearest (replaced by far items); the second chances find
    # most of them again, and every distance they bring is the exact one.
    bad_d, bad_i = exact.distances.copy(), exact.indices.copy()
    far = np.argsort((x @ x.T).numpy(), axis=1)[:, :5]  # the least similar
    bad_i[:, 3:8] = far
    bad_d[:, 3:8] = np.take_along_axis(1 - (x @ x.T).numpy(), far, axis=1)
    order = np.argsort(bad_d, axis=1, kind="stable")
    bad_d, bad_i = np.take_along_axis(bad_d, order, 1), np.take_along_axis(bad_i, order, 1)
    d, i = refine_lists(x, x_sq, "cosine", bad_d, bad_i)

    def recall(lists):
        return np.mean([len(set(a) & set(b)) / k for a, b in zip(lists, exact.indices)])

    assert recall(bad_i) == pytest.approx(7 / 12)
    assert recall(i) > 0.95
    true = 1 - (x @ x.T).numpy()
    np.testing.assert_allclose(d, np.take_along_axis(true, i, axis=1), atol=1e-5)
    assert (np.diff(d, axis=1) >= 0).all()
