"""tools/train.py and tools/test.py end to end on a tiny synthetic dataset (the README's flow)."""
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from reid.cli import test as cli_test
from reid.cli import train as cli_train
from reid.cli import test_run
from reid.training import eval_fn as training_eval_fn
from reid.config import load_config
from reid.data import build_test_data
from reid.engine.trainer import NonFiniteLossError, Trainer, TrainingInterrupted
from reid.modeling.backbones.resnet import PretrainedWeightsError, ResNetBackbone

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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


@pytest.mark.slow
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
    assert "Dataset synthetic" in log and "Model: Baseline | backbone resnet18" in log
    # Each table and the model line once: the synthetic set is both the train and the test set.
    assert log.count("Dataset synthetic") == 1 and log.count("Model:") == 1


@pytest.mark.slow
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


@pytest.mark.slow
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

    monkeypatch.setattr(test_run, "visualize_from_features", broken)
    assert cli_test.main(common + ["--visualize", "2"]) == 1
    assert "error: disk full" in capsys.readouterr().err
    report = json.loads((test_out / "metrics.json").read_text())  # written before the pictures
    assert report["settings"] == {"metric": "cosine", "max_rank": 3, "rerank": None, "aqe": None, "fars": None,
                                  "open_set": None}
    plain = report["results"]["synthetic"]["plain"]
    # MAX_RANK 3 still reports a true R-10: the curve is computed at least 10 deep.
    assert len(plain["cmc"]) == 10 and plain["R-10"] == pytest.approx(100 * plain["cmc"][9], abs=1e-3)


def test_test_cli_without_weights_says_how_to_name_a_model(tmp_path, capsys):
    out = tmp_path / "run"  # never read: each mistake is refused before any file is
    # A config file with no weights next to it (not a run's folder), and no weights given.
    assert cli_test.main(["--config-file", DEMO, "--output-dir", str(tmp_path / "t")]) == 1
    err = user_error(capsys)
    assert f"Config file {DEMO!r} given without weights" in err and "--weights FILE" in err and "--run DIR" in err
    assert not (tmp_path / "t").exists()
    with pytest.raises(SystemExit):  # two configs: a usage error, before anything is loaded
        cli_test.main(["--run", str(out), "--config-file", DEMO])
    assert "--run and --config-file" in capsys.readouterr().err
    assert cli_test.main(["--weights", str(out / "model_final.pth"), "MODEL.WEIGHTS", str(out / "other.pth")]) == 1
    assert "Two weights files given" in user_error(capsys)


@pytest.mark.slow
def test_test_cli_takes_a_run_folder_a_checkpoint_or_a_config_like_every_tool(trained_run, tmp_path):
    _, out = trained_run
    run = tmp_path / "run"
    shutil.copytree(out, run, ignore=shutil.ignore_patterns("test*"))
    # --run: the run's config and weights; results go into the run folder, whatever OUTPUT_DIR says.
    assert cli_test.main(["--run", str(run), "TEST.MAX_RANK", "5"]) == 0
    by_run = json.loads((run / "test" / "metrics.json").read_text())
    assert by_run["weights"] == str(run / "model_final.pth")
    ways = {
        "weights": ["--weights", str(run / "model_final.pth")],  # its stored config
        "config": ["--config-file", str(run / "config.yaml")],  # the weights next to it
        "config+weights": ["--config-file", str(run / "config.yaml"), "--weights", str(run / "model_final.pth")],
        "config+override": ["--config-file", str(run / "config.yaml"), "MODEL.WEIGHTS", str(run / "model_final.pth")],
    }
    for name, argv in ways.items():
        assert cli_test.main(argv + ["TEST.MAX_RANK", "5", "--output-dir", str(tmp_path / name)]) == 0, name
        report = json.loads((tmp_path / name / "metrics.json").read_text())
        assert report["results"] == by_run["results"], name
    # A run that selected on a validation split: --run tests its model_best.pth.
    shutil.copy(run / "model_final.pth", run / "model_best.pth")
    assert cli_test.main(["--run", str(run), "--output-dir", str(tmp_path / "best")]) == 0
    assert json.loads((tmp_path / "best" / "metrics.json").read_text())["weights"] == str(run / "model_best.pth")


