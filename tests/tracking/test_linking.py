"""Linking tracklets across cameras: the quality weighting, the constrained clustering, the
concatenation of cameras, bad input, and tools/link_cameras.py end to end on generated sequences
(a perfect "oracle" model with ground-truth tracklets gives multi-camera IDF1 = 1)."""
import hashlib
import json
import os

import numpy as np
import pytest
from scipy.cluster.hierarchy import fcluster, linkage
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import squareform

from reid.cli import link_cameras as cli
from reid.tracking import cross_camera
from reid.tracking.appearance import AppearanceModel
from reid.tracking.cross_camera import LinkSettings, concatenate_cameras, link_cameras, read_camera_tracks
from reid.tracking.frames import clip_boxes, frame_crops
from reid.tracking.linking import (
    Transitions, average_linkage, cannot_link, cosine_distances, link_tracklets, load_transitions,
)
from reid.tracking.mot_files import MOTRows, read_gt, read_results
from reid.tracking.sequences import find_sequences
from reid.tracking.tracklets import FULL_HEIGHT, Tracklets, crop_quality, pool_features, select_crops
from tests.tracking.sequence_files import write_sequence


# ------------------------------------------------------------------------------------- helpers
def _rows(frames, ids, boxes, conf=None):
    n = len(frames)
    return MOTRows(np.asarray(frames, np.int64), np.asarray(ids, np.int64), np.asarray(boxes, np.float64),
                   np.ones(n) if conf is None else np.asarray(conf, np.float64), np.ones(n, np.int64), np.ones(n))


def _tracklets(spec, dim=8, fps=10.0):
    """Tracklets from ``(camera, first, last, feature axis or vector)``; features one-hot (or given)."""
    feats = []
    for _, _, _, f in spec:
        v = np.zeros(dim, np.float32)
        if np.isscalar(f):
            v[int(f)] = 1
        else:
            v[:len(f)] = f
        feats.append(v / np.linalg.norm(v))
    cam, first, last = (np.array([s[k] for s in spec], np.int64) for k in range(3))
    n = len(spec)
    return Tracklets(np.zeros(n, np.int64), cam, np.arange(1, n + 1), first, last, (first - 1) / fps,
                     (last - 1) / fps, last - first + 1, np.stack(feats))


def _same(labels, a, b):
    return labels[a] == labels[b]


# ------------------------------------------------------------------------------ quality weighting
def test_crop_quality_follows_its_formula():
    # image 100 x 200; frame 1: box 0 alone-ish, box 1 half outside on the left; frame 2: box 2
    # covered by box 3 over a quarter of its area; box 4 in frame 3 with conf -1 (none) and tiny.
    boxes = [[10, 10, 20, 64], [-10, 0, 20, 128], [50, 50, 20, 40], [60, 50, 10, 20], [0, 0, 10, 32],
             [50, 150, 20, 40]]
    rows = _rows([1, 1, 2, 2, 3, 9], [1, 2, 3, 4, 5, 6], boxes, conf=[0.5, 0.9, 1.0, 0.8, -1, 2.0])
    q = crop_quality(rows, width=100, height=200)
    overlap_3_by_2 = 10 * 20 / (20 * 40)       # box 3 covers a quarter of box 2
    overlap_2_on_3 = 10 * 20 / (10 * 20)       # box 3 lies wholly inside box 2
    expected = [
        0.5 * 1.0 * 1.0 * 64 / FULL_HEIGHT,    # conf 0.5, inside, uncovered, 64 px
        0.9 * 0.5 * 1.0 * 1.0,                 # half cut by the border, 128 px
        1.0 * 1.0 * (1 - overlap_3_by_2) * 40 / FULL_HEIGHT,
        0.8 * 1.0 * (1 - overlap_2_on_3) * 20 / FULL_HEIGHT,  # fully covered: 0
        1.0 * 1.0 * 1.0 * 32 / FULL_HEIGHT,    # conf -1 means none: 1
        1.0 * 1.0 * 1.0 * 40 / FULL_HEIGHT,    # conf above 1 clipped; the box of frame 2 is another frame's
    ]
    np.testing.assert_allclose(q, expected)


