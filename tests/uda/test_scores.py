"""Pseudo-label purity against sklearn's ARI and brute-force pair counting."""
import itertools

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from reid.uda import pseudo_label_scores


def _brute(labels, truth):
    pred = [1000 + i if l < 0 else int(l) for i, l in enumerate(labels)]  # outliers: singletons
    together = same = both = 0
    for i, j in itertools.combinations(range(len(labels)), 2):
        t, s = pred[i] == pred[j], truth[i] == truth[j]
        together, same, both = together + t, same + s, both + (t and s)
    return both / together, both / same, pred


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scores_match_pair_counting_and_sklearn(seed):
    rng = np.random.default_rng(seed)
    truth = rng.integers(0, 6, 40)
    labels = np.where(rng.random(40) < 0.7, truth % 4, rng.integers(-1, 5, 40))
    scores = pseudo_label_scores(labels, truth)
    precision, recall, singletons = _brute(labels, truth)
    assert scores["pair_precision"] == pytest.approx(precision)
    assert scores["pair_recall"] == pytest.approx(recall)
    assert scores["ari"] == pytest.approx(adjusted_rand_score(truth, singletons))
    assert scores["true_ids"] == len(set(truth.tolist()))


def test_a_hand_computed_case_where_outliers_are_singletons():
    """Pairs of 6 images: 15. Put together: (0, 1), (2, 3); one person: {0, 1, 2}, {3, 4, 5} (6
    pairs); both: (0, 1). ARI = (S - E) / ((A + B) / 2 - E) with S = 1, A = 2, B = 6, E = A B / 15.
    Were the two outliers one cluster, (4, 5) would count as put together and as one person."""
    scores = pseudo_label_scores(np.array([0, 0, 1, 1, -1, -1]), np.array([0, 0, 0, 1, 1, 1]))
    assert scores["pair_precision"] == 0.5 and scores["pair_recall"] == pytest.approx(1 / 6)
    assert scores["ari"] == pytest.approx((1 - 2 * 6 / 15) / ((2 + 6) / 2 - 2 * 6 / 15)) == pytest.approx(0.0625)


def test_perfect_and_all_outlier_clusterings():
    truth = np.array([3, 3, 5, 5, 5, 9])
    perfect = pseudo_label_scores(np.array([1, 1, 0, 0, 0, 2]), truth)
    assert perfect == {"ari": 1.0, "pair_precision": 1.0, "pair_recall": 1.0, "true_ids": 3}
    none = pseudo_label_scores(np.full(6, -1), truth)
    assert none["pair_recall"] == 0.0 and none["pair_precision"] == 0.0 and none["ari"] == 0.0
    with pytest.raises(ValueError, match="same shape"):
        pseudo_label_scores(np.zeros(3), truth)
