"""A video model end to end: tools/train.py on synthetic tracklets (clips of DATALOADER.VIDEO.SEQ_LEN
frames, frame features pooled by MODEL.VIDEO.TEMPORAL), then tools/test.py: the tracklet feature
(all frames pooled) beats the same model's single-frame feature on the same tracklets."""
from __future__ import annotations

import json
import os

import pytest

from reid.cli import test as cli_test
from reid.cli import train as cli_train
from reid.engine.checkpoint_files import load_checkpoint

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VIDEO_DEMO = os.path.join(ROOT, "configs", "Demo", "video_resnet18.yml")


def video_opts(root, out, temporal="avg"):
    """The video demo shrunk to about a minute: 24 train ids, 12 test ids, 3 cameras, 6 frames, 48x24."""
    return [
        "DATASETS.ROOT", str(root), "OUTPUT_DIR", str(out), "MODEL.DEVICE", "cpu",
        "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "24", "DATASETS.SYNTHETIC.NUM_TEST_IDS", "12",
        "DATASETS.SYNTHETIC.NUM_CAMERAS", "3", "DATASETS.VIDEO.FRAMES", "6",
        "DATASETS.SYNTHETIC.IMAGE_SIZE", "[96, 48]", "INPUT.SIZE_TRAIN", "[48, 24]", "INPUT.SIZE_TEST", "[48, 24]",
        "INPUT.PADDING", "2", "DATALOADER.NUM_WORKERS", "0", "MODEL.VIDEO.TEMPORAL", temporal,
        "SOLVER.IMS_PER_BATCH", "16", "SOLVER.MAX_EPOCH", "8", "SOLVER.WARMUP_ITERS", "5", "SOLVER.CHECKPOINT_PERIOD", "8",
        "TEST.EVAL_PERIOD", "8",
    ]


def _test(run, out, *opts):
    rc = cli_test.main(["--run", str(run), "--output-dir", str(out), "DATALOADER.NUM_WORKERS", "0", *opts])
    assert rc == 0
    return json.loads((out / "metrics.json").read_text())["results"]["synthetic_video"]["plain"]


@pytest.mark.slow
@pytest.mark.parametrize("temporal", ["avg", "attention"])
def test_a_trained_video_model_beats_its_own_single_frame_features(tmp_path, temporal, capsys):
    run = tmp_path / "run"
    assert cli_train.main(["--config-file", VIDEO_DEMO] + video_opts(tmp_path / "data", run, temporal)) == 0
    log = (run / "log.txt").read_text()
    assert "Video dataset synthetic_video" in log and "Saved checkpoint" in log
    pooled = _test(run, tmp_path / "all")
    single = _test(run, tmp_path / "one", "DATALOADER.VIDEO.TEST_SAMPLER", "evenly", "DATALOADER.VIDEO.SEQ_LEN", "1")
    printed = capsys.readouterr().out
    assert "synthetic_video: 12 query / " in printed and " gallery tracklets" in printed
    assert pooled["mAP"] > single["mAP"] + 2.0, (pooled, single)
    assert pooled["R-1"] >= single["R-1"], (pooled, single)
    if temporal == "attention":  # the learned frame weights were trained (they start at zero: exactly avg)
        state = load_checkpoint(str(run / "model_final.pth"))["model"]
        assert float(state["temporal.score.weight"].abs().sum()) > 0


@pytest.mark.slow
def test_a_validation_split_of_tracklets_selects_the_model_and_calibrates_its_thresholds(tmp_path):
    run = tmp_path / "run"
    opts = video_opts(tmp_path / "data", run) + ["SOLVER.MAX_EPOCH", "2", "TEST.EVAL_PERIOD", "1", "TEST.VAL_IDS", "6"]
    assert cli_train.main(["--config-file", VIDEO_DEMO] + opts) == 0
    log = (run / "log.txt").read_text()
    assert "Eval epoch 2 [val synthetic_video]" in log and (run / "model_best.pth").is_file()
    record = json.loads((run / "thresholds.json").read_text())
    assert "6 identities held out of training (6 query / " in record["source"] and "gallery tracklets" in record["source"]
