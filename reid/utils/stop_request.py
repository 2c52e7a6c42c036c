"""A request to stop, made by a signal, that long work outside a training step can see.

Clusters stop a job by signalling every process of it: SIGTERM from SLURM's ``scancel`` and
preemption, Kubernetes or ``timeout``; SIGUSR1 from SLURM's ``--signal`` ahead of a time limit;
SIGINT from Ctrl-C. Schedulers wait only a short while before SIGKILL (SLURM's ``KillWait`` and
Kubernetes' grace period are 30 s by default), so a run must not finish an evaluation or a
clustering of minutes before it saves. The training engine's signal handler records the request
here; feature extraction (for an evaluation, or a clustering of unlabelled images) asks
:func:`check_stop` between batches and raises :class:`StopRequested`, which the engine turns into
a stop at the last complete step (a resume redoes the interrupted work).

Process-wide on purpose: the handler and the extraction loop are in different layers and need
not know each other. The state is a plain module global written from a signal handler (Python
runs handlers between bytecodes of the main thread, so no lock is needed).
"""
from __future__ import annotations

import signal
from typing import Optional, Tuple

#: The signals that ask a run to stop (SIGUSR1 where the platform has it).
STOP_SIGNALS: Tuple[int, ...] = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", None)) if s is not None
)

_requested: Optional[int] = None


class StopRequested(Exception):
    """Long work was abandoned because a stop signal arrived (``signum`` names it)."""

    def __init__(self, signum: int, what: str) -> None:
        self.signum = int(signum)
        super().__init__(f"{what} abandoned: {signal.Signals(self.signum).name} asked the run to stop.")


def request_stop(signum: int) -> None:
    """Record that `signum` asked this process to stop (the first request is kept)."""
    global _requested
    if _requested is None:
        _requested = int(signum)


def stop_signal() -> Optional[int]:
    """The signal that asked this process to stop, or None."""
    return _requested


def clear_stop() -> None:
    """Forget the request (the run that acted on it has ended)."""
    global _requested
    _requested = None


def check_stop(what: str) -> None:
    """Raise :class:`StopRequested` naming `what` if a stop was requested; cheap, call it per batch."""
    if _requested is not None:
        raise StopRequested(_requested, what)


__all__ = ["STOP_SIGNALS", "StopRequested", "check_stop", "clear_stop", "request_stop", "stop_signal"]
