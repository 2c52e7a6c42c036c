"""Video re-ID's evaluation rules on tracklet features: junk tracklets, and the mean over published splits.

A video model gives one feature per tracklet (its frames pooled, reid/modeling/temporal.py), and
a tracklet query against a tracklet gallery is ranked as an image query is (reid/evaluation/rank.py:
Market-1501's protocol, the same person seen by the same camera left out). Two rules differ:

* **Junk** (MARS: pid -1, tracklets of bad detections): ignored for every query, neither a hit nor
  a miss, as the official MATLAB code ignores them; dropping them from the gallery does exactly
  that (a ranking without an item is the ranking with the item skipped). **Distractors** (MARS:
  pid 0) stay: they are always a miss. The dataset names both (``junk_pids``, ``distractor_pids``).
* **Splits** (iLIDS-VID and PRID2011: 10 published train/test partitions of the people): each
  split is trained and tested on its own, and the reported figures are the means over the splits,
  with their standard deviations, as for VehicleID's gallery draws (:func:`reid.evaluation.evaluator.
  mean_of_runs`).
"""
from __future__ import annotations

import time
from typing import Any, Sequence, Tuple

from .evaluator import EvalResult, evaluate_features, mean_of_runs
from .extract import Features


def without_junk(gallery: Features, junk_pids: Sequence[int]) -> Features:
    """`gallery` without the tracklets whose pid is one of `junk_pids` (see the module docstring)."""
    return gallery.without_pids(junk_pids)


def evaluate_tracklets(query: Features, gallery: Features, junk_pids: Sequence[int] = (), **kwargs: Any) -> EvalResult:
    """Metrics of tracklet features `query` against `gallery` with the gallery's junk ignored;
    `kwargs` as :func:`reid.evaluation.evaluator.evaluate_features` takes them."""
    gallery = without_junk(gallery, junk_pids)
    if len(gallery) == 0:
        raise ValueError(f"Every gallery tracklet has a junk pid ({', '.join(map(str, junk_pids))}): nothing to "
                         "rank; check the dataset's test files.")
    return evaluate_features(query, gallery, **kwargs)


def evaluate_splits(splits: Sequence[Tuple[Features, Features]], junk_pids: Sequence[int] = (),
                    **kwargs: Any) -> EvalResult:
    """The mean over `splits` (one ``(query, gallery)`` per published split, each tested with the
    model trained on it) of :func:`evaluate_tracklets`; ``draws`` holds each split's figures and
    their standard deviations (``num_splits``)."""
    if not splits:
        raise ValueError("No split to evaluate: give one (query, gallery) pair per split.")
    start = time.perf_counter()
    runs = [evaluate_tracklets(q, g, junk_pids, **kwargs) for q, g in splits]
    return mean_of_runs(runs, start, {"num_splits": len(runs)})


__all__ = ["evaluate_splits", "evaluate_tracklets", "without_junk"]
