"""TrackEval's scores through the tracker environment, against figures known from the formulas."""
from __future__ import annotations

import os

import numpy as np
import pytest

from reid.tracking.mot_files import MOTRows, write_gt, write_results
from reid.tracking.scoring import ScoredSequence, score_results
from reid.tracking.tracker_env import TrackerEnvError, check_python

pytestmark = pytest.mark.slow  # the tracker environment is made once per run (pip, about a minute)


def _gt(path: str) -> MOTRows:
    """Three people walking right over 10 frames, apart from each other."""
    frames = np.repeat(np.arange(1, 11), 3)
    ids = np.tile([1, 2, 3], 10)
    boxes = np.stack([10 + 3 * frames + 0 * ids, 40.0 * ids, np.full(30, 20.0), np.full(30, 30.0)], 1)
    rows = MOTRows(frames, ids, boxes.astype(float), np.ones(30), np.ones(30, np.int64), np.ones(30))
    write_gt(path, rows)
    return rows


def _score(tmp_path, result: MOTRows, tracker_python):
    os.makedirs(tmp_path / "seq" / "gt", exist_ok=True)
    gt_path = str(tmp_path / "seq" / "gt" / "gt.txt")
    _gt(gt_path)
    write_results(str(tmp_path / "seq.txt"), result)
    return score_results([ScoredSequence("seq", gt_path, 10)], {"seq": str(tmp_path / "seq.txt")},
                         str(tmp_path / "work"), tracker_python)


def test_the_ground_truth_as_result_scores_100_whatever_its_ids_are_called(tmp_path, tracker_python):
    gt = _gt(str(tmp_path / "gt.txt"))
    renamed = MOTRows(gt.frame, gt.track_id * 10 + 5, gt.boxes, gt.conf, gt.cls, gt.visibility)
    scores = _score(tmp_path, renamed, tracker_python)
    for name in ("seq", "COMBINED"):
        s = scores[name]
        assert s["HOTA"] == pytest.approx(100) and s["IDF1"] == pytest.approx(100) and s["MOTA"] == pytest.approx(100)
        assert s["IDSW"] == 0


def test_missing_people_and_a_switch_give_the_formulas_figures(tmp_path, tracker_python):
    gt = _gt(str(tmp_path / "gt.txt"))
    keep = gt.track_id != 3  # person 3 never tracked: recall 2/3, precision 1
    ids = gt.track_id.copy()
    ids[(gt.track_id == 2) & (gt.frame > 5)] = 9  # person 2 gets a new id after frame 5: one switch
    result = MOTRows(gt.frame, ids, gt.boxes, gt.conf, gt.cls, gt.visibility).select(keep)
    s = _score(tmp_path, result, tracker_python)["seq"]
    # IDF1 = 2 IDTP / (GT + PRED): person 1 (10) + the longer half of person 2 (5) match
    assert s["IDF1"] == pytest.approx(100 * 2 * 15 / (30 + 20))
    assert s["IDR"] == pytest.approx(100 * 15 / 30) and s["IDP"] == pytest.approx(100 * 15 / 20)
    assert s["IDSW"] == 1
    # MOTA = 1 - (FN + FP + IDSW) / GT
    assert s["MOTA"] == pytest.approx(100 * (1 - (10 + 0 + 1) / 30))


def test_a_result_missing_for_a_sequence_is_one_line(tmp_path):
    with pytest.raises(ValueError, match="no tracking result for b"):
        score_results([ScoredSequence("a", "x", 1), ScoredSequence("b", "y", 1)], {"a": "r"}, str(tmp_path))


def test_a_python_without_boxmot_is_one_line_saying_how_to_install_it():
    import sys

    with pytest.raises(TrackerEnvError, match=r"'import boxmot, trackeval' failed .*pip install \"boxmot\[trackeval\]"):
        check_python(sys.executable)
    with pytest.raises(TrackerEnvError, match="cannot run it"):
        check_python("/nonexistent/python")
