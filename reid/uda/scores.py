"""How well pseudo-labels match the identities, when the images happen to have them.

For measurement only (the logged purity of each epoch's clustering); training never sees the
ground truth. Pair counting over all N images (scikit-learn's ``pair_confusion_matrix``), with
every outlier (label -1) its own singleton cluster:

* pairwise precision: of the pairs put in one cluster, the fraction that are one person;
* pairwise recall: of the pairs that are one person, the fraction put in one cluster;
* adjusted Rand index (Hubert & Arabie, J. Classification 1985; scikit-learn's
  ``adjusted_rand_score``): 1 for identical partitions, about 0 for chance.
"""
from __future__ import annotations

from typing import Dict

import numpy as np
from sklearn.metrics import adjusted_rand_score
from sklearn.metrics.cluster import pair_confusion_matrix


def pseudo_label_scores(labels: np.ndarray, truth: np.ndarray) -> Dict[str, float]:
    """``{"ari", "pair_precision", "pair_recall", "true_ids"}`` of `labels` (-1 = outlier) against
    the identities `truth` (one per image)."""
    labels, truth = np.asarray(labels, dtype=np.int64), np.asarray(truth, dtype=np.int64)
    if labels.shape != truth.shape:
        raise ValueError(f"labels and truth must have the same shape, got {labels.shape} and {truth.shape}.")
    # Outliers become singletons: labels past the largest cluster, one each. Left as -1 they
    # would form one cluster of unrelated images and count as pairs put together.
    pred = labels.copy()
    out = pred < 0
    pred[out] = pred.max(initial=-1) + 1 + np.arange(int(out.sum()))
    # Ordered pairs: [1, 1] together in both, [0, 1] only in pred, [1, 0] only in truth.
    (_, only_pred), (only_truth, both) = pair_confusion_matrix(truth, pred).tolist()
    return {
        "ari": float(adjusted_rand_score(truth, pred)),
        "pair_precision": both / (both + only_pred) if both + only_pred else 0.0,
        "pair_recall": both / (both + only_truth) if both + only_truth else 0.0,
        "true_ids": int(np.unique(truth).size),
    }


__all__ = ["pseudo_label_scores"]
