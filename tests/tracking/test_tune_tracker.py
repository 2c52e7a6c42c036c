"""tools/tune_tracker.py and its search (reid/tracking/tracker_tuning.py), and the settings file track.py takes."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reid.tracking.tracker_options import read_settings_file, read_spec
from reid.tracking.tracker_tuning import search_space, suggest
from tests._tools import load_tool
from tests.tracking.test_tracker_options import BOTSORT

optuna = pytest.importorskip("optuna")


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "botsort.yaml"
    path.write_text(BOTSORT + "max_age:\n  type: qrandint\n  default: 30\n  range: [10, 61, 10]\n")
    return search_space(read_spec(str(path)))


def test_the_search_space_is_boxmots_tuning_ranges_without_what_the_run_fixes(space):
    assert set(space) == {"track_high_thresh", "track_buffer", "asso_func", "use_cmc", "cmc_method",
                          "appearance_thresh", "unconfirmed_emb_scale", "max_age"}
    assert space["cmc_method"]["parent"] == "use_cmc" and space["appearance_thresh"]["parent"] == "use_embeddings"
    assert space["track_buffer"]["parent"] is None


def test_a_trials_draws_stay_in_boxmots_ranges_and_skip_what_is_switched_off(space):
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(60):
        trial = study.ask()
        chosen = suggest(trial, space, {"use_embeddings": True})
        study.tell(trial, 0.0)
        assert 0.3 <= chosen["track_high_thresh"] <= 0.7
        assert 20 <= chosen["track_buffer"] <= 80 and isinstance(chosen["track_buffer"], int)  # BoxMOT: 81 exclusive
        assert chosen["max_age"] in (10, 20, 30, 40, 50, 60)
        assert chosen["asso_func"] in ("iou", "giou", "diou")
        assert ("cmc_method" in chosen) == chosen["use_cmc"]
        assert 0.1 <= chosen["appearance_thresh"] <= 0.8
    motion = suggest(optuna.trial.FixedTrial({"track_high_thresh": 0.5, "track_buffer": 30, "asso_func": "iou",
                                              "use_cmc": False, "max_age": 10}), space, {"use_embeddings": False})
    assert set(motion) == {"track_high_thresh", "track_buffer", "asso_func", "use_cmc", "max_age"}


def test_a_settings_file_that_is_not_one_is_one_line(tmp_path):
    good = tmp_path / "s.json"
    good.write_text(json.dumps({"tracker": "botsort", "options": {"track_buffer": 60}, "trials": 3}))
    assert read_settings_file(str(good)) == ("botsort", {"track_buffer": 60})
    for text, message in (("{not json", r"not JSON \("), ("[1, 2]", r"not a tracker settings file"),
                          ('{"tracker": "botsort"}', r"not a tracker settings file"),
                          (" " * (1 << 20) + "{}", r"too large for a tracker settings file")):
        bad = tmp_path / "bad.json"
        bad.write_text(text)
        with pytest.raises(ValueError, match=message):
            read_settings_file(str(bad))
    with pytest.raises(FileNotFoundError, match="--tracker-config .*nothing.json' does not exist"):
        read_settings_file(str(tmp_path / "nothing.json"))


def test_track_refuses_a_settings_file_of_another_tracker_in_one_line(tmp_path, capsys):
    settings = tmp_path / "s.json"
    settings.write_text(json.dumps({"tracker": "deepocsort", "options": {}}))
    rc = load_tool("track").main(["--sequences", str(tmp_path), "--no-reid", "--tracker", "botsort",
                                  "--tracker-config", str(settings), "--output", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and len(err) == 1 and "holds settings of deepocsort, not of --tracker botsort" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_tuning_beats_or_ties_trackpys_settings_and_its_file_drives_track(tmp_path, tracker_python, capsys):
    from reid.tracking.synthetic_scene import SequenceSettings
    from reid.tracking.synthetic_sequences import make_sequences
    from tests.tracking.model_files import tiny_checkpoint

    weights = tiny_checkpoint(str(tmp_path))
    for name, seed in (("tune", 1), ("held", 2)):
        make_sequences(str(tmp_path / name), SequenceSettings(cameras=1, frames=30, width=320, height=180, seed=seed),
                       log=lambda _: None)
    out = tmp_path / "out"
    rc = load_tool("tune_tracker").main(["--sequences", str(tmp_path / "tune"), "--test-sequences",
                                         str(tmp_path / "held"), "--weights", weights, "--trials", "3", "--output",
                                         str(out), "--tracker-python", tracker_python, "--quiet",
                                         ])
    printed = capsys.readouterr()
    assert rc == 0, printed.err
    trials = json.load(open(out / "trials.json"))
    record = json.load(open(out / "tracker_settings.json"))
    assert [t["number"] for t in trials] == [0, 1, 2]
    assert trials[0]["settings"]["use_embeddings"] is True and "appearance_thresh" in trials[0]["settings"]
    best = max(trials, key=lambda t: (t["value"], -t["number"]))
    assert record["options"] == best["settings"] and best["value"] >= trials[0]["value"]
    assert record["tuning"]["track.py's"]["HOTA"] == pytest.approx(trials[0]["value"])
    assert set(record["held_out_scores"]) == {"track.py's", "tuned"}
    summary = (out / "summary.md").read_text().splitlines()
    assert len(summary) == 6 and summary[0].startswith("| settings | sequences | HOTA")
    # the file drives track.py: the tuned settings, the gate among them, on the held-out sequences
    rc = load_tool("track").main(["--sequences", str(tmp_path / "held"), "--weights", weights, "--tracker-config",
                                  str(out / "tracker_settings.json"), "--output", str(tmp_path / "track"),
                                  "--tracker-python", tracker_python, "--quiet"])
    assert rc == 0, capsys.readouterr().err
    metrics = json.load(open(tmp_path / "track" / "metrics.json"))
    assert metrics["settings"]["tracker_options"] == record["options"]
    run = metrics["runs"]["tiny"]
    assert run["appearance_threshold"]["distance"] == pytest.approx(record["options"]["appearance_thresh"])
    assert run["metrics"]["COMBINED"]["HOTA"] == pytest.approx(record["held_out_scores"]["tuned"]["HOTA"], abs=1e-6)


def test_without_optuna_the_tool_says_what_to_install(tmp_path, capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_optuna(name, *args, **kwargs):
        if name == "optuna":
            raise ImportError("No module named 'optuna'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_optuna)
    rc = load_tool("tune_tracker").main(["--sequences", str(tmp_path), "--no-reid", "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1 and err == ['error: tuning a tracker needs Optuna: pip install -e ".[tune]" (or pip install optuna).']
    assert not (tmp_path / "o").exists()


HYBRIDSORT = """
delta_t:
  type: randint
  default: 3
  range: [1, 6]
