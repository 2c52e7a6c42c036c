"""How well pseudo-labels match the identities, when the images happen to have them.

For measurement only (the logged purity of each epoch's clustering); training never sees the
ground truth. Pair counting over all N images, with every outlier (label -1) its own
singleton cluster:

* pairwise precision: of the pairs put in one cluster, the fraction that are one person;
* pairwise recall: of the pairs that are one person, the fraction put in one cluster;
* adjusted Rand index (Hubert & Arabie, J. Classification 1985, Eq. 5): with
  S = sum_ij C(n_ij, 2), A = sum_i C(a_i, 2), B = sum_j C(b_j, 2) over the contingency table
  n_ij (cluster i, identity j) and its margins, E = A B / C(N, 2):
  ARI = (S - E) / ((A + B) / 2 - E); 1 for identical partitions, about 0 for chance.
"""
from __future__ import annotations

from typing import Dict

import numpy as np


def _pairs(counts: np.ndarray) -> float:
    counts = counts.astype(np.float64)
    return float((counts * (counts - 1) / 2).sum())


def pseudo_label_scores(labels: np.ndarray, truth: np.ndarray) -> Dict[str, float]:
    """``{"ari", "pair_precision", "pair_recall", "true_ids"}`` of `labels` (-1 = outlier) against
    the identities `truth` (one per image)."""
    labels, truth = np.asarray(labels, dtype=np.int64), np.asarray(truth, dtype=np.int64)
    if labels.shape != truth.shape:
        raise ValueError(f"labels and truth must have the same shape, got {labels.shape} and {truth.shape}.")
    n = labels.size
    # Outliers become singletons: labels past the largest cluster, one each.
    pred = labels.copy()
    out = pred < 0
    pred[out] = pred.max(initial=-1) + 1 + np.arange(int(out.sum()))
    _, cell = np.unique(np.stack([pred, truth]), axis=1, return_counts=True)
    both = _pairs(cell)
    same_pred = _pairs(np.unique(pred, return_counts=True)[1])
    same_true = _pairs(np.unique(truth, return_counts=True)[1])
    total = n * (n - 1) / 2.0
    expected = same_pred * same_true / total if total else 0.0
    spread = (same_pred + same_true) / 2.0 - expected
    return {
        "ari": (both - expected) / spread if spread else 1.0,
        "pair_precision": both / same_pred if same_pred else 0.0,
        "pair_recall": both / same_true if same_true else 0.0,
        "true_ids": int(np.unique(truth).size),
    }


__all__ = ["pseudo_label_scores"]