def test_select_crops_spreads_over_time_and_takes_the_best_of_each_run():
    frames = np.r_[np.arange(1, 21), np.arange(5, 8)]
    track = np.r_[np.zeros(20, int), np.ones(3, int)]
    quality = np.r_[np.arange(20) % 5 == 2, np.zeros(3)].astype(float)  # row 2 of each run of 5 is best
    chosen = select_crops(track, frames, quality, k=4)
    np.testing.assert_array_equal(chosen, [2, 7, 12, 17, 20, 21, 22])  # 4 runs of 5; a short tracklet: all
    # shuffled rows: the same boxes chosen (by frame, not by row order)
    perm = np.random.default_rng(0).permutation(len(frames))
    again = select_crops(track[perm], frames[perm], quality[perm], k=4)
    np.testing.assert_array_equal(np.sort(perm[again]), chosen)


def test_pool_features_is_the_weighted_mean_renormalised():
    f = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], np.float32)
    pooled = pool_features(f, np.array([3.0, 1.0, 0.0, 0.0]), np.array([0, 0, 1, 1]), 2)
    np.testing.assert_allclose(pooled[0], np.array([3, 1]) / np.sqrt(10), rtol=1e-6)
    np.testing.assert_allclose(pooled[1], np.array([1, 1]) / np.sqrt(2), rtol=1e-6)  # all weights 0: plain mean


# ------------------------------------------------------------------------------------ the linking
def test_linking_two_cameras_known_answer():
    # camera 1: A (frames 1-20), B (1-20), C (30-40) only here; camera 2: A (25-40), B (50-60), D only here
    t = _tracklets([(1, 1, 20, 0), (1, 1, 20, 1), (1, 30, 40, 2), (2, 25, 40, 0), (2, 50, 60, 1), (2, 1, 10, 3)])
    t = Tracklets(*(getattr(t, f) for f in Tracklets.__dataclass_fields__))
    noisy = t.features + np.random.default_rng(0).normal(0, 0.05, t.features.shape).astype(np.float32)
    t = Tracklets(*(getattr(t, f) for f in list(Tracklets.__dataclass_fields__)[:-1]),
                  noisy / np.linalg.norm(noisy, axis=1, keepdims=True))
    labels = link_tracklets(t, threshold=0.5)
    np.testing.assert_array_equal(labels, [0, 1, 2, 0, 1, 3])  # A and B linked; C and D alone (open set)


def test_time_overlapping_tracklets_of_one_camera_are_never_one_identity():
    # identical features everywhere: camera 1 has two people at once (1-10 and 5-15), camera 2 one
    t = _tracklets([(1, 1, 10, 0), (1, 5, 15, 0), (2, 20, 30, 0)])
    labels = link_tracklets(t, threshold=2.0)
    assert not _same(labels, 0, 1)  # not directly, and not through the camera-2 tracklet (groups too)
    assert len(set(labels)) == 2
    # one camera, one after the other (a person coming back): linked
    assert len(set(link_tracklets(_tracklets([(1, 1, 10, 0), (1, 11, 15, 0)]), threshold=0.5))) == 1
    # a shared frame is an overlap
    assert len(set(link_tracklets(_tracklets([(1, 1, 10, 0), (1, 10, 15, 0)]), threshold=0.5))) == 2


def test_max_gap_and_transitions():
    # 10 frames/s: camera 1 ends at 0.9 s, camera 2 starts at 19.9 s (gap 19 s), camera 3 overlaps camera 1
    t = _tracklets([(1, 1, 10, 0), (2, 200, 210, 0), (3, 5, 30, 0)])
    assert len(set(link_tracklets(t, 0.5))) == 1
    gaps_labels = link_tracklets(t, 0.5, max_gap=10)
    assert not _same(gaps_labels, 0, 1) and _same(gaps_labels, 0, 2)
    assert len(set(link_tracklets(t, 0.5, max_gap=19.5))) == 1
    # transitions: 1<->2 takes 15-25 s, 1<->3 not listed, 2<->3 anything
    tr = Transitions({(1, 2): (15.0, 25.0), (2, 3): (0.0, np.inf)})
    cannot = cannot_link(t, transitions=tr)
    np.testing.assert_array_equal(cannot, [[0, 0, 1], [0, 0, 0], [1, 0, 0]])
    tr_fast = Transitions({(1, 2): (0.0, 5.0), (1, 3): (0.0, 1.0), (2, 3): (0.0, np.inf)})
    np.testing.assert_array_equal(cannot_link(t, transitions=tr_fast), [[0, 1, 0], [1, 0, 0], [0, 0, 0]])


