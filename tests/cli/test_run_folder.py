"""One run per output folder, seen from the command line: a second training into a running
one's folder is refused at once, and a run killed with SIGKILL leaves nothing that blocks --resume."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.test_cli import DEMO, ROOT, tiny_opts


def start_train(data, out, *extra):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    argv = [sys.executable, os.path.join(ROOT, "tools", "train.py"), "--config-file", DEMO]
    argv += tiny_opts(data, out) + ["SOLVER.MAX_EPOCH", "4", "SOLVER.CHECKPOINT_PERIOD", "1", "TEST.EVAL_PERIOD", "0"]
    return subprocess.Popen(argv + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def wait_for(path, proc, timeout=300):
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from reid.data import build_dataset

    root = tmp_path_factory.mktemp("data")
    build_dataset("synthetic", str(root), num_train_ids=5, num_test_ids=3, num_cameras=2, images_per_camera=2,
                  num_distractors=0, image_size=(64, 32))
    return root


@pytest.mark.slow
def test_a_second_training_into_a_running_ones_folder_is_refused_at_once(data, tmp_path):
    out = tmp_path / "run"
    first = start_train(data, out)
    try:
        wait_for(out / "log.txt", first)  # the first run is under way (it holds the folder)
        start = time.time()
        second = start_train(data, out)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 1 and time.time() - start < 30
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].startswith("error: ") and f"{out} is in use by process {first.pid}" in lines[0]
        assert "choose another OUTPUT_DIR" in lines[0]
        first_out, first_err = first.communicate(timeout=600)
        assert first.returncode == 0, first_err[-3000:]
    finally:
        for proc in (first,):
            if proc.poll() is None:
                proc.kill()
    # The first run's files are its own, complete: every epoch's checkpoint, one run's records.
    assert (out / "model_final.pth").is_file() and (out / "model_0003.pth").is_file()
    log = (out / "log.txt").read_text()
    assert log.count("Command: ") == 1 and "Training done" in log
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    iters = [r["iter"] for r in records if r["type"] == "train"]
    assert iters == list(range(1, len(iters) + 1))  # one run's steps, once each


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_at_once_in_the_same_folder(data, tmp_path):
    out = tmp_path / "run"
    victim = start_train(data, out)
    wait_for(out / "model_0001.pth", victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    # What a kill during a checkpoint write leaves behind: a hidden temp file.
    (out / ".model_0002.pth.zz9.tmp").write_bytes(b"half")
    resumed = start_train(data, out, "--resume")
    _, err = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, err[-3000:]
    log = (out / "log.txt").read_text()
    assert "Resumed from" in log and "Removed " in log and ".model_0002.pth.zz9.tmp" in log
    assert (out / "model_final.pth").is_file() and not (out / ".model_0002.pth.zz9.tmp").exists()
    # The steps the killed run logged after its checkpoint were trained again: logged once.
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    iters = [r["iter"] for r in records if r["type"] == "train"]
    assert iters == list(range(1, len(iters) + 1))


@pytest.mark.slow
def test_stop_then_resume_in_one_process_with_loader_workers_ends_on_the_uninterrupted_weights(data, tmp_path):
    """A notebook: main() stopped by a hook, then main(--resume) in the same process. The loader
    workers (forked, persistent) must not keep the folder locked after the first main returns."""
    import torch

    from reid.cli import train as cli_train
    from tests.engine.stubs import assert_same_weights
    from tests.engine.test_user_hooks import StopAt

    def argv(out):
        return (["--config-file", DEMO] + tiny_opts(data, out)
                + ["SOLVER.MAX_EPOCH", "2", "TEST.EVAL_PERIOD", "0", "DATALOADER.NUM_WORKERS", "2"])

    whole = StopAt()
    assert cli_train.main(argv(tmp_path / "a"), hooks=[whole]) == 0
    assert cli_train.main(argv(tmp_path / "b"), hooks=[StopAt(at=3)]) == 0
    assert not (tmp_path / "b" / "model_final.pth").exists()
    rest = StopAt()
    assert cli_train.main(argv(tmp_path / "b") + ["--resume"], hooks=[rest]) == 0
    assert rest.steps == list(range(4, whole.steps[-1] + 1))
    a = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)["model"]
    b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)["model"]
    assert_same_weights(a, b)


@pytest.mark.slow
def test_a_full_disk_keeps_the_last_checkpoint_and_resume_loses_only_that_epoch(data, tmp_path, monkeypatch, capsys):
    """ENOSPC while writing model_0002.pth (simulated: CI cannot mount a small disk): one error line
    naming the file and the checkpoint to resume from; after space is freed, --resume redoes epoch 2
    and ends on the uninterrupted run's weights."""
    import errno

    import torch

    from reid.cli import train as cli_train
    from tests.engine.stubs import assert_same_weights

    def argv(out):
        return (["--config-file", DEMO] + tiny_opts(data, out)
                + ["SOLVER.MAX_EPOCH", "3", "SOLVER.CHECKPOINT_PERIOD", "1", "TEST.EVAL_PERIOD", "0"])

    assert cli_train.main(argv(tmp_path / "a")) == 0
    real_fsync = os.fsync

    def fsync(fd):
        if ".model_0002.pth." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    capsys.readouterr()
    assert cli_train.main(argv(tmp_path / "b")) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"error: Disk full: writing {tmp_path / 'b' / 'model_0002.pth'} failed")
    assert "--resume continues from model_0001.pth" in lines[0]
    assert sorted(p.name for p in (tmp_path / "b").glob("*.pth")) == ["model_0001.pth"]
    monkeypatch.setattr(os, "fsync", real_fsync)  # space freed
    assert cli_train.main(argv(tmp_path / "b") + ["--resume"]) == 0
    a = torch.load(tmp_path / "a" / "model_final.pth", weights_only=True)["model"]
    b = torch.load(tmp_path / "b" / "model_final.pth", weights_only=True)["model"]
    assert_same_weights(a, b)


