"""reid/adapt/records.py: the output folder's claim and the stages' records."""
from __future__ import annotations

import json
import os

import pytest

from reid.adapt.records import DONE_FILE, SETTINGS_FILE, StageRecord, claim_folder, settings_difference


def test_a_difference_names_the_first_setting_and_both_values():
    recorded = {"--tracker": "botsort", "--epochs": 2, "--opts": ["UDA.EPS", "0.3"]}
    assert settings_difference(recorded, dict(recorded), "x/done.json") is None
    line = settings_difference(recorded, {**recorded, "--epochs": 3}, "x/done.json")
    assert line.startswith("--epochs is 3 on this command but 2 in the run recorded in x/done.json")
    assert "run it with --epochs 2" in line and "\n" not in line
    line = settings_difference({**recorded, "--link-threshold": None}, {**recorded, "--link-threshold": 0.3}, "f")
    assert "--link-threshold is 0.3" in line and "run it without --link-threshold" in line
    # a setting only one side knows is a difference too
    assert settings_difference(recorded, {k: v for k, v in recorded.items() if k != "--opts"}, "f").startswith("--opts")


def test_a_stage_record_refuses_other_settings_done_or_started(tmp_path):
    record = StageRecord(str(tmp_path / "3-adapt"))
    record.check({"--epochs": 2})  # nothing recorded: anything goes
    record.start({"--epochs": 2}, fresh=False)
    assert json.load(open(tmp_path / "3-adapt" / SETTINGS_FILE))["settings"] == {"--epochs": 2}
    assert record.done is None
    with pytest.raises(ValueError, match="--epochs is 3 on this command but 2"):
        record.check({"--epochs": 3})
    record.check({"--epochs": 3}, started=False)  # a stage redone from scratch may change
    (tmp_path / "3-adapt" / "partial.pth").write_text("x")
    record.start({"--epochs": 2}, fresh=False)  # continued: its partial work stays
    assert (tmp_path / "3-adapt" / "partial.pth").exists()
    record.finish({"--epochs": 2}, {"weights": "w.pth"})
    assert record.done["result"] == {"weights": "w.pth"} and record.done["stage"] == "3-adapt"
    with pytest.raises(ValueError, match=DONE_FILE):
        record.check({"--epochs": 3}, started=False)
    record.start({"--epochs": 2}, fresh=True)  # redone: what the stopped attempt left goes
    assert sorted(os.listdir(tmp_path / "3-adapt")) == [SETTINGS_FILE]


def test_the_output_folder_is_never_someone_elses(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match=r"--output .*mine holds files that tools/adapt.py did not write"):
        claim_folder(str(foreign), [])
    assert os.listdir(foreign) == ["notes.txt"]
    tracked = tmp_path / "tracked"
    tracked.mkdir()
    (tracked / "summary.md").write_text("| model |")  # tools/track.py's results
    with pytest.raises(ValueError, match="holds the results of tools/track.py"):
        claim_folder(str(tracked), [])
    with pytest.raises(ValueError, match="lie one inside the other"):
        claim_folder(str(tmp_path / "seqs" / "out"), [str(tmp_path / "seqs")])
    empty = tmp_path / "empty"
    empty.mkdir()
    claim_folder(str(empty), [str(tmp_path / "seqs")]).release()
    owner = (empty / ".circle-reid-tool").stat().st_mtime_ns
    claim_folder(str(empty), []).release()  # our own folder: taken again, the owner file left as it was
    assert (empty / ".circle-reid-tool").stat().st_mtime_ns == owner
