"""tools/train.py and tools/test.py end to end on a tiny synthetic dataset (the README's flow)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from reid.cli import test as cli_test
from reid.cli import train as cli_train
from reid.engine.checkpoint import CheckpointError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")


def tiny_opts(root, out):
    """The demo config shrunk to seconds: 5 train ids, 3 test ids, 32x16 inputs, 1 epoch."""
    return [
        "DATASETS.ROOT", str(root), "OUTPUT_DIR", str(out), "MODEL.DEVICE", "cpu",
        "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "5", "DATASETS.SYNTHETIC.NUM_TEST_IDS", "3",
        "DATASETS.SYNTHETIC.NUM_CAMERAS", "2", "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "2",
        "DATASETS.SYNTHETIC.NUM_DISTRACTORS", "0", "DATASETS.SYNTHETIC.IMAGE_SIZE", "[64, 32]",
        "INPUT.SIZE_TRAIN", "[32, 16]", "INPUT.SIZE_TEST", "[32, 16]", "INPUT.PADDING", "2",
        "SOLVER.IMS_PER_BATCH", "8", "DATALOADER.NUM_INSTANCE", "2", "DATALOADER.NUM_WORKERS", "0",
        "SOLVER.MAX_EPOCH", "1", "SOLVER.WARMUP_ITERS", "1", "SOLVER.LOG_PERIOD", "1",
    ]


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli")
    out = base / "run"
    rc = cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", out))
    assert rc == 0
    return base, out


def test_train_writes_config_log_metrics_and_checkpoint(trained_run):
    _, out = trained_run
    for name in ("config.yaml", "log.txt", "metrics.jsonl", "model_final.pth"):
        assert (out / name).is_file(), name
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["type"] == "train"]
    evals = [r for r in records if r["type"] == "eval"]
    assert train and all(np.isfinite(r["loss_id"]) for r in train)
    assert {"s_p", "s_n", "lr", "images_per_s"} <= set(train[-1])
    # The demo config evaluates after the last epoch, on the synthetic test split.
    assert evals[-1]["split"] == "test" and evals[-1]["dataset"] == "synthetic"
    assert 0 <= evals[-1]["mAP"] <= 100
    log = (out / "log.txt").read_text()
    assert "Dataset synthetic" in log and "Model:" in log


def test_test_cli_prints_table_writes_metrics_features_and_pictures(trained_run, capsys):
    base, out = trained_run
    feats = base / "feats.npz"
    test_out = base / "test"
    rc = cli_test.main(
        ["--config-file", str(out / "config.yaml"), "MODEL.WEIGHTS", str(out / "model_final.pth"),
         "--rerank", "--visualize", "2", "--save-features", str(feats), "--output-dir", str(test_out),
         "TEST.RERANK.K1", "4", "TEST.RERANK.K2", "2"]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "| plain" in printed and "| rerank" in printed and "mINP" in printed
    report = json.loads((test_out / "metrics.json").read_text())
    rows = report["results"]["synthetic"]
    assert set(rows) == {"plain", "rerank"}
    assert len(rows["plain"]["cmc"]) == 50 and rows["plain"]["R-1"] == pytest.approx(100 * rows["plain"]["cmc"][0], abs=1e-3)
    saved = np.load(feats)
    assert saved["query_feats"].shape[0] == len(saved["query_pids"]) > 0
    assert np.allclose(np.linalg.norm(saved["gallery_feats"], axis=1), 1, atol=1e-5)
    vis = test_out / "ranked" / "synthetic"
    assert (vis / "index.html").is_file() and len(list(vis.glob("*.jpg"))) == 2


def test_test_cli_records_settings_and_keeps_metrics_when_drawing_fails(trained_run, monkeypatch, capsys):
    base, out = trained_run
    test_out = base / "test_fail"
    common = ["--config-file", str(out / "config.yaml"), "MODEL.WEIGHTS", str(out / "model_final.pth"),
              "--output-dir", str(test_out), "TEST.MAX_RANK", "3"]
    # Bad picture options are refused before any work, naming the option.
    for flag, value in (("--visualize", "-1"), ("--vis-topk", "0")):
        with pytest.raises(SystemExit):
            cli_test.main(common + [flag, value])
        assert flag in capsys.readouterr().err
    assert not (test_out / "metrics.json").exists()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(cli_test, "visualize_from_features", broken)
    with pytest.raises(OSError, match="disk full"):
        cli_test.main(common + ["--visualize", "2"])
    report = json.loads((test_out / "metrics.json").read_text())  # written before the pictures
    assert report["settings"] == {"metric": "cosine", "max_rank": 3, "rerank": None, "aqe": None}
    plain = report["results"]["synthetic"]["plain"]
    # MAX_RANK 3 still reports a true R-10: the curve is computed at least 10 deep.
    assert len(plain["cmc"]) == 10 and plain["R-10"] == pytest.approx(100 * plain["cmc"][9], abs=1e-3)


def test_test_cli_without_weights_says_what_to_pass(trained_run):
    _, out = trained_run
    with pytest.raises(CheckpointError, match="MODEL.WEIGHTS"):
        cli_test.main(["--config-file", str(out / "config.yaml"), "--output-dir", str(out / "t2")])


def test_eval_only_uses_last_checkpoint(trained_run):
    base, out = trained_run
    rc = cli_train.main(["--config-file", str(out / "config.yaml"), "--eval-only"])
    assert rc == 0
    # The table logged for "epoch 0" must be that of the final weights: the same mAP as the
    # evaluation the training run recorded after its last epoch (a fresh model would differ).
    log = (out / "log.txt").read_text()
    table = log[log.rindex("synthetic after epoch 0:"):]
    plain = next(line for line in table.splitlines() if line.startswith("| plain"))
    logged_map = float(plain.strip("|").split("|")[4])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained_map = [r for r in records if r["type"] == "eval"][-1]["mAP"]
    assert logged_map == pytest.approx(trained_map, abs=0.006)


def test_tools_scripts_show_help_with_examples():
    for tool in ("train.py", "test.py"):
        res = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tools", tool), "--help"], capture_output=True, text=True
        )
        assert res.returncode == 0 and "examples:" in res.stdout, res.stderr