@pytest.mark.slow
def test_eval_only_uses_last_checkpoint(trained_run):
    base, out = trained_run
    rc = cli_train.main(["--run", str(out), "--eval-only"])
    assert rc == 0
    # The table names the checkpoint and its epoch, and is that of the final weights: the same
    # mAP as the evaluation the training run recorded after its last epoch (a fresh model would differ).
    log = (out / "log.txt").read_text()
    table = log[log.rindex(f"synthetic with {out / 'model_final.pth'} (after epoch 1):"):]
    plain = next(line for line in table.splitlines() if line.startswith("| plain"))
    logged_map = float(plain.strip("|").split("|")[4])
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    trained_map = [r for r in records if r["type"] == "eval"][-1]["mAP"]
    assert logged_map == pytest.approx(trained_map, abs=0.006)


@pytest.mark.slow
def test_eval_only_takes_weights_trained_on_other_identities(trained_run, tmp_path):
    # The checkpoint's head has 5 classes; this config's training set has 6. Evaluation uses
    # no head, so --eval-only must not stop on the head's shape.
    base, out = trained_run
    opts = tiny_opts(base / "data", tmp_path / "other")
    opts[opts.index("DATASETS.SYNTHETIC.NUM_TRAIN_IDS") + 1] = "6"
    argv = ["--config-file", DEMO, "--eval-only", "--weights", str(out / "model_final.pth")] + opts
    assert cli_train.main(argv) == 0
    log = (tmp_path / "other" / "log.txt").read_text()
    assert f"synthetic with {out / 'model_final.pth'} (after epoch 1):" in log
    # main(argv) logs the arguments it was given (not those of the process that called it).
    assert f"Command: tools/train.py {shlex.join(argv)} (main() called from " in log


@pytest.mark.slow
def test_tools_scripts_show_help_with_examples():
    for tool in ("train.py", "test.py"):
        res = subprocess.run(
            [sys.executable, os.path.join(ROOT, "tools", tool), "--help"], capture_output=True, text=True
        )
        assert res.returncode == 0 and "examples:" in res.stdout, res.stderr


# ----------------------------------------------------------------------------------------
# Helpers for the tests below: list files of a custom test set made of synthetic images.
# ----------------------------------------------------------------------------------------
def write_list(path, items):
    path.write_text("".join(f"{os.path.abspath(p)} {pid} {cam}\n" for p, pid, cam in items))
    return str(path)


def synthetic_test_items(out):
    return build_test_data(load_config(str(out / "config.yaml")), "synthetic")


def user_error(capsys):
    """stderr of a run that must have printed one ``error:`` line and no traceback."""
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err


@pytest.mark.slow
def test_two_test_sets_keep_their_metrics_and_features_apart(trained_run, tmp_path):
    base, out = trained_run
    query, gallery = synthetic_test_items(out)
    q_list = write_list(tmp_path / "query.txt", query[:2])
    g_list = write_list(tmp_path / "gallery.txt", gallery)
    test_out = tmp_path / "test"
    rc = cli_test.main(
        ["--config-file", str(out / "config.yaml"), "MODEL.WEIGHTS", str(out / "model_final.pth"),
         "DATASETS.TESTS", "[synthetic, custom]", "DATASETS.CUSTOM.QUERY_LIST", q_list,
         "DATASETS.CUSTOM.GALLERY_LIST", g_list, "--save-features", str(tmp_path / "feats.npz"),
         "--output-dir", str(test_out), "--visualize", "100"]
    )
    assert rc == 0
    report = json.loads((test_out / "metrics.json").read_text())
    assert set(report["results"]) == {"synthetic", "custom"}
    for name, num_query in (("synthetic", len(query)), ("custom", 2)):
        saved = np.load(tmp_path / f"feats_{name}.npz")  # a feature file, not overwritten with JSON
        assert saved["query_feats"].shape[0] == num_query
    log = (test_out / "log.txt").read_text().splitlines()
    assert log[-1].endswith(f"Wrote {test_out / 'metrics.json'}")
    # --visualize 100 draws only the queries there are, and the log says how many.
    drawn = len(list((test_out / "ranked" / "custom").glob("*.jpg")))
    assert 0 < drawn <= 2
    assert any(f"Ranked results of {drawn} queries: {test_out / 'ranked' / 'custom'}" in line for line in log)


