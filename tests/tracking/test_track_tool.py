"""tools/track.py end to end, and its one-line answers to bad input."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reid.tracking.appearance import check_input_size, load_appearance_models
from reid.tracking.mot_files import read_results
from reid.tracking.sequences import find_sequences
from tests._tools import load_tool
from tests.tracking.model_files import tiny_checkpoint
from tests.tracking.sequence_files import write_sequence


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """A tiny random model: its checkpoint and its ONNX export."""
    pytest.importorskip("onnx")  # the export (an optional extra: the minimum-versions lane has none)
    pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("models")
    weights = tiny_checkpoint(str(folder))
    onnx = str(folder / "tiny.onnx")
    assert load_tool("export").main(["--weights", weights, "--output", onnx, "--device", "cpu"]) == 0
    return weights, onnx


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    out = str(tmp_path_factory.mktemp("track") / "synth")
    make_sequences(out, SequenceSettings(cameras=2, frames=25, width=320, height=180, seed=1), log=lambda _: None)
    return out


def test_an_exported_file_gives_the_checkpoints_features_and_keeps_its_size(model_files):
    weights, onnx = model_files
    ckpt, exported = load_appearance_models([weights, onnx])
    assert (ckpt.label, exported.label) == ("tiny", "tiny.onnx")
    crops = [np.random.default_rng(i).integers(0, 256, (40 + 7 * i, 20 + 3 * i, 3), dtype=np.uint8) for i in range(5)]
    assert np.abs(ckpt.embed(crops) - exported.embed(crops)).max() < 1e-4
    assert exported.identity["weights_sha256"] == ckpt.identity["weights_sha256"]
    with pytest.raises(ValueError, match=r"tiny.onnx takes 32x16 crops .* --input-size asks for 64x32"):
        load_appearance_models([onnx], input_size=(64, 32))
    check_input_size((32, 16), None, "x")  # no size asked: any model


@pytest.mark.slow
def test_track_tool_tracks_scores_and_ranks_the_models_in_one_table(synth, model_files, tmp_path, tracker_python,
                                                                    capsys):
    weights, onnx = model_files
    out = tmp_path / "out"
    rc = load_tool("track").main(["--sequences", synth, "--weights", weights, onnx, "--output", str(out),
                                  "--tracker-python", tracker_python, "--quiet"])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    record = json.load(open(out / "metrics.json"))
    assert list(record["runs"]) == ["motion only", "tiny", "tiny.onnx"]
    sequences = find_sequences(synth)
    for label, run in record["runs"].items():
        for s in sequences:
            path = out / label.replace(" ", "_") / f"{s.name}.txt"
            assert run["results"][s.name] == str(path) and len(read_results(str(path), s)) > 0
            assert set(run["metrics"][s.name]) == {"HOTA", "DetA", "AssA", "IDF1", "IDP", "IDR", "IDSW", "MOTA"}
        assert 0 <= run["metrics"]["COMBINED"]["HOTA"] <= 100
    for label in ("tiny", "tiny.onnx"):
        d = record["difference_to_motion_only"][label]
        assert d["IDF1"] == pytest.approx(record["runs"][label]["metrics"]["COMBINED"]["IDF1"]
                                          - record["runs"]["motion only"]["metrics"]["COMBINED"]["IDF1"])
        t = record["runs"][label]["appearance_threshold"]
        assert t["source"] == "ground truth" and t["option"] == "appearance_thresh"
    # the checkpoint and its export give the same features, so the same threshold and tracks
    a, b = (record["runs"][k]["appearance_threshold"]["distance"] for k in ("tiny", "tiny.onnx"))
    assert a == pytest.approx(b, abs=1e-4)
    assert record["runs"]["tiny"]["metrics"]["COMBINED"]["IDF1"] == pytest.approx(
        record["runs"]["tiny.onnx"]["metrics"]["COMBINED"]["IDF1"], abs=1.0)
    assert record["settings"]["tracker"] == "botsort" and record["settings"]["detections"] == "det"
    assert "| motion only |" in printed.out and "| tiny.onnx |" in printed.out
    assert (out / "summary.md").read_text().startswith("| model | HOTA |")
    assert (out / "tracking_gain.png").read_bytes()[:4] == b"\x89PNG"


def _error(argv, capsys, code=1):
    with pytest.raises(SystemExit) as exit_info:
        load_tool("track").main(argv)
    assert exit_info.value.code == code
    return capsys.readouterr().err


def test_bad_requests_are_one_line_before_any_work(tmp_path, capsys):
    seq = write_sequence(str(tmp_path / "s"), length=2, det="1,-1,10,10,20,30,0.9,-1,-1,-1\n")
    base = ["--sequences", seq, "--output", str(tmp_path / "o")]
    err = _error(base + ["--no-reid", "--tracker", "sort"], capsys, 2)
    assert "invalid choice: 'sort'" in err and "botsort" in err and "strongsort" in err
    err = _error(base, capsys, 2)
    assert "name a re-ID model" in err and "--no-reid" in err
    err = _error(base + ["--no-reid", "--tracker", "strongsort"], capsys, 2)
    assert "strongsort needs an appearance model" in err
    err = _error(base + ["--no-reid", "--appearance-threshold", "3"], capsys, 2)
    assert "not a cosine distance in (0, 2]" in err
    err = _error(base + ["--no-reid", "--tracker-option", "use cmc"], capsys, 2)
    assert "is not KEY=VALUE" in err
    (tmp_path / "file").write_text("x")
    assert load_tool("track").main(["--sequences", seq, "--output", str(tmp_path / "file"), "--no-reid"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--output" in err and "is a regular file, not a folder" in err
    os.mkfifo(tmp_path / "fifo")
    assert load_tool("track").main(["--sequences", seq, "--output", str(tmp_path / "fifo"), "--no-reid"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "is a FIFO (named pipe), not a folder" in err
    bad = write_sequence(str(tmp_path / "bad"), length=2, det="1,-1,10,10,20,30,0.9,-1,-1,-1\n2,-1,10,10,20\n")
    assert load_tool("track").main(["--sequences", bad, "--output", str(tmp_path / "o2"), "--no-reid"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "det.txt:2:" in err
    empty = tmp_path / "empty"
    (empty / "img1").mkdir(parents=True)
    assert load_tool("track").main(["--sequences", str(empty), "--output", str(tmp_path / "o3"),
                                    "--no-reid"]) == 1
    assert "\n" not in capsys.readouterr().err.strip()
    assert not os.path.exists(tmp_path / "o")  # nothing was written for any of these


def test_a_model_of_another_input_size_than_asked_is_one_line(tmp_path, capsys, model_files):
    seq = write_sequence(str(tmp_path / "s"), length=2, det="1,-1,10,10,20,30,0.9,-1,-1,-1\n")
    _, onnx = model_files
    assert load_tool("track").main(["--sequences", seq, "--output", str(tmp_path / "o"), "--weights", onnx,
                                    "--input-size", "64", "32"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "takes 32x16 crops" in err and "--input-size" in err


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_det_or_gt_file_that_is_no_file_is_one_line_not_a_missing_file(tmp_path, capsys, kind):
    seq = write_sequence(str(tmp_path / "s"), length=2, det="1,-1,10,10,20,30,0.9,-1,-1,-1\n", gt="")
    target = tmp_path / "s" / ("gt/gt.txt" if kind == "folder" else "det/det.txt")
    os.remove(target)
    {"fifo": os.mkfifo, "folder": os.mkdir, "device": lambda p: os.symlink("/dev/zero", p)}[kind](target)
    assert load_tool("track").main(["--sequences", seq, "--output", str(tmp_path / "o"), "--no-reid"]) == 1
    err = capsys.readouterr().err.strip()
    expected = {"fifo": "is a FIFO (named pipe), not a file", "folder": "is a folder, not a file",
                "device": "is a character device, not a file"}[kind]
    assert "\n" not in err and f"{target} {expected}" in err


def test_an_appearance_threshold_for_a_tracker_without_a_gate_is_one_line(tmp_path, capsys):
    rc = load_tool("track").main(["--sequences", str(tmp_path), "--weights", "w.pth", "--tracker", "deepocsort",
                                  "--appearance-threshold", "0.3", "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "deepocsort has no appearance gate" in err[0]


@pytest.mark.slow
def test_videos_go_through_track_and_link_cameras_to_annotated_videos(synth, model_files, tmp_path, tracker_python,
                                                                       capsys):
    import cv2

    from reid.tracking.annotated import id_colour
    from tests.tracking.video_files import read_video, sequences_as_videos

    weights, _ = model_files
    videos = sequences_as_videos(synth, str(tmp_path / "scene"))
    out, links = tmp_path / "track", tmp_path / "links"
    rc = load_tool("track").main(["--video", str(tmp_path / "scene"), "--weights", weights, "--output", str(out),
                                  "--tracker-python", tracker_python, "--quiet", "--save-video"])
    assert rc == 0, capsys.readouterr().err
    record = json.load(open(out / "metrics.json"))
    assert record["settings"]["videos"] == videos and set(record["runs"]) == {"motion only", "tiny"}
    sequences = find_sequences(synth)
    for s in sequences:
        for label in ("motion_only", "tiny"):
            assert len(read_video(str(out / label / f"{s.name}.mp4"))) == s.length
        assert record["runs"]["tiny"]["metrics"][s.name]["HOTA"] > 0  # the videos' ground truth scored them
    rc = load_tool("link_cameras").main(["--video", *videos, "--tracks", str(out / "tiny"), "--weights", weights,
                                         "--threshold", "0.3", "--output", str(links), "--no-metrics",
                                         "--save-video", "--save-frames"])
    assert rc == 0, capsys.readouterr().err
    for s in sequences:
        rows = read_results(str(links / "tracks" / f"{s.name}.txt"), s)
        frames = read_video(str(links / "tracks" / f"{s.name}.mp4"))
        assert len(frames) == s.length == len(os.listdir(links / "tracks" / s.name))
        # each global id's colour sits on its box's left edge, in the video and in the frame images
        for i in np.flatnonzero(rows.boxes[:, 2] >= 8)[:20]:
            x, y, w, h = (int(v) for v in rows.boxes[i])
            if x < 1 or y < 0 or x + 2 > s.width or y + h > s.height or h < 12:
                continue
            colour = np.array(id_colour(int(rows.track_id[i])), float)
            for frame in (frames[rows.frame[i] - 1],
                          cv2.imread(str(links / "tracks" / s.name / f"{rows.frame[i]:06d}.jpg"))):
                edge = frame[y + 4:y + h - 4, x:x + 2].reshape(-1, 3).astype(float)
                assert np.abs(edge - colour).sum(1).min() < 60, (s.name, rows.frame[i], rows.track_id[i])


def _processes_naming(text: str):
    """PIDs of this machine's processes whose command line contains `text`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.slow