def test_average_linkage_equals_scipy_without_constraints():
    rng = np.random.default_rng(3)
    f = rng.normal(size=(30, 4))
    f /= np.linalg.norm(f, axis=1, keepdims=True)
    d = cosine_distances(f)
    for threshold in (0.3, 0.7, 1.1):
        ours = average_linkage(d, np.zeros_like(d, bool), threshold)
        theirs = fcluster(linkage(squareform(d, checks=False), "average"), t=threshold, criterion="distance")
        # the same partition: each of our clusters is one of scipy's, and as many
        pairs_ours = ours[:, None] == ours[None, :]
        pairs_theirs = theirs[:, None] == theirs[None, :]
        np.testing.assert_array_equal(pairs_ours, pairs_theirs)
        assert len(set(ours)) > 1


def test_load_transitions(tmp_path):
    good = tmp_path / "t.json"
    good.write_text(json.dumps({"transitions": [{"cameras": [2, 1], "min_seconds": 3, "max_seconds": 40},
                                                {"cameras": [2, 3]}]}))
    tr = load_transitions(str(good))
    assert tr.allowed(1, 2) == (3.0, 40.0) and tr.allowed(3, 2) == (0.0, np.inf) and tr.allowed(1, 3) is None
    for text, message in [("{", "not JSON"), ("[]", "no list 'transitions'"),
                          ('{"transitions": [{"cameras": [1, 1]}]}', "two different camera numbers"),
                          ('{"transitions": [{"cameras": [1, 2], "max_seconds": "x"}]}', "max_seconds 'x' is not"),
                          ('{"transitions": [{"cameras": [1, 2], "min_seconds": 5, "max_seconds": 1}]}', "swap them"),
                          ('{"transitions": [{"cameras": [1, 2]}, {"cameras": [2, 1]}]}', "listed twice")]:
        good.write_text(text)
        with pytest.raises(ValueError, match=message) as e:
            load_transitions(str(good))
        assert str(good) in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------- cameras concatenated
def test_concatenate_cameras_shifts_frames_by_the_lengths_before():
    a = _rows([1, 5], [7, 8], [[0, 0, 5, 5]] * 2)
    b = _rows([1, 3], [7, 9], [[1, 1, 5, 5]] * 2)
    c = _rows([2], [7], [[2, 2, 5, 5]])
    out = concatenate_cameras([(a, 5), (b, 10), (c, 4)])
    np.testing.assert_array_equal(out.frame, [1, 5, 6, 8, 17])
    np.testing.assert_array_equal(out.track_id, [7, 8, 7, 9, 7])  # global ids kept
    np.testing.assert_array_equal(out.boxes[2], [1, 1, 5, 5])
    with pytest.raises(ValueError, match="outside the camera's 1..4"):
        concatenate_cameras([(a, 4)])


# ---------------------------------------------------------------------------------- bad input
def _two_cameras(root):
    gt = "".join(f"{f},{i},{5 + 30 * (i - 1)},5,20,40,1,1,1\n" for f in (1, 2, 3) for i in (1, 2))
    for cam in (1, 2):
        write_sequence(os.path.join(root, f"hall-c{cam}"), length=3, seed=cam, gt=gt,
                       extra={"scene": "hall", "camera": str(cam)})
    return find_sequences(root)


def test_track_files_that_do_not_fit_the_sequences(tmp_path):
    sequences = _two_cameras(str(tmp_path / "seqs"))
    tracks = tmp_path / "tracks"
    tracks.mkdir()
    (tracks / "hall-c1.txt").write_text("1,1,5,5,20,40,1,-1,-1,-1\n")
    with pytest.raises(FileNotFoundError, match=r"hall-c2.txt: no tracker result file for sequence hall-c2 \(1 of 2"):
        read_camera_tracks(sequences, str(tracks))
    (tracks / "hall-c2.txt").write_text("1,4,5,5,20,40,1,-1,-1,-1\n")
    (tracks / "hall-c9.txt").write_text("")
    with pytest.raises(ValueError, match="hall-c9.txt: no sequence 'hall-c9' among the sequences"):
        read_camera_tracks(sequences, str(tracks))
    os.remove(tracks / "hall-c9.txt")
    assert [list(r.track_id) for r in read_camera_tracks(sequences, str(tracks))] == [[1], [4]]
    with pytest.raises(FileNotFoundError, match="not a folder"):
        read_camera_tracks(sequences, str(tmp_path / "nope"))


