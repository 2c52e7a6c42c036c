"""Ctrl-C and SIGTERM end a tool with one line, not a traceback, and say what is left.

SIGINT already raises KeyboardInterrupt in Python; SIGTERM (``kill``, ``timeout``, a scheduler)
would end the process at once, skipping every ``finally``: the tracker's child process would run
on and the output folder's lock would be left to go stale. Inside :func:`run_stoppable` both raise
:class:`Stopped`, so the work unwinds as for Ctrl-C (files being written stay hidden, children are
killed, locks released) and the tool prints ``error: stopped by SIGTERM: <what is left>`` and exits
with 128 + the signal's number, as a shell reports a process a signal ended.
"""
from __future__ import annotations

import signal
import sys
import threading
from typing import Any, Callable

from .errors import run_main


class Stopped(KeyboardInterrupt):
    """The work was stopped by signal `signum`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def _raise(signum: int, _frame: Any) -> None:
    raise Stopped(signum)


def run_stoppable(command: Callable[[], Any], left: str) -> int:
    """:func:`~reid.cli.errors.run_main` of `command`, with SIGINT and SIGTERM ending it in one line that
    names the signal and `left` (what the stopped work leaves behind, and what to do)."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        return run_main(command)
    previous = {s: signal.signal(s, _raise) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return run_main(command)
    except KeyboardInterrupt as e:
        signum = e.signum if isinstance(e, Stopped) else int(signal.SIGINT)
        print(f"error: stopped by {signal.Signals(signum).name}: {left}", file=sys.stderr)
        return 128 + signum
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


__all__ = ["Stopped", "run_stoppable"]