def test_sigterm_mid_run_is_one_line_and_leaves_no_report_no_tracker_and_a_free_folder(tmp_path, tracker_python):
    import signal
    import subprocess
    import sys
    import time

    from reid.tracking.outputs import claim_output
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    seqs = str(tmp_path / "seqs")
    make_sequences(seqs, SequenceSettings(cameras=1, frames=300, width=320, height=180, seed=2), log=lambda _: None)
    out = tmp_path / "out"
    claim_output(str(out), "track").release()
    (out / "metrics.json").write_text("{}")  # an earlier run's report: it must not stay beside a stopped run
    tool = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "track.py")
    proc = subprocess.Popen([sys.executable, tool, "--sequences", seqs, "--no-reid", "--output", str(out),
                             "--tracker-python", tracker_python, "--quiet"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    job = str(out / "features" / "motion_only" / "job.json")
    deadline = time.time() + 120
    while not _processes_naming(job) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    lines = stderr.strip().splitlines()
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert len(lines) == 1 and lines[0].startswith(f"error: stopped by SIGTERM: {out} holds the result files"), stderr
    assert not (out / "metrics.json").exists() and not (out / "summary.md").exists()
    assert _processes_naming(job) == []  # the tracker's process ended with the tool
    claim_output(str(out), "track").release()  # and the folder's lock went with it


def test_a_file_without_an_input_convention_runs_only_as_the_user_names_it(model_files, tmp_path):
    import onnx

    _, onnx_path = model_files
    graph = onnx.load(onnx_path)
    del graph.metadata_props[:]  # what another exporter writes: no circle_reid record
    foreign = str(tmp_path / "foreign.onnx")
    onnx.save(graph, foreign)
    with pytest.raises(ValueError, match=r"foreign.onnx records no input convention .*--input-convention raw"):
        load_appearance_models([foreign])
    crops = [np.random.default_rng(i).integers(0, 256, (40, 20, 3), dtype=np.uint8) for i in range(4)]
    (ours,) = load_appearance_models([onnx_path])
    (raw,) = load_appearance_models([foreign], input_convention="raw")
    (boxmot,) = load_appearance_models([foreign], input_convention="boxmot")
    assert np.abs(raw.embed(crops) - ours.embed(crops)).max() < 1e-6  # raw pixels: what our export takes
    assert np.abs(boxmot.embed(crops) - ours.embed(crops)).max() > 1e-3  # normalised crops: another input
    with pytest.raises(ValueError, match=r"tiny.onnx records its input convention \(raw\); leave --input-convention"):
        load_appearance_models([onnx_path], input_convention="boxmot")


def test_no_box_to_track_is_one_line_and_a_deep_option_value_too(tmp_path, capsys):
    empty = [write_sequence(str(tmp_path / "set" / n), length=2, det="") for n in ("a", "b")]
    rc = load_tool("track").main(["--sequences", str(tmp_path / "set"), "--no-reid", "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "no sequence has a box to track" in err[0] and "--detections gt" in err[0]
    assert not (tmp_path / "o").exists() and len(empty) == 2
    err = _error(["--sequences", str(tmp_path), "--no-reid", "--output", str(tmp_path / "o"),
                  "--tracker-option", "x=" + "[" * 50000], capsys, 2)
    assert "nested too deep to be a tracker setting" in err


def test_a_sequence_without_boxes_beside_others_is_named_in_a_note(tmp_path):
    from reid.tracking.tracker_runs import check_boxes

    sequences = [find_sequences(write_sequence(str(tmp_path / n), length=2, det=d))[0]
                 for n, d in (("a", ""), ("b", "1,-1,10,10,20,30,0.9,-1,-1,-1\n"))]
    from reid.tracking.tracker_runs import sequence_detections

    said = []
    check_boxes(sequences, [sequence_detections(s, "det") for s in sequences], "det", said.append)
    assert said == ["note: 1 of 2 sequences have no box to track (det/det.txt empty): a"]


@pytest.mark.slow
@pytest.mark.parametrize("tracker", ["boosttrack", "hybridsort"])
def test_boxmots_other_appearance_trackers_run_with_the_toolkits_features(tracker, synth, tmp_path, tracker_python,
                                                                          capsys):
    weights = tiny_checkpoint(str(tmp_path))
    out = tmp_path / "out"
    rc = load_tool("track").main(["--sequences", synth, "--weights", weights, "--tracker", tracker, "--output",
                                  str(out), "--tracker-python", tracker_python, "--quiet",
                                  "--tracker-option", "max_age=20"])
    assert rc == 0, capsys.readouterr().err
    record = json.load(open(out / "metrics.json"))
    assert list(record["runs"]) == ["motion only", "tiny"] and record["settings"]["tracker"] == tracker
    for run in record["runs"].values():
        assert 0 < run["metrics"]["COMBINED"]["HOTA"] <= 100
    assert record["runs"]["tiny"]["appearance_threshold"]["option"] is None  # weighted, no gate
    capsys.readouterr()
    assert load_tool("track").main(["--sequences", synth, "--weights", weights, "--tracker", tracker,
                                    "--appearance-threshold", "0.3", "--output", str(tmp_path / "o2")]) == 1
    assert f"{tracker} has no appearance gate" in capsys.readouterr().err


def test_without_backend_a_large_job_runs_the_checkpoint_in_onnx_runtime_with_its_features(model_files, monkeypatch):
    from reid.inference import backend_choice

    weights, _ = model_files
    said = []
    small = load_appearance_models([weights], crops=10, log=said.append)[0]
    assert small.identity["backend"] == "torch" and said == []
    large = load_appearance_models([weights], crops=backend_choice.AUTO_MIN_CROPS, log=said.append)[0]
    assert large.identity["backend"] == "onnxruntime" and len(said) == 1 and "--backend torch" in said[0]
    assert large.identity["weights_sha256"] == small.identity["weights_sha256"]
    crops = [np.random.default_rng(i).integers(0, 256, (40 + 7 * i, 20 + 3 * i, 3), dtype=np.uint8) for i in range(5)]
    assert np.abs(small.embed(crops) - large.embed(crops)).max() < 1e-4
    # named, the backend is kept whatever the job
    assert load_appearance_models([weights], backend="torch", crops=10 ** 6)[0].identity["backend"] == "torch"

    def broken(*args, **kwargs):
        raise RuntimeError("the exporter failed\nwith a long story")

    said.clear()
    monkeypatch.setattr("reid.inference.predictor.build_runtime", broken)
    fallback = load_appearance_models([weights], crops=10 ** 6, log=said.append)[0]
    assert fallback.identity["backend"] == "torch"
    assert said[-1] == ("ONNX Runtime could not run the exported model (RuntimeError: the exporter failed); embedding "
                        "with PyTorch")
