"""tools/adapt.py end to end on tiny synthetic multi-camera sequences: stages, report, rerun, resume, refusals."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal

import pytest

from reid.engine import HookBase
from reid.tracking.to_reid import TRACKLET_REGEX
from tests._tools import load_tool
from tests.tracking.model_files import tiny_checkpoint
from tests.tracking.sequence_files import write_sequence

STAGES = ("1-track-before", "2-crops", "3-adapt", "4-track-after")
# Random weights cluster little at the usual radius: a small one, and small clusters, so that 2 epochs train.
TRAIN_OPTS = ["DATALOADER.NUM_WORKERS", "0", "MODEL.DEVICE", "cpu", "UDA.EPS", "0.2", "UDA.MIN_SAMPLES", "2"]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Two cameras of one scene (25 frames of 320x180, ground truth with global ids) and a tiny random model."""
    from reid.tracking.scene_settings import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences

    root = tmp_path_factory.mktemp("adapt")
    make_sequences(str(root / "seqs"), SequenceSettings(cameras=2, frames=25, width=320, height=180, seed=1),
                   log=lambda _: None)
    return str(root / "seqs"), tiny_checkpoint(str(root))


def _argv(inputs, output, tracker_python, *extra):
    sequences, weights = inputs
    # --link-threshold: 16 tracklets are too few to calibrate 1% false accepts from the ground truth
    return ["--sequences", sequences, "--weights", weights, "--output", str(output), "--epochs", "2",
            "--frame-step", "2", "--link-threshold", "0.3", "--tracker-python", tracker_python, *extra,
            "--opts", *TRAIN_OPTS]


def _files(folder):
    """Every file under `folder` (the run lock aside: taking it is what a run does) -> (mtime, sha256)."""
    found = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if name != ".run.lock":
                found[os.path.relpath(path, folder)] = (os.stat(path).st_mtime_ns,
                                                        hashlib.sha256(open(path, "rb").read()).hexdigest())
    return found


