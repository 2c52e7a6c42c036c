"""MetricsWriter's TensorBoard events (optional package) next to metrics.jsonl."""
import logging
import os
import sys

import pytest

from reid.utils.logger import MetricsWriter


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