def test_gt_tracks_are_made_camera_local(tmp_path):
    sequences = _two_cameras(str(tmp_path / "seqs"))
    with open(os.path.join(sequences[1].gt_path), "w") as f:  # ids 7 and 9, and a non-pedestrian
        f.write("1,9,5,5,20,40,1,1,1\n1,7,40,5,20,40,1,1,1\n2,3,60,5,20,40,0,8,1\n")
    rows = read_camera_tracks(sequences, "gt")[1]
    assert sorted(zip(rows.frame, rows.track_id, rows.boxes[:, 0])) == [(1, 1, 40), (1, 2, 5)]


@pytest.mark.parametrize("value", ["abc", "0", "2.5", "-1", "nan"])
def test_threshold_must_be_a_distance_in_0_2(value, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--sequences", "s", "--tracks", "gt", "--output", "o", "--weights", "w.pth", "--threshold", value])
    assert e.value.code == 2 and "argument --threshold:" in capsys.readouterr().err
    with pytest.raises(ValueError, match="cosine distance in"):
        link_tracklets(_tracklets([(1, 1, 2, 0)]), float(value) if value != "abc" else 3.0)


def test_tool_needs_a_model_and_a_far_in_0_1(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--sequences", "s", "--tracks", "gt", "--output", "o", "--threshold", "0.5"])
    assert e.value.code == 2 and "name the appearance model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--sequences", "s", "--tracks", "gt", "--output", "o", "--run", "r", "--far", "2"])
    assert "argument --far: 2 is not a false accept rate in (0, 1)" in capsys.readouterr().err


# ------------------------------------------------------------------ reference IDF1 (tests only)
def _idf1(gt: MOTRows, pred: MOTRows) -> float:
    """IDF1 = 2 IDTP / (num gt + num pred), IDTP under the best one-to-one id matching, a box pair
    matching when IoU >= 0.5 (Ristani et al. 2016). An independent reference, in the test only."""
    gids, g_inv = np.unique(gt.track_id, return_inverse=True)
    pids, p_inv = np.unique(pred.track_id, return_inverse=True)
    counts = np.zeros((len(gids), len(pids)))
    for frame in np.union1d(gt.frame, pred.frame):
        gi, pi = np.flatnonzero(gt.frame == frame), np.flatnonzero(pred.frame == frame)
        if not len(gi) or not len(pi):
            continue
        a, b = gt.boxes[gi], pred.boxes[pi]
        ix = np.clip(np.minimum(a[:, None, 0] + a[:, None, 2], b[None, :, 0] + b[None, :, 2])
                     - np.maximum(a[:, None, 0], b[None, :, 0]), 0, None)
        iy = np.clip(np.minimum(a[:, None, 1] + a[:, None, 3], b[None, :, 1] + b[None, :, 3])
                     - np.maximum(a[:, None, 1], b[None, :, 1]), 0, None)
        inter = ix * iy
        iou = inter / (a[:, None, 2] * a[:, None, 3] + b[None, :, 2] * b[None, :, 3] - inter)
        g, p = np.nonzero(iou >= 0.5)
        np.add.at(counts, (g_inv.reshape(-1)[gi[g]], p_inv.reshape(-1)[pi[p]]), 1)
    r, c = linear_sum_assignment(-counts)
    return 2 * counts[r, c].sum() / (len(gt) + len(pred))


def test_reference_idf1_on_a_known_case():
    gt = _rows([1, 2, 3, 4], [1, 1, 1, 1], [[0, 0, 10, 10]] * 4)
    pred = _rows([1, 2, 3, 4], [5, 5, 6, 6], [[0, 0, 10, 10]] * 4)  # switched half way: IDTP 2
    assert _idf1(gt, pred) == pytest.approx(2 * 2 / 8)


def reference_scorer(entries, results, workdir):
    """An independent IDF1 (fraction) to check TrackEval's against."""
    out = {}
    for name, gt_path, _ in entries:
        gt = read_gt(gt_path)
        gt = gt.select((gt.conf > 0) & (gt.cls == 1))
        out[name] = {"IDF1": _idf1(gt, read_results(results[name]))}
    return out


# ------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from reid.cli import make_sequences

    out = str(tmp_path_factory.mktemp("linking") / "synth")
    assert make_sequences.main(["--output", out, "--cameras", "2", "--frames", "40", "--size", "320x180"]) == 0
    return out


