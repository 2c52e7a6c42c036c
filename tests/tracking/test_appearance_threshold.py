"""The appearance threshold: detections matched to the ground truth, and the FAR it is calibrated at."""
from __future__ import annotations

import numpy as np
import pytest

from reid.tracking.mot_files import MOTRows
from reid.tracking.appearance_threshold import box_iou, calibrate_from_ground_truth, match_to_ground_truth


def _rows(frames, boxes, ids=None) -> MOTRows:
    n = len(frames)
    return MOTRows(np.asarray(frames, np.int64), np.asarray(ids if ids is not None else [-1] * n, np.int64),
                   np.asarray(boxes, np.float64).reshape(n, 4), np.ones(n), np.ones(n, np.int64), np.ones(n))


def test_box_iou_is_intersection_over_union():
    a = np.array([[0, 0, 10, 10], [5, 5, 10, 10]], float)
    b = np.array([[5, 0, 10, 10], [20, 20, 5, 5]], float)
    iou = box_iou(a, b)
    # a[0] and b[0] share 5x10 of 100 + 100; a[1] (5..15 x 5..15) and b[0] (5..15 x 0..10) share 10x5
    assert np.allclose(iou, [[50 / 150, 0], [50 / 150, 0]])


def test_box_iou_of_boxes_without_area_and_of_no_boxes():
    point, line = np.array([[5, 5, 0, 0]], float), np.array([[0, 5, 10, 0]], float)
    box = np.array([[0, 0, 10, 10]], float)
    # 0 / 0 for two boxes without area (torchvision gives NaN) is no overlap, as is a line inside a box
    assert box_iou(point, point).tolist() == [[0.0]] and box_iou(line, box).tolist() == [[0.0]]
    assert box_iou(np.zeros((0, 4)), box).shape == (0, 1) and box_iou(box, np.zeros((0, 4))).shape == (1, 0)
    assert box_iou(box.astype(np.int64), box).dtype == np.float64


def test_each_detection_takes_the_ground_truth_id_it_overlaps_best_one_to_one():
    gt = _rows([1, 1, 2], [[0, 0, 10, 20], [8, 0, 10, 20], [50, 50, 10, 20]], ids=[7, 8, 9])
    # frame 1: detection 0 overlaps both gt boxes (more of id 8), detection 1 only id 8: the
    # one-to-one assignment with the highest total IoU gives 0 -> 7 and 1 -> 8, not 0 -> 8.
    dets = _rows([1, 1, 2, 3], [[3, 0, 10, 20], [8, 1, 10, 20], [80, 10, 10, 20], [0, 0, 10, 20]])
    assert match_to_ground_truth(dets, gt).tolist() == [7, 8, -1, -1]


def test_the_threshold_accepts_at_most_far_of_the_impostor_pairs():
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(20, 16))
    ids = np.repeat(np.arange(20), 10)
    feats = centres[ids] + 0.6 * rng.normal(size=(200, 16))
    feats /= np.linalg.norm(feats, axis=1, keepdims=True)
    frames = np.tile(np.arange(1, 11), 20)  # each person once per frame
    far = 0.01
    found = calibrate_from_ground_truth([feats], [ids], [frames], far)
    d = 1 - feats @ feats.T
    same, other = ids[:, None] == ids[None], ids[:, None] != ids[None]
    genuine = same & ~np.eye(200, dtype=bool)
    assert found["source"] == "ground truth" and found["num_impostor"] == other.sum()
    accepted = (d[other] <= found["distance"]).mean()
    assert accepted <= far
    assert found["tar"] == np.mean(d[genuine] <= found["distance"])
    assert found["tar"] > 0.5  # these people are separable


def test_a_split_that_cannot_resolve_the_far_gives_no_threshold_and_says_why():
    feats = np.eye(3, dtype=np.float32)[[0, 0, 1, 1, 2, 2]]
    found = calibrate_from_ground_truth([feats], [np.array([1, 1, 2, 2, 3, 3])], [np.array([1, 2, 1, 2, 1, 2])], 1e-4)
    assert found["distance"] is None and "cannot resolve FAR 0.0001" in found["reason"]
    one = calibrate_from_ground_truth([feats], [np.zeros(6, np.int64)], [np.arange(1, 7)], 1e-2)
    assert one["distance"] is None and "fewer than two" in one["reason"]


def test_a_tracklet_takes_the_id_most_of_its_boxes_match_and_a_switched_one_none():
    from reid.tracking.appearance_threshold import tracklet_identities

    box = [[0, 0, 10, 20]]
    gt = MOTRows(np.array([1, 2, 3, 4]), np.array([7, 7, 9, 9]), np.array(box * 4, float), np.ones(4),
                 np.ones(4, np.int64), np.ones(4))
    # tracklet 5 covers frames 1-3 (7, 7, 9: mostly person 7); tracklet 6 frames 1-2 and 3-4 of a far box
    # (nobody); tracklet 8 frames 3-4 half on person 9, half off: not a majority
    rows = MOTRows(np.array([1, 2, 3, 3, 4, 4]), np.array([5, 5, 5, 8, 8, 6]),
                   np.array(box * 3 + [[0, 0, 10, 20], [50, 50, 10, 20], [90, 90, 5, 5]], float), np.ones(6),
                   np.full(6, -1), np.full(6, -1.0))
    # frame 3 has two rows on one gt box: the one-to-one matching gives it to one of them, and either way
    # tracklet 5 has 2 of 3 boxes on person 7 and tracklet 8 at most 1 of 2 on person 9
    assert tracklet_identities(rows, gt, np.array([5, 6, 8])).tolist() == [7, -1, -1]


def test_the_ground_truth_linking_threshold_is_the_calibration_of_tracklet_pairs_across_cameras(tmp_path):
    from reid.evaluation.thresholds import calibrate
    from reid.tracking.cross_camera import ground_truth_threshold
    from reid.tracking.sequences import read_sequence
    from reid.tracking.tracklets import Tracklets
    from tests.tracking.sequence_files import write_sequence

    rng = np.random.default_rng(3)
    people = rng.normal(size=(12, 8))
    sequences, rows, parts = [], [], []
    for k in range(2):
        lines = "".join(f"1,{p + 1},{4 * p},{2},3,5,1,1,1\n" for p in range(12))
        seq = read_sequence(write_sequence(str(tmp_path / f"c{k}"), length=1, gt=lines, extra={"scene": "s"}))
        r = MOTRows(np.ones(12, np.int64), np.arange(1, 13) + 100 * k, np.array([[4 * p, 2, 3, 5] for p in range(12)],
                    float), np.ones(12), np.full(12, -1), np.full(12, -1.0))
        feats = people + 0.7 * rng.normal(size=people.shape)
        feats /= np.linalg.norm(feats, axis=1, keepdims=True)
        n = 12
        parts.append(Tracklets(np.full(n, k), np.full(n, k + 1), r.track_id, np.ones(n, np.int64), np.ones(n, np.int64),
                               np.zeros(n), np.zeros(n), np.ones(n, np.int64), feats.astype(np.float32)))
        sequences.append(seq)
        rows.append(r)
    tracklets = Tracklets.concatenate(parts)
    found = ground_truth_threshold(sequences, rows, tracklets, 0.05)
    pids = np.tile(np.arange(12), 2)
    cams = np.repeat([0, 1], 12)
    expected = calibrate(tracklets.features, tracklets.features, pids, pids, cams, cams, fars=[0.05])
    assert found["distance"] == pytest.approx(expected["thresholds"]["0.05"]["distance"])
    assert found["num_impostor"] == expected["num_impostor"]
