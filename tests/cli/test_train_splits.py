"""tools/train_splits.py on a small iLIDS-VID release: one run per split, each tested on its own people,
the mean and standard deviation over the splits; a rerun continues, other settings are refused."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from reid.cli import train_splits
from tests.cli.test_video_runs import VIDEO_DEMO
from tests.data.video.video_files import write_ilidsvid


def _opts(root):
    return ["DATASETS.ROOT", str(root), "DATASETS.NAMES", "[ilidsvid]", "DATASETS.TESTS", "[ilidsvid]",
            "MODEL.DEVICE", "cpu", "INPUT.SIZE_TRAIN", "[32, 16]", "INPUT.SIZE_TEST", "[32, 16]", "INPUT.PADDING", "2",
            "SOLVER.IMS_PER_BATCH", "4", "DATALOADER.NUM_INSTANCE", "2", "DATALOADER.NUM_WORKERS", "0",
            "SOLVER.MAX_EPOCH", "1", "SOLVER.WARMUP_ITERS", "1", "TEST.EVAL_PERIOD", "0"]


@pytest.mark.slow
def test_two_splits_are_trained_tested_and_averaged(tmp_path, capsys):
    write_ilidsvid(str(tmp_path / "data"))
    out = tmp_path / "splits"
    args = ["--config-file", VIDEO_DEMO, "--output", str(out)] + _opts(tmp_path / "data") + ["--splits", "1", "0"]
    assert train_splits.main(args) == 0
    report = json.loads((out / "splits.json").read_text())
    assert report["dataset"] == "ilidsvid" and report["splits"] == [0, 1]
    for k, row in zip((0, 1), report["per_split"]):
        tested = json.loads((out / f"split_{k}" / "test" / "metrics.json").read_text())
        assert tested["split_id"]["ilidsvid"] == k  # each split's own people
        assert row["mAP"] == pytest.approx(tested["results"]["ilidsvid"]["plain"]["mAP"])
    maps = [row["mAP"] for row in report["per_split"]]
    assert report["mean"]["mAP"] == pytest.approx(np.mean(maps)) and report["std"]["mAP"] == pytest.approx(np.std(maps))
    printed = capsys.readouterr().out
    assert "ilidsvid: mean +- std over splits 0, 1" in printed and " +- " in printed
    # the same command again: nothing trained again, the same figures
    final = os.path.getmtime(out / "split_0" / "model_final.pth")
    assert train_splits.main(args) == 0
    assert os.path.getmtime(out / "split_0" / "model_final.pth") == final
    assert json.loads((out / "splits.json").read_text())["mean"] == pytest.approx(report["mean"])


def test_bad_settings_are_one_line_before_any_training(tmp_path, capsys):
    write_ilidsvid(str(tmp_path / "data"))
    opts = _opts(tmp_path / "data")

    def error(args):
        try:
            assert train_splits.main(args) == 1
        except SystemExit as e:  # argparse's usage errors
            assert e.code == 2
        return capsys.readouterr().err.strip().splitlines()[-1]

    base = ["--config-file", VIDEO_DEMO, "--output", str(tmp_path / "o")]
    assert "split indices in 0..9" in error(base + opts + ["--splits", "10"])
    assert "one dataset with published splits" in error(base + opts + ["DATASETS.NAMES", "[synthetic_video]"])
    assert "set by the tool for each split" in error(base + opts + ["OUTPUT_DIR", "x"])
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert "is not an empty folder of this tool's" in error(["--config-file", VIDEO_DEMO, "--output", str(mine)] + opts)
    assert (mine / "notes.txt").read_text() == "mine" and os.listdir(mine) == ["notes.txt"]
    # a folder of this tool's with other settings: refused, naming the setting
    (tmp_path / "o2").mkdir()
    (tmp_path / "o2" / train_splits.SETTINGS).write_text(json.dumps({"config_file": "/other.yml", "opts": []}))
    assert "holds the splits of other settings (config_file" in error(
        ["--config-file", VIDEO_DEMO, "--output", str(tmp_path / "o2")] + opts)


def test_a_settings_file_edited_by_hand_or_a_fifo_output_is_one_line(tmp_path, capsys):
    write_ilidsvid(str(tmp_path / "data"))
    out = tmp_path / "o"
    out.mkdir()
    (out / train_splits.SETTINGS).write_text("{not json")
    assert train_splits.main(["--config-file", VIDEO_DEMO, "--output", str(out)] + _opts(tmp_path / "data")) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "splits_settings.json cannot be read" in err and "changed by hand" in err
    assert (out / train_splits.SETTINGS).read_text() == "{not json"  # left as it was
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert train_splits.main(["--config-file", VIDEO_DEMO, "--output", str(fifo)] + _opts(tmp_path / "data")) == 1
    assert "is not an empty folder of this tool's" in capsys.readouterr().err
