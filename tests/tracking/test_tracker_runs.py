"""Tracking gain: detections per sequence, the runs of one call, their differences and report."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

import reid.tracking.tracker_runs as gain
from reid.tracking.appearance import AppearanceModel
from reid.tracking.tracker_runs import (
    MOTION_ONLY,
    RunResult,
    check_tracker,
    differences,
    sequence_detections,
    track_runs,
    tracked_models,
)
from reid.tracking.mot_files import read_gt, read_results
from reid.tracking.report import report_record, table, write_report
from reid.tracking.sequences import find_sequences, read_sequence
from reid.tracking.appearance_threshold import match_to_ground_truth
from tests.tracking.sequence_files import write_sequence

GT = "1,1,10,10,20,30,1,1,1.0\n1,2,50,10,20,30,0,1,1.0\n2,1,12,10,20,30,1,7,0.5\n2,3,60,20,20,30,1,1,0.8\n"


def test_ground_truth_detections_are_the_pedestrians_that_count(tmp_path):
    seq = read_sequence(write_sequence(str(tmp_path / "s"), length=2, gt=GT))
    rows = sequence_detections(seq, "gt")
    # id 2 is marked not to consider, the second id 1 box is class 7 (not a pedestrian)
    assert rows.frame.tolist() == [1, 2] and rows.boxes[:, 0].tolist() == [10, 60]
    assert rows.conf.tolist() == [1, 1] and rows.track_id.tolist() == [-1, -1]


def test_detections_the_trackers_cannot_take_are_one_line_each(tmp_path):
    seq = read_sequence(write_sequence(str(tmp_path / "a"), length=2, det="1,-1,10,10,20,30,3.5,-1,-1,-1\n"))
    with pytest.raises(ValueError, match=r"det.txt: detection confidence 3.5 \(frame 1\) is outside \[0, 1\]"):
        sequence_detections(seq, "det")
    with pytest.raises(ValueError, match="no gt/gt.txt for --detections gt"):
        sequence_detections(seq, "gt")
    bare = read_sequence(write_sequence(str(tmp_path / "b"), length=2))
    with pytest.raises(ValueError, match=r"no det/det.txt; .* --detections gt"):
        sequence_detections(bare, "det")
    damaged = read_sequence(write_sequence(str(tmp_path / "c"), length=2, det="1,-1,10,10,20,30,0.9\n2,-1,x,1,2,3,0.5\n"))
    with pytest.raises(ValueError, match=r"det.txt:2: .*'x'"):
        sequence_detections(damaged, "det")


def test_trackers_by_name_and_the_runs_of_one_call():
    with pytest.raises(ValueError, match="Unknown tracker 'sort'; valid: botsort, deepocsort, strongsort"):
        check_tracker("sort")
    model = AppearanceModel("m", (8, 4), 2, {}, lambda crops: np.ones((len(crops), 2)))
    assert tracked_models([model], "botsort") == (None, model)  # motion only first: the baseline
    assert tracked_models([model], "strongsort") == (model,)  # StrongSORT has no motion-only mode


def _run(label, hota, idf1, idsw=3, assa=50.0):
    combined = {"HOTA": hota, "DetA": 60.0, "AssA": assa, "IDF1": idf1, "IDP": 80.0, "IDR": 70.0, "IDSW": idsw,
                "MOTA": 55.0}
    return RunResult(label, {"label": label}, {"distance": 0.3, "source": "ground truth"} if label != MOTION_ONLY else {},
                     {"s": f"{label}/s.txt"}, 1.0 if label != MOTION_ONLY else 0.0, 1.0, 100,
                     {"s": combined, "COMBINED": combined})


def test_each_model_is_compared_with_motion_only():
    runs = [_run(MOTION_ONLY, 50.0, 60.0, 5, 40.0), _run("good", 55.5, 70.25, 2, 48.0), _run("bad", 49.0, 58.0, 9, 39.0)]
    d = differences(runs)
    assert d == {"good": {"HOTA": 5.5, "AssA": 8.0, "IDF1": 10.25, "IDSW": -3},
                 "bad": {"HOTA": -1.0, "AssA": -1.0, "IDF1": -2.0, "IDSW": 4}}
    assert differences(runs[1:]) == {}  # no baseline, no differences
    text = table(runs)
    assert "| good | 55.50 | 60.00 | 48.00 | 70.25 | 2 | 55.00 | +5.50 | +10.25 | 0.300 | 50.0 | 50% |" in text
    assert "| motion only | 50.00 |" in text and "| - | - | - | 100.0 | - |" in text  # no embedding: 100 frames in 1 s
    speed = runs[1].speed()
    assert speed["frames_per_second"] == 50.0 and speed["appearance_share"] == 0.5


def test_the_report_files_hold_the_runs(tmp_path):
    runs = [_run(MOTION_ONLY, 50.0, 60.0), _run("good", 55.0, 70.0)]
    settings = {"tracker": "botsort", "sequences": "x", "detections": "det"}
    paths = write_report(runs, str(tmp_path), settings)
    assert [os.path.basename(p) for p in paths] == ["metrics.json", "summary.md", "tracking_gain.png"]
    record = json.load(open(paths[0]))
    assert record == json.loads(json.dumps(report_record(runs, settings)))
    assert record["runs"]["good"]["metrics"]["COMBINED"]["IDF1"] == 70.0
    assert record["difference_to_motion_only"]["good"]["IDF1"] == 10.0
    assert open(paths[1]).read() == table(runs) + "\n"
    assert open(paths[2], "rb").read(8) == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------ with BoxMOT
@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    out = str(tmp_path_factory.mktemp("gain") / "synth")
    make_sequences(out, SequenceSettings(cameras=2, frames=40, width=320, height=180, seed=0), log=lambda _: None)
    return out


def _features(kind: str):
    """Stand-in appearance models that see the ground truth: 'oracle' gives each person one code
    (plus noise), 'random' gives every box a random vector."""
    codes = np.random.default_rng(0).normal(size=(1000, 64))

    def embed(seq, rows, model, progress=None):
        rng = np.random.default_rng(int(seq.camera))
        ids = match_to_ground_truth(rows, read_gt(seq.gt_path, seq))
        noise = rng.normal(size=(len(rows), 64))
        f = np.where(ids[:, None] >= 0, codes[np.maximum(ids, 0)] + 0.3 * noise, noise) if kind == "oracle" else noise
        return (f / np.linalg.norm(f, axis=1, keepdims=True)).astype(np.float32)

    return embed


@pytest.mark.slow
def test_a_model_that_knows_the_people_gains_over_motion_only_and_random_features(synth, tmp_path, monkeypatch,
                                                                                  tracker_python):
    monkeypatch.setattr(gain, "embed_rows", lambda seq, rows, model, progress=None: _features(model.label)(seq, rows, model))
    models = [AppearanceModel(k, (8, 4), 64, {"file": k}, lambda crops: None) for k in ("oracle", "random")]
    sequences = find_sequences(synth)
    runs = track_runs(sequences, tracked_models(models, "botsort"), "botsort", str(tmp_path), tracker_python,
                      detections="gt", log=lambda _: None)
    by = {r.label: r for r in runs}
    idf1 = {k: r.metrics["COMBINED"]["IDF1"] for k, r in by.items()}
    assert idf1["oracle"] > idf1[MOTION_ONLY] and idf1["oracle"] > idf1["random"]
    for r in runs:
        for s in sequences:  # result files as the MOTChallenge format says, inside each sequence
            rows = read_results(r.results[s.name], s)
            assert len(rows) > 0 and rows.frame.max() <= s.length
    t = by["oracle"].threshold
    assert t["option"] == "appearance_thresh" and t["source"] == "ground truth" and t["far"] == 0.01
    assert 0 < t["distance"] < 2 and by[MOTION_ONLY].threshold == {}


def test_no_model_takes_the_folder_of_motion_only_or_of_another_model(tmp_path):
    from reid.tracking.appearance import _label

    assert _label("/w/motion_only.pth", []) == "w-motion_only"
    assert _label("/w/my_model.pth", ["my model"]) == "w-my_model"
    model = AppearanceModel("motion only", (8, 4), 2, {}, lambda crops: None)
    with pytest.raises(ValueError, match="two runs would write into one folder"):
        track_runs([], [None, model], "botsort", str(tmp_path), "python")


@pytest.mark.slow
def test_tracker_options_apply_to_every_run_but_never_turn_appearance_on_in_the_baseline(synth, tmp_path,
                                                                                          monkeypatch, tracker_python):
    monkeypatch.setattr(gain, "embed_rows", lambda seq, rows, model, progress=None: _features("oracle")(seq, rows, model))
    model = AppearanceModel("oracle", (8, 4), 64, {}, lambda crops: None)
    runs = track_runs(find_sequences(synth), [None, model], "botsort", str(tmp_path), tracker_python, detections="gt",
                      tracker_options={"use_embeddings": True, "appearance_thresh": 0.2, "use_cmc": False},
                      log=lambda _: None)
    jobs = [json.load(open(tmp_path / "features" / f / "job.json")) for f in ("motion_only", "oracle")]
    assert jobs[0]["options"] == {"use_embeddings": False, "use_cmc": False}
    assert jobs[1]["options"] == {"use_embeddings": True, "appearance_thresh": 0.2, "use_cmc": False}
    assert runs[1].threshold["distance"] == 0.2 and "given" in runs[1].threshold["source"]
    assert all(s["frames"] is None for s in jobs[1]["sequences"])  # no camera-motion compensation: no pixels


@pytest.mark.slow
@pytest.mark.parametrize("tracker", list(gain.TRACKERS))
def test_every_tracker_runs_motion_only_and_with_features_in_the_installed_boxmot(tracker, synth, tmp_path,
                                                                                 monkeypatch, tracker_python):
    """Each tracker, in each supported BoxMOT version (``make test`` the newest, ``make test-min`` the oldest):
    the options turning appearance on and off reach it under that version's names (an older DeepOCSORT's is
    the opposite setting, embedding_off), and its tracks are scored."""
    monkeypatch.setattr(gain, "embed_rows", lambda seq, rows, model, progress=None: _features("oracle")(seq, rows, model))
    model = AppearanceModel("oracle", (8, 4), 64, {}, lambda crops: None)
    sequences = find_sequences(synth)[:1]
    runs = track_runs(sequences, tracked_models([model], tracker), tracker, str(tmp_path), tracker_python,
                      detections="gt", tracker_options={"max_age": 20}, log=lambda _: None)
    assert [r.label for r in runs] == ([MOTION_ONLY] if gain.TRACKERS[tracker].motion_options is not None else []) + \
        ["oracle"]
    for r in runs:
        assert len(read_results(r.results[sequences[0].name], sequences[0])) > 0
        assert 0 < r.metrics["COMBINED"]["HOTA"] <= 100