def _stopped_run(data, out):
    """A run of 2 epochs stopped by a hook after step 3, as --resume finds it."""
    from reid.cli import train as cli_train
    from tests.engine.test_user_hooks import StopAt

    argv = ["--config-file", DEMO] + tiny_opts(data, out) + ["SOLVER.MAX_EPOCH", "2", "TEST.EVAL_PERIOD", "0"]
    assert cli_train.main(argv, hooks=[StopAt(at=3)]) == 0
    assert (out / "model_interrupted.pth").is_file()
    return out / "config.yaml"


def _edit(path, old, new):
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.slow
def test_resume_refuses_a_base_or_an_edited_config_naming_the_keys_unless_allowed(data, tmp_path, capsys):
    """One stopped run, resumed as a careless user would (one run: each resume attempt is cheap,
    the training run is not)."""
    from reid.cli import train as cli_train

    out = tmp_path / "run"
    config = _stopped_run(data, out)
    original = config.read_text()
    # A _BASE_ line in the run's config.yaml: refused by train.py as by every tool.
    (tmp_path / "evil.yml").write_text("SOLVER:\n  BASE_LR: 0.5\n")
    config.write_text("_BASE_: ../evil.yml\n" + original)
    capsys.readouterr()
    assert cli_train.main(["--run", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "_BASE_" in err and "a run's config.yaml is self-contained" in err
    # Keys that change the computation, edited in config.yaml: refused, each named.
    config.write_text(original)
    _edit(config, "BASE_LR: 0.001", "BASE_LR: 0.002")
    _edit(config, "SIZE_TRAIN:\n  - 32\n  - 16", "SIZE_TRAIN:\n  - 64\n  - 32")
    assert cli_train.main(["--run", str(out), "--resume"]) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: Cannot resume ") and "model_interrupted.pth" in lines[0]
    assert "INPUT.SIZE_TRAIN (checkpoint [32, 16], now [64, 32])" in lines[0]
    assert "SOLVER.BASE_LR (checkpoint 0.001, now 0.002)" in lines[0] and "--allow-config-change" in lines[0]
    assert not (out / "model_final.pth").exists()
    # The same change on the command line is refused alike.
    config.write_text(original)
    assert cli_train.main(["--run", str(out), "--resume", "SOLVER.WEIGHT_DECAY", "0.1"]) == 1
    assert "SOLVER.WEIGHT_DECAY (checkpoint 0.0005, now 0.1)" in capsys.readouterr().err
    # Keys that do not change what is trained may change (logging, checkpoints, workers); with
    # --allow-config-change the others too, and the log names only those.
    assert cli_train.main(["--run", str(out), "--resume", "--allow-config-change", "SOLVER.LOG_PERIOD", "5",
                           "DATALOADER.NUM_WORKERS", "1", "SOLVER.CHECKPOINT_PERIOD", "2",
                           "SOLVER.BASE_LR", "0.0005"]) == 0
    assert (out / "model_final.pth").is_file()
    log = (out / "log.txt").read_text()
    assert ("with settings it was not trained with (--allow-config-change): SOLVER.BASE_LR (checkpoint 0.001, "
            "now 0.0005).") in log
    assert "BASE_LR: 0.0005" in config.read_text()  # the run's record says what it used


def test_a_run_folder_whose_config_yaml_is_a_fifo_is_named_for_what_it_is(tmp_path, capsys):
    from reid.cli import train as cli_train

    os.mkfifo(tmp_path / "config.yaml")  # opening it would block: it must be named, never read
    assert cli_train.main(["--run", str(tmp_path), "--resume"]) == 1
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "its config.yaml is a FIFO (named pipe), not a file" in err