@pytest.fixture(scope="module")
def finished(inputs, tracker_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("adapt_run") / "out"
    rc = load_tool("adapt").main(_argv(inputs, out, tracker_python, "--quiet"))
    assert rc == 0
    return out


def _scores(path):
    return json.load(open(path))


@pytest.mark.slow
def test_every_stage_writes_its_files_and_the_report_holds_their_figures(finished, inputs):
    out = finished
    for stage in STAGES:
        assert json.load(open(out / stage / "done.json"))["stage"] == stage
    before, after = (json.load(open(out / s / "done.json"))["result"] for s in (STAGES[0], STAGES[3]))
    sequences = sorted(os.listdir(inputs[0]))
    sequences.remove("sequences.json")
    for result in (before, after):
        for name in sequences:
            assert os.path.getsize(os.path.join(result["results"], f"{name}.txt")) > 0
            assert os.path.getsize(os.path.join(os.path.dirname(result["identities_file"]), "tracks", f"{name}.txt")) > 0
    assert after["label"] == "adapted" and after["model"]["file"].endswith("3-adapt/adapted/model_final.pth")
    # crops: named for their tracklet and camera, listed with the camera
    lines = (out / "2-crops" / "unlabelled" / "crops.txt").read_text().splitlines()
    assert len(lines) == json.load(open(out / "2-crops" / "done.json"))["result"]["crops"] > 16
    for line in lines:
        path, camera = line.split()
        assert re.match(TRACKLET_REGEX, os.path.basename(path)) and f"_c{camera}_t" in path
        assert os.path.getsize(out / "2-crops" / "unlabelled" / path) > 0
    # training: the model's config plus the adaptation's settings, the user's overrides last
    from reid.config import load_config

    cfg = load_config(str(out / "3-adapt" / "adapted" / "config.yaml"))
    assert cfg.UDA.ENABLED and cfg.DATASETS.NAMES == ["unlabelled"] and cfg.UDA.TRACKLET_REGEX == TRACKLET_REGEX
    assert cfg.UDA.CAMERA_AWARE is True and cfg.MODEL.LOSSES.ID.LABEL_SMOOTH == 0 and cfg.SOLVER.MAX_EPOCH == 2
    assert cfg.UDA.EPS == pytest.approx(0.2) and cfg.MODEL.WEIGHTS == inputs[1]
    assert list(cfg.INPUT.SIZE_TEST) == [32, 16]  # the tiny model's own
    assert (out / "3-adapt" / "adapted" / "model_final.pth").is_file()
    # the report's figures are the stages' own
    report = json.load(open(out / "report.json"))
    assert report["ground_truth"] is True
    for when, stage in (("before", STAGES[0]), ("after", STAGES[3])):
        track = _scores(out / stage / "track" / "metrics.json")["runs"][report["models"][when]["label"]]["metrics"]
        links = _scores(out / stage / "links" / "metrics.json")
        for name in sequences + ["COMBINED"]:
            assert report[when]["tracking"][name] == {m: track[name][m] for m in ("HOTA", "IDF1")}
        assert report[when]["multi_camera"]["COMBINED"]["IDF1"] == links["multi_camera_combined"]["IDF1"]
    d = report["difference"]["multi_camera"]["COMBINED"]["IDF1"]
    assert d == pytest.approx(report["after"]["multi_camera"]["COMBINED"]["IDF1"]
                              - report["before"]["multi_camera"]["COMBINED"]["IDF1"])
    table = (out / "report.md").read_text()
    assert "| multi-camera IDF1 COMBINED |" in table and "| HOTA COMBINED |" in table


@pytest.mark.slow
def test_a_rerun_skips_every_stage_and_changes_nothing_and_a_changed_setting_is_refused(finished, inputs,
                                                                                        tracker_python, capsys):
    out = finished
    capsys.readouterr()
    files = _files(out)
    assert load_tool("adapt").main(_argv(inputs, out, tracker_python)) == 0
    printed = capsys.readouterr()
    skipped = [line for line in printed.err.splitlines() if line.endswith(", skipped")]
    assert [line.split(":")[0] for line in skipped] == [*STAGES, "report"]
    assert printed.out.startswith("adapted: HOTA ")
    assert _files(out) == files
    assert load_tool("adapt").main(_argv(inputs, out, tracker_python, "--epochs", "3")) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: --epochs is 3 on this command but 2") and "3-adapt" in err
    assert load_tool("adapt").main(_argv(inputs, out, tracker_python, "--tracker", "deepocsort")) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--tracker is deepocsort on this command but botsort" in err
    assert _files(out) == files


class _StopAt(HookBase):
    """Ctrl-C as the trainer sees it, after step `step` (mid-epoch: 2 epochs of 4 steps)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def after_step(self) -> None:
        if self.trainer.iter == self.step:
            self.trainer.request_stop("test", signum=int(signal.SIGINT))


@pytest.mark.slow
def test_stopped_stages_continue_and_end_with_the_uninterrupted_report(finished, inputs, tracker_python,
                                                                       tmp_path, capsys, monkeypatch):
    out = tmp_path / "out"

    def ctrl_c(sequences, results, folder, *args):
        os.makedirs(os.path.join(folder, "unlabelled", "crops"))  # a stage stopped midway leaves something
        raise KeyboardInterrupt

    monkeypatch.setattr("reid.adapt.recipe.make_crops", ctrl_c)
    assert load_tool("adapt").main(_argv(inputs, out, tracker_python, "--quiet")) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: stopped by SIGINT: the stages completed so far stay in")
    assert (out / "1-track-before" / "done.json").is_file() and not (out / "2-crops" / "done.json").exists()
    monkeypatch.undo()

    def fails(*args):
        raise ValueError("the training failed before its first checkpoint")

    # a training that failed before saving anything keeps nothing worth continuing: other settings may redo it
    monkeypatch.setattr("reid.adapt.recipe.adapt_model", fails)
    other = _argv(inputs, out, tracker_python)
    other[other.index("UDA.MIN_SAMPLES") + 1] = "3"
    assert load_tool("adapt").main(other) == 1
    err = capsys.readouterr().err
    assert "2-crops: redone" in err and "1-track-before: complete" in err
    assert err.strip().splitlines()[-1] == "error: the training failed before its first checkpoint"
    assert (out / "2-crops" / "done.json").is_file() and (out / "3-adapt" / "settings.json").is_file()
    monkeypatch.undo()
    assert load_tool("adapt").main(_argv(inputs, out, tracker_python), hooks=[_StopAt(5)]) == 130
    err = capsys.readouterr().err
    assert "continue it" in err.strip().splitlines()[-1]
    assert "3-adapt: redone" in err and "2-crops: complete" in err
    assert (out / "2-crops" / "done.json").is_file() and not (out / "3-adapt" / "done.json").exists()
    assert not (out / "4-track-after").exists() and not (out / "report.json").exists()
    assert not (out / "3-adapt" / "adapted" / "model_final.pth").exists()
    kept = _files(out / "1-track-before")
    assert load_tool("adapt").main(_argv(inputs, out, tracker_python)) == 0
    err = capsys.readouterr().err
    assert "3-adapt: continued" in err and "2-crops: complete" in err
    log = (out / "3-adapt" / "adapted" / "log.txt").read_text()
    assert "Resumed from" in log and "after iteration 5" in log  # continued where it stopped, not restarted
    assert _files(out / "1-track-before") == kept
    ours, theirs = json.load(open(out / "report.json")), json.load(open(finished / "report.json"))
    for key in ("before", "after", "difference"):
        assert ours[key] == theirs[key]
    assert ours["counts"]["last_clustering"] == theirs["counts"]["last_clustering"]


def test_bad_requests_are_one_line_and_a_foreign_folder_stays_untouched(tmp_path, capsys):
    seq = write_sequence(str(tmp_path / "s"), length=2, det="1,-1,10,10,20,30,0.9,-1,-1,-1\n")
    weights = tiny_checkpoint(str(tmp_path))
    tool = load_tool("adapt")

    def error(argv):
        assert tool.main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and err.startswith("error: ")
        return err

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    err = error(["--sequences", seq, "--weights", weights, "--output", str(foreign), "--link-threshold", "0.3"])
    assert "--output" in err and "did not write" in err
    assert os.listdir(foreign) == ["notes.txt"] and (foreign / "notes.txt").read_text() == "keep"
    err = error(["--sequences", str(tmp_path / "nowhere"), "--weights", weights, "--output", str(tmp_path / "o")])
    assert "nowhere" in err
    err = error(["--sequences", seq, "--weights", str(tmp_path / "missing.pth"), "--output", str(tmp_path / "o")])
    assert "missing.pth" in err
    # no ground truth: the adapted model could not link cameras at the end; refused before any work
    err = error(["--sequences", seq, "--weights", weights, "--output", str(tmp_path / "o")])
    assert "gt/gt.txt" in err and "--link-threshold D" in err and os.path.basename(seq) in err
    # a training setting that cannot be right is refused before the tracking, not when the training starts
    err = error(["--sequences", seq, "--weights", weights, "--output", str(tmp_path / "o"), "--link-threshold", "0.3",
                 "--opts", "UDA.EPSS", "0.3"])
    assert err.startswith("error: --opts: ") and "UDA.EPSS" in err and "UDA.EPS" in err
    empty = write_sequence(str(tmp_path / "e"), length=2, det="")
    err = error(["--sequences", empty, "--weights", weights, "--output", str(tmp_path / "o")])
    assert "det.txt" in err or "detection" in err
    assert not (tmp_path / "o").exists()
    for argv, words in ((["--sequences", seq, "--output", str(tmp_path / "o")], "name the model"),
                        (["--sequences", seq, "--weights", weights, "--output", "o", "--opts", "UDA.EPS"], "KEY VALUE"),
                        (["--sequences", seq, "--weights", weights, "--output", "o", "--opts", "OUTPUT_DIR", "x"],
                         "--opts OUTPUT_DIR: the recipe sets it"),
                        (["--sequences", seq, "--weights", weights, "--output", "o", "--frame-step", "9" * 20],
                         "--frame-step: " + "9" * 20 + " is out of range")):
        with pytest.raises(SystemExit) as stop:
            tool.main(argv)
        assert stop.value.code == 2 and words in capsys.readouterr().err


@pytest.mark.slow
def test_without_ground_truth_the_report_says_so_and_counts_what_was_found(inputs, tracker_python, tmp_path, capsys):
    import shutil

    sequences = tmp_path / "seqs"
    shutil.copytree(inputs[0], sequences)
    for name in os.listdir(sequences):
        shutil.rmtree(sequences / name / "gt", ignore_errors=True)
    out = tmp_path / "out"
    argv = _argv((str(sequences), inputs[1]), out, tracker_python, "--quiet")
    argv[argv.index("--epochs") + 1] = "1"
    assert load_tool("adapt").main(argv) == 0
    printed = capsys.readouterr().out.splitlines()  # the training's log lines, then the tool's two
    assert printed[-2].startswith("no ground truth, no scores: ") and printed[-1].startswith("wrote ")
    report = json.load(open(out / "report.json"))
    assert report["ground_truth"] is False and "before" not in report and "difference" not in report
    done = json.load(open(out / "4-track-after" / "done.json"))["result"]
    assert report["counts"]["after"]["identities"] == done["identities"] == json.load(
        open(out / "4-track-after" / "links" / "identities.json"))["num_identities"]
    assert report["counts"]["crops"] > 16 and report["counts"]["last_clustering"]["epoch"] == 1
    assert not (out / "1-track-before" / "links" / "metrics.json").exists()
    assert (out / "report.md").read_text().startswith("No ground truth in every sequence")


@pytest.mark.slow
def test_videos_in_are_decoded_once_into_the_output_and_adapted_on(inputs, tracker_python, tmp_path, capsys):
    from tests.tracking.video_files import sequences_as_videos

    sequences_as_videos(inputs[0], str(tmp_path / "videos"))
    out = tmp_path / "out"
    argv = _argv(inputs, out, tracker_python, "--quiet")
    argv[argv.index("--sequences"):argv.index("--sequences") + 2] = ["--video", str(tmp_path / "videos")]
    argv[argv.index("--epochs") + 1] = "1"
    assert load_tool("adapt").main(argv) == 0
    assert sorted(os.listdir(out / "videos")) == ["synth-c1", "synth-c2"]
    report = json.load(open(out / "report.json"))
    assert report["ground_truth"] is True and report["settings"]["--video"] == [str(tmp_path / "videos")]
    assert "COMBINED" in report["after"]["multi_camera"]
    capsys.readouterr()
    files = _files(out)
    assert load_tool("adapt").main(argv) == 0
    assert _files(out) == files
