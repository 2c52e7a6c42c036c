"""Ctrl-C and SIGTERM end a tool in one line, after the work's own clean-up (reid/cli/interrupts.py)."""
from __future__ import annotations

import os
import signal

import pytest

from reid.cli.interrupts import run_stoppable


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_unwinds_the_work_and_is_one_line(signum, capsys):
    cleaned = []

    def work():
        try:
            os.kill(os.getpid(), signum)
            cleaned.append("not reached")
        finally:
            cleaned.append("finally")

    before = signal.getsignal(signal.SIGTERM)
    assert run_stoppable(work, "OUT holds no metrics.json; run again.") == 128 + signum
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: stopped by {signal.Signals(signum).name}: OUT holds no metrics.json; run again."]
    assert cleaned == ["finally"]
    assert signal.getsignal(signal.SIGTERM) is before  # the tool's handlers are gone after it


def test_work_that_ends_normally_or_with_a_user_error_is_unchanged(capsys):
    assert run_stoppable(lambda: 3, "x") == 3
    assert run_stoppable(lambda: (_ for _ in ()).throw(ValueError("bad --output")), "x") == 1
    assert capsys.readouterr().err.strip() == "error: bad --output"