def oracle_model(sequences):
    """An appearance model that knows every ground-truth crop by its pixels: the feature of a crop
    is the one-hot vector of its person's global id (a perfect re-ID model)."""
    by_pixels, dim = {}, 1
    for seq in sequences:
        gt = read_gt(seq.gt_path)
        dim = max(dim, int(gt.track_id.max()) + 1)
        for _, index, crops in frame_crops(seq, gt.frame, clip_boxes(gt.boxes, seq.width, seq.height)):
            for i, crop in zip(index, crops):
                rgb = np.ascontiguousarray(crop[:, :, ::-1])
                by_pixels[hashlib.sha1(rgb.tobytes() + str(rgb.shape).encode()).hexdigest()] = int(gt.track_id[i])

    def features(crops):
        out = np.zeros((len(crops), dim), np.float32)
        for k, c in enumerate(crops):
            out[k, by_pixels[hashlib.sha1(c.tobytes() + str(c.shape).encode()).hexdigest()]] = 1
        return out

    return AppearanceModel("oracle", (64, 32), dim, {"file": "oracle"}, features)


@pytest.mark.slow
def test_a_perfect_model_links_ground_truth_tracklets_perfectly(synth, tmp_path, tracker_python):
    sequences = find_sequences(synth)
    out = str(tmp_path / "links")

    def trackeval(entries, results, workdir):
        return cross_camera.trackeval_score(entries, results, workdir, tracker_python)

    record = link_cameras(sequences, "gt", oracle_model(sequences), out, LinkSettings(threshold=0.5),
                          score=trackeval, log=lambda _: None)
    # every person is one identity: as many identities as global gt ids, and each holds one person
    gt_ids = set().union(*(set(read_gt(s.gt_path).track_id.tolist()) for s in sequences))
    assert record["num_identities"] == len(gt_ids)
    multi = set(read_gt(sequences[0].gt_path).track_id.tolist()) & set(read_gt(sequences[1].gt_path).track_id.tolist())
    assert len(multi) >= 2 and record["identities_in_several_cameras"] == len(multi)
    metrics = json.load(open(os.path.join(out, "metrics.json")))  # TrackEval's, in percent
    assert metrics["multi_camera"]["synth-multicamera"]["IDF1"] == pytest.approx(100)
    assert all(metrics["per_camera"][s.name]["IDF1"] == pytest.approx(100) for s in sequences)
    # the concatenation written for the scorer: cameras one after the other
    gt_all = read_gt(os.path.join(out, "multicamera", "synth-multicamera-gt.txt"))
    assert len(gt_all) == sum(len(read_gt(s.gt_path)) for s in sequences) and gt_all.frame.max() > 40
    # a model that sees everyone as the same person, held apart only by the constraints: worse
    blind = AppearanceModel("blind", (64, 32), 2, {}, lambda crops: np.ones((len(crops), 2), np.float32))
    link_cameras(sequences, "gt", blind, str(tmp_path / "blind"), LinkSettings(threshold=0.5),
                 score=trackeval, log=lambda _: None)
    blind_metrics = json.load(open(tmp_path / "blind" / "metrics.json"))
    assert blind_metrics["multi_camera"]["synth-multicamera"]["IDF1"] < 90
    # TrackEval's multi-camera IDF1 is the reference's, computed independently on the same files
    folder = tmp_path / "blind" / "multicamera"
    reference = reference_scorer([("m", str(folder / "synth-multicamera-gt.txt"), 0)],
                                 {"m": str(folder / "synth-multicamera.txt")}, "")
    assert blind_metrics["multi_camera"]["synth-multicamera"]["IDF1"] == pytest.approx(100 * reference["m"]["IDF1"])


