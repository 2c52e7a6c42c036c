"""MetricsWriter's TensorBoard events (optional package) next to metrics.jsonl; the console
handler; progress in a terminal and in a log file."""
import json
import logging
import os
import sys
import time

import pytest

from reid.utils.logger import LineProgress, MetricsWriter, progress_bar


def test_tensorboard_events_hold_the_numeric_fields(tmp_path):
    pytest.importorskip("tensorboard", reason="needs the optional tensorboard package (pip install 'circle-reid[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsWriter(str(tmp_path)) as w:
        w.write({"type": "train", "epoch": 0, "iter": 3, "loss": 1.5, "lr": 0.01, "note": "text"})
        w.write({"type": "eval", "split": "val", "dataset": "synthetic", "iter": 3, "mAP": 42.0})
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert sorted(acc.Tags()["scalars"]) == ["train/loss", "train/lr", "val/synthetic/mAP"]
    (event,) = acc.Scalars("train/loss")
    assert event.step == 3 and event.value == pytest.approx(1.5)
    assert acc.Scalars("val/synthetic/mAP")[0].value == pytest.approx(42.0)


def test_without_tensorboard_one_line_says_how_to_get_events(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # makes the import fail
    with caplog.at_level(logging.INFO):
        with MetricsWriter(str(tmp_path), logger=logging.getLogger("test-metrics")) as w:
            w.write({"type": "train", "iter": 1, "loss": 1.0})
    assert "install the 'tensorboard' package" in caplog.text
    assert sorted(os.listdir(tmp_path)) == ["metrics.jsonl"]


def test_console_lines_follow_a_swapped_and_closed_stdout(monkeypatch, capsys):
    """pytest's capture (or a notebook) swaps sys.stdout and closes the old one; a handler
    bound to the old stream would print a "Logging error" traceback instead of the line."""
    import io

    from reid.utils.logger import setup_logger

    first = io.StringIO()
    monkeypatch.setattr(sys, "stdout", first)
    logger = setup_logger(name="test-swapped-stdout")
    logger.info("one")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stdout", second)
    logger.info("two")
    assert second.getvalue().rstrip().endswith("two")
    assert "Logging error" not in capsys.readouterr().err


def test_progress_in_a_log_file_is_whole_lines_at_each_tenth(monkeypatch):
    import io

    log_file = io.StringIO()  # stderr redirected to a file: not a terminal
    monkeypatch.setattr(sys, "stderr", log_file)
    with progress_bar(1000, "extract", unit="img") as bar:
        for _ in range(1000):
            bar.update(1)
    text = log_file.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert [line.split()[1] for line in lines] == [f"{p}%" for p in range(10, 101, 10)]
    assert lines[-1].startswith("extract: 100% 1000/1000 img [") and "img/s" in lines[-1]
    assert "eta" in lines[0] and "eta" not in lines[-1]


def test_progress_lines_in_between_come_at_most_once_a_minute(monkeypatch):
    import io

    import reid.utils.logger as logger_module

    now = [0.0]
    monkeypatch.setattr(logger_module.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    bar = LineProgress(10_000, "extract", out, unit="img")
    for _ in range(300):  # 300 images in 300 s: no tenth reached, one line per 60 s
        now[0] += 1.0
        bar.update(1)
    bar.set_postfix(loss="1.234")
    now[0] += 60.0
    bar.update(1)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6 and lines[0].startswith("extract:   0% 60/10000 img [0:01:00 elapsed, 1.0 img/s, eta 2:45:40")
    assert lines[-1].endswith(", loss=1.234]")


def _records(path):
    return [json.loads(line) for line in open(path)]


def test_a_resumed_run_keeps_one_record_per_iteration(tmp_path):
    # A run killed after logging iteration 7 whose last checkpoint holds iteration 4: the resumed
    # run trains 5, 6, 7 again, so their first records go; a line cut by the kill stays as it was.
    with MetricsWriter(str(tmp_path), tensorboard=False) as w:
        for it in range(1, 8):
            w.write({"type": "train", "iter": it, "loss": float(it)})
        w.write({"type": "eval", "iter": 4, "epoch": 1, "mAP": 50.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"type": "train", "it')
    with MetricsWriter(str(tmp_path), tensorboard=False, resume_at=4) as w:
        w.write({"type": "train", "iter": 5, "loss": -5.0})
    lines = open(tmp_path / "metrics.jsonl").read().splitlines()
    assert lines[5] == '{"type": "train", "it'
    kept = [json.loads(line) for line in lines[:5] + lines[6:]]
    assert [(r["type"], r["iter"]) for r in kept] == [("train", 1), ("train", 2), ("train", 3), ("train", 4),
                                                      ("eval", 4), ("train", 5)]
    assert kept[-1]["loss"] == -5.0


def test_a_run_resumed_before_its_epoch_end_work_redoes_that_work_once(tmp_path):
    with MetricsWriter(str(tmp_path), tensorboard=False) as w:
        w.write({"type": "train", "iter": 4, "loss": 1.0})
        w.write({"type": "eval", "iter": 4, "epoch": 1, "mAP": 50.0})
    MetricsWriter(str(tmp_path), tensorboard=False, resume_at=4, redo_epoch_end=True).close()
    assert [(r["type"], r["iter"]) for r in _records(tmp_path / "metrics.jsonl")] == [("train", 4)]


@pytest.mark.slow
def test_tensorboard_forgets_the_steps_trained_again(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    with MetricsWriter(str(tmp_path)) as w:
        for it in range(1, 8):
            w.write({"type": "train", "iter": it, "loss": float(it)})
    # TensorBoard reads event files in name order, which starts with the second they were made in:
    # the resumed run's file must come later, as it does when a run really is resumed.
    time.sleep(1.1)
    with MetricsWriter(str(tmp_path), resume_at=4) as w:
        for it in range(5, 9):
            w.write({"type": "train", "iter": it, "loss": -float(it)})
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [
        (1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, -5.0), (6, -6.0), (7, -7.0), (8, -8.0)]


def test_a_run_folder_removed_while_its_closed_log_file_handler_stays_is_one_warning(tmp_path, capsys):
    """A program that trained in-process and moved its run folder goes on logging: the run's log.txt
    handler (closed, so it would reopen the file) warns once and leaves, instead of raising."""
    import shutil

    from reid.utils.logger import LOGGER_NAME, setup_run_logger

    run = tmp_path / "run"
    logger = setup_run_logger(str(run))
    mine = [h for h in logger.handlers if getattr(h, "baseFilename", "").startswith(str(run))]
    assert len(mine) == 1
    try:
        mine[0].close()
        shutil.rmtree(run)
        logging.getLogger(LOGGER_NAME + ".somewhere").warning("a line after the folder went")
        err = capsys.readouterr().err
        assert err.count(f"warning: cannot write {run / 'log.txt'}") == 1
        assert mine[0] not in logger.handlers
        logging.getLogger(LOGGER_NAME).warning("another line")  # no handler left to complain
        assert "cannot write" not in capsys.readouterr().err
    finally:
        for h in mine:
            logger.removeHandler(h)