def test_train_refuses_bad_evaluation_settings_before_training(trained_run, tmp_path, capsys):
    base, out = trained_run
    query, gallery = synthetic_test_items(out)
    # A custom test set whose gallery never shows a query's person: nothing to evaluate.
    q_pid = query[0][1]
    no_match = ["DATASETS.TESTS", "custom",
                "DATASETS.CUSTOM.QUERY_LIST", write_list(tmp_path / "q.txt", [query[0]]),
                "DATASETS.CUSTOM.GALLERY_LIST", write_list(tmp_path / "g.txt", [g for g in gallery if g[1] != q_pid])]
    cases = [
        (["DATASETS.TESTS", "markt1501"], ["DATASETS.TESTS", "'markt1501'", "market1501"]),
        (["DATASETS.TESTS", "[synthetic, market1501]"], ["Market-1501", str(base / "data")]),
        (["TEST.METRIC", "cos"], ["TEST.METRIC", "'cos'", "cosine, euclidean"]),
        (no_match, ["'custom'", "none of its 1 query images has a match"]),
    ]
    for i, (opts, expected) in enumerate(cases):
        run = tmp_path / f"run{i}"
        rc = cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", run) + opts)
        err = user_error(capsys)
        assert rc == 1
        for text in expected:
            assert text in err, (opts, err)
        # Refused before the first iteration: nothing was trained, nothing was saved.
        assert not (run / "metrics.jsonl").exists() and not list(run.glob("*.pth")), opts


@pytest.mark.slow
def test_train_saves_the_final_weights_when_evaluation_fails(trained_run, tmp_path, monkeypatch, capsys):
    base, _ = trained_run
    out = tmp_path / "run"

    def broken(*args, **kwargs):
        raise ValueError("No query has a valid match in the gallery")

    monkeypatch.setattr(training_eval_fn, "evaluate_model", broken)
    rc = cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", out))
    assert rc == 1 and "No query has a valid match" in user_error(capsys)
    assert (out / "model_final.pth").is_file() and (out / "last_checkpoint").read_text().strip() == "model_final.pth"
    assert f"saved to {out / 'model_final.pth'}" in (out / "log.txt").read_text()


@pytest.mark.slow
def test_train_refuses_to_start_over_an_existing_run(trained_run, tmp_path, capsys):
    base, out = trained_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    before = {name: (run / name).read_bytes() for name in ("log.txt", "metrics.jsonl", "model_final.pth")}
    cmd = ["--config-file", DEMO] + tiny_opts(base / "data", run)
    assert cli_train.main(cmd) == 1
    err = user_error(capsys)
    assert str(run) in err and str(run / "model_final.pth") in err
    assert "--resume" in err and "another OUTPUT_DIR" in err
    assert {name: (run / name).read_bytes() for name in before} == before  # not even a log line
    # What `make demo` does the second time: --resume finds the finished run and does nothing.
    assert cli_train.main(cmd + ["--resume"]) == 0
    assert "Training already finished" in (run / "log.txt").read_text()
    assert (run / "metrics.jsonl").read_bytes() == before["metrics.jsonl"]


@pytest.mark.slow
def test_logs_say_what_happened_once(trained_run, tmp_path):
    base, _ = trained_run
    out = tmp_path / "run"
    cmd = ["--config-file", DEMO] + tiny_opts(base / "data", out) + ["TEST.VAL_IDS", "2", "SOLVER.IMS_PER_BATCH", "6"]
    assert cli_train.main(cmd) == 0
    log = (out / "log.txt").read_text()
    assert log.count("Validation split:") == 1 and "Validation split: 2 identities held out" in log
    assert "[val synthetic]" in log and "[test synthetic]" in log and "[val val]" not in log
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert {(r["split"], r["dataset"]) for r in records if r["type"] == "eval"} == {("val", "synthetic"),
                                                                                  ("test", "synthetic")}
    # A second `make demo`: the finished run is found, nothing is "continued".
    assert cli_train.main(cmd + ["--resume"]) == 0
    again = (out / "log.txt").read_text()[len(log):]
    assert "all 1 epoch(s)" in again and "continuing at" not in again and "Training already finished" in again


@pytest.mark.slow
def test_train_with_resume_in_an_empty_folder_starts_a_fresh_run(trained_run, tmp_path):
    # What `make demo` does the first time.
    base, _ = trained_run
    out = tmp_path / "run"
    assert cli_train.main(["--config-file", DEMO, "--resume"] + tiny_opts(base / "data", out)) == 0
    assert (out / "model_final.pth").is_file()
    assert "no checkpoint in" in (out / "log.txt").read_text()