@pytest.mark.slow
def test_tool_with_a_tiny_model_writes_consistent_files(synth, tmp_path, tracker_python, capsys):
    import torch

    from reid.config import get_cfg
    from reid.modeling import build_model

    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.BACKBONE.PRETRAINED, cfg.MODEL.DEVICE = "resnet18", False, "cpu"
    cfg.INPUT.SIZE_TEST = [64, 32]
    torch.manual_seed(0)
    weights = tmp_path / "model_final.pth"
    torch.save({"model": build_model(cfg).state_dict(), "cfg": cfg.dump()}, weights)
    out = tmp_path / "links"
    base = ["--sequences", synth, "--tracks", "gt", "--weights", str(weights), "--output", str(out),
            "--tracker-python", tracker_python]
    assert cli.main(base + ["--threshold", "0.3", "--crops-per-tracklet", "3", "--max-gap", "20"]) == 0
    sequences = find_sequences(synth)
    record = json.load(open(out / "identities.json"))
    owner = {(t["sequence"], t["local_id"]): i["id"] for i in record["identities"] for t in i["tracklets"]}
    for seq, local in zip(sequences, read_camera_tracks(sequences, "gt")):
        rows = read_results(str(out / "tracks" / f"{seq.name}.txt"))
        assert len(rows) == len(local)
        order = np.lexsort((local.track_id, local.frame))  # as written: sorted by (frame, id)
        expected = [owner[(seq.name, int(t))] for t in local.track_id[order]]
        assert sorted(zip(rows.frame, rows.track_id)) == sorted(zip(local.frame[order], expected))
    assert 0 <= json.load(open(out / "metrics.json"))["multi_camera"]["synth-multicamera"]["IDF1"] <= 100
    # --far without calibrated thresholds next to the weights: one line saying what to do
    capsys.readouterr()
    assert cli.main(base + ["--far", "1e-2", "--calibration", "model"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no calibrated thresholds next to" in err and "--threshold D" in err
    # calibrated thresholds next to the weights: --far picks the distance 1 - similarity at that FAR
    from reid.evaluation.thresholds import calibrate, save_thresholds

    rng = np.random.default_rng(0)
    pids = np.repeat(np.arange(20), 4)
    feats = rng.normal(size=(20, 16))[pids] + 0.5 * rng.normal(size=(80, 16))
    record = calibrate(feats[::2], feats[1::2], pids[::2], pids[1::2], np.zeros(40, int), np.ones(40, int), [1e-2])
    save_thresholds(str(tmp_path), dict(record, weights="model_final.pth"))
    assert cli.main(base + ["--far", "1e-2", "--output", str(tmp_path / "far"), "--calibration", "model"]) == 0
    distance = 1 - record["thresholds"]["0.01"]["similarity"]
    assert f"threshold: cosine distance {distance:.4f}" in capsys.readouterr().out
    assert json.load(open(tmp_path / "far" / "identities.json"))["threshold"] == pytest.approx(distance)
    # without --calibration model, sequences with ground truth calibrate from it, as track.py does
    assert cli.main(base + ["--far", "1e-2", "--output", str(tmp_path / "truth")]) == 0
    source = json.load(open(tmp_path / "truth" / "identities.json"))["threshold_source"]
    assert source["source"].startswith("ground truth") and source["far"] == 1e-2
    assert "from the ground truth" in capsys.readouterr().out


def test_sequences_without_a_declared_scene_get_no_multi_camera_score(tmp_path):
    """Undeclared sequences (MOT17's) number their people each from 1: joining their gt would invent people."""
    gt = "1,1,2,2,10,20,1,1,1\n2,1,3,2,10,20,1,1,1\n"
    for name in ("MOT-02", "MOT-04"):
        write_sequence(str(tmp_path / "train" / name), length=2, gt=gt)
    sequences = find_sequences(str(tmp_path / "train"))
    calls = []

    def scorer(entries, results, workdir):
        calls.append([e[0] for e in entries])
        return reference_scorer(entries, results, workdir)

    files = [s.gt_path for s in sequences]  # the gt as results: per camera it is perfect
    scores = cross_camera.score_cameras(sequences, files, str(tmp_path / "out"), scorer)
    assert calls == [["MOT-02", "MOT-04"]] and scores["multi_camera"] == {}
    assert all(v["IDF1"] == pytest.approx(1.0) for v in scores["per_camera"].values())


def test_transitions_naming_a_camera_the_scene_lacks_are_one_line(tmp_path):
    path = tmp_path / "t.json"
    path.write_text('{"transitions": [{"cameras": [1, 2]}, {"cameras": [2, 7]}]}')
    transitions = load_transitions(str(path))
    assert transitions.check_cameras([1, 2, 7], str(path)) is transitions
    with pytest.raises(ValueError, match=r"t.json: camera 7 is not a camera of these sequences \(cameras 1, 2"):
        transitions.check_cameras([1, 2], str(path))
