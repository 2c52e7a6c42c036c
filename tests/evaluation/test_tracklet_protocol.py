"""Video evaluation rules (reid/evaluation/tracklet_protocol.py) against ranks computed by hand: MARS's
junk ignored and distractors kept as misses; iLIDS-VID-style splits averaged with their spread."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reid.evaluation.extract import Features
from reid.evaluation.tracklet_protocol import evaluate_splits, evaluate_tracklets, without_junk


def _features(xs, pids, cams):
    """Tracklet features on a line: the euclidean distance between two is the gap of their xs."""
    feats = torch.tensor([[float(x), 0.0] for x in xs])
    return Features(feats, np.asarray(pids, np.int64), np.asarray(cams, np.int64), [f"t{i}" for i in range(len(xs))])


# One MARS-like query (person 1, camera 0) and a gallery in order of distance:
# junk (pid -1), a distractor (pid 0), person 1 on camera 1, person 1 on camera 0 (same camera: left out),
# person 1 on camera 2, another person.
QUERY = _features([0.0], [1], [0])
GALLERY = _features([1, 2, 3, 4, 5, 6], [-1, 0, 1, 1, 1, 7], [3, 4, 1, 0, 2, 5])


def test_junk_is_skipped_and_distractors_stay_misses_as_computed_by_hand():
    # ranked without junk and the same-camera match: distractor, hit, hit, other -> hits at ranks 2 and 3
    result = evaluate_tracklets(QUERY, GALLERY, junk_pids=(-1,), metric="euclidean")
    plain = result.metrics["plain"]
    assert plain["R-1"] == 0.0 and plain["R-5"] == 100.0
    assert plain["mAP"] == pytest.approx(100 * (1 / 2 + 2 / 3) / 2)
    assert plain["mINP"] == pytest.approx(100 * 2 / 3)  # 2 matches, the last at rank 3
    assert len(result.gallery) == 5 and -1 not in result.gallery.pids
    # without the junk rule the junk tracklet is a miss at rank 1: hits at ranks 3 and 4
    counted = evaluate_tracklets(QUERY, GALLERY, metric="euclidean").metrics["plain"]
    assert counted["mAP"] == pytest.approx(100 * (1 / 3 + 2 / 4) / 2) and counted["mINP"] == pytest.approx(50.0)


def test_without_junk_keeps_the_rest_in_order_with_their_paths():
    kept = without_junk(GALLERY, (-1, 7))
    assert kept.pids.tolist() == [0, 1, 1, 1] and kept.camids.tolist() == [4, 1, 0, 2]
    assert kept.paths == ["t1", "t2", "t3", "t4"] and kept.feats[:, 0].tolist() == [2, 3, 4, 5]
    assert without_junk(GALLERY, ()) is GALLERY
    with pytest.raises(ValueError, match="Every gallery tracklet has a junk pid"):
        evaluate_tracklets(QUERY, _features([1], [-1], [1]), junk_pids=(-1,))


def test_splits_are_averaged_with_their_spread():
    # split A (iLIDS-VID: query camera 0, gallery camera 1): the match first -> AP 1; split B: second -> AP 1/2
    a = (_features([0.0], [5], [0]), _features([1, 2], [5, 6], [1, 1]))
    b = (_features([0.0], [5], [0]), _features([1, 2], [6, 5], [1, 1]))
    result = evaluate_splits([a, b], metric="euclidean")
    assert result.metrics["plain"]["mAP"] == pytest.approx(75.0) and result.metrics["plain"]["R-1"] == pytest.approx(50.0)
    assert result.draws["num_splits"] == 2
    assert [run["mAP"] for run in result.draws["per_draw"]["plain"]] == pytest.approx([100.0, 50.0])
    assert result.draws["std"]["plain"]["mAP"] == pytest.approx(25.0)  # population standard deviation
    np.testing.assert_allclose(result.cmc["plain"][:2], [0.5, 1.0])
    with pytest.raises(ValueError, match="No split to evaluate"):
        evaluate_splits([])