@pytest.mark.slow
def test_testing_and_resuming_never_fetch_imagenet_weights(trained_run, tmp_path, monkeypatch, capsys):
    # A config with PRETRAINED True (a Market run's config.yaml) on a machine without internet.
    base, out = trained_run

    def offline(self, path=""):
        raise PretrainedWeightsError("no internet")

    monkeypatch.setattr(ResNetBackbone, "load_imagenet", offline)
    pretrained = ["MODEL.BACKBONE.PRETRAINED", "True"]
    rc = cli_test.main(["--config-file", str(out / "config.yaml"), "MODEL.WEIGHTS", str(out / "model_final.pth"),
                        "--output-dir", str(tmp_path / "test")] + pretrained)
    assert rc == 0 and (tmp_path / "test" / "metrics.json").is_file()
    run = tmp_path / "run"
    shutil.copytree(out, run)
    common = ["--config-file", str(out / "config.yaml"), "OUTPUT_DIR", str(run)] + pretrained
    assert cli_train.main(common + ["--eval-only"]) == 0
    assert cli_train.main(common + ["--resume"]) == 0
    assert "Training already finished" in (run / "log.txt").read_text()
    # Only the model was built without them: the run's config still says how it was trained.
    assert load_config(str(run / "config.yaml")).MODEL.BACKBONE.PRETRAINED is True
    # A new training run still needs them.
    # A new run does fetch them (here: the fake offline error, as a one-line user error).
    capsys.readouterr()
    assert cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", tmp_path / "new") + pretrained) == 1
    assert "error: no internet" in capsys.readouterr().err


@pytest.mark.slow
def test_user_errors_print_one_line_and_keep_exit_codes(trained_run, tmp_path, monkeypatch, capsys):
    base, out = trained_run
    opts = tiny_opts(base / "data", tmp_path / "run")
    # A training dataset that is not on disk.
    assert cli_train.main(["--config-file", DEMO] + opts + ["DATASETS.NAMES", "market1501"]) == 1
    assert "Market-1501" in user_error(capsys)
    # A pair loss with one identity per P x K batch (no negatives): refused before any data is read.
    one_id = ["SOLVER.IMS_PER_BATCH", "4", "DATALOADER.NUM_INSTANCE", "4", "MODEL.LOSSES.NAMES", "identity,triplet"]
    assert cli_train.main(["--config-file", DEMO] + opts + one_id) == 1
    err = user_error(capsys)
    assert "triplet" in err and "one identity per batch" in err and "SOLVER.IMS_PER_BATCH to at least 8" in err
    # An output folder that cannot be created (a file is in the way) or written.
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cli_train.main(["--config-file", DEMO] + opts + ["OUTPUT_DIR", str(blocked / "run")]) == 1
    err = user_error(capsys)
    assert str(blocked / "run") in err and "choose another OUTPUT_DIR" in err
    test_cmd = ["--config-file", str(out / "config.yaml"), "MODEL.WEIGHTS", str(out / "model_final.pth")]
    assert cli_test.main(test_cmd + ["--output-dir", str(blocked / "test")]) == 1
    assert "choose another --output-dir" in user_error(capsys)

    def read_only(output_dir, rank=0):
        raise PermissionError(13, "Permission denied", os.path.join(output_dir, "log.txt"))

    monkeypatch.setattr("reid.utils.logger.setup_logger", read_only)
    assert cli_train.main(["--config-file", DEMO] + opts) == 1
    err = user_error(capsys)
    assert "Permission denied" in err and "choose another OUTPUT_DIR" in err
    monkeypatch.undo()

    # Stops inside training keep their own exit codes; a bug keeps its traceback.
    def stopped(self):
        raise TrainingInterrupted(signal.SIGINT, "model_interrupted.pth", 0, 3)

    def diverged(self):
        raise NonFiniteLossError("loss_id", float("nan"), 3, 0, 3, None)

    def bug(self):
        raise RuntimeError("a bug")

    for fake, expected in ((stopped, 130), (diverged, 1)):
        monkeypatch.setattr(Trainer, "train", fake)
        assert cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", tmp_path / fake.__name__)) == expected
    assert "Loss term loss_id is nan" in (tmp_path / "diverged" / "log.txt").read_text()
    monkeypatch.setattr(Trainer, "train", bug)
    with pytest.raises(RuntimeError, match="a bug"):
        cli_train.main(["--config-file", DEMO] + tiny_opts(base / "data", tmp_path / "bug"))


def test_unknown_names_and_offline_weights_are_one_line_user_errors(capsys):
    from reid.config import get_cfg
    from reid.cli.errors import run_main as run_user_command
    from reid.modeling import build_model
    from reid.modeling.backbones.resnet import PretrainedWeightsError

    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet51"
    assert run_user_command(lambda: build_model(cfg)) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: Unknown MODEL.BACKBONE.NAME 'resnet51'. Valid names:") and "resnet50" in err

    def offline():
        raise PretrainedWeightsError("Could not download the ImageNet weights")

    assert run_user_command(offline) == 1
    assert capsys.readouterr().err == "error: Could not download the ImageNet weights\n"
    with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
        run_user_command(lambda: 1 / 0)