use_embeddings:
  type: choice
  default: True
  options: [False, True]
  activates:
    alpha:
      type: uniform
      default: 0.9
      range: [0.7, 0.99]
    with_longterm_reid:
      type: choice
      default: True
      options: [False, True]
      activates:
        longterm_reid_weight:
          type: uniform
          default: 1.9
          range: [0.0, 2.0]
"""


def test_settings_nested_two_deep_are_drawn_only_under_parents_that_are_on(tmp_path):
    path = tmp_path / "hybridsort.yaml"
    path.write_text(HYBRIDSORT)
    spec = read_spec(str(path))
    assert spec["longterm_reid_weight"]["parent"] == "with_longterm_reid" and spec["alpha"]["parent"] == "use_embeddings"
    space = search_space(spec)
    assert list(space) == ["delta_t", "alpha", "with_longterm_reid", "longterm_reid_weight"]
    params = {"delta_t": 2, "alpha": 0.8, "with_longterm_reid": False, "longterm_reid_weight": 1.0}
    assert suggest(optuna.trial.FixedTrial(params), space, {"use_embeddings": True}) == {
        "delta_t": 2, "alpha": 0.8, "with_longterm_reid": False}
    assert suggest(optuna.trial.FixedTrial({**params, "with_longterm_reid": True}), space,
                   {"use_embeddings": True})["longterm_reid_weight"] == 1.0
    assert suggest(optuna.trial.FixedTrial(params), space, {"use_embeddings": False}) == {"delta_t": 2}
