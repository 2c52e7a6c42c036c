"""Loader workers and stop signals: the main process decides when its workers end.

A scheduler signals every process of a job (SLURM signals each process of a step, ``kill`` to a
process group and Ctrl-C reach the whole group), the DataLoader's worker processes included.
A worker that dies of SIGTERM makes PyTorch raise "DataLoader worker ... is killed by signal"
inside whatever the main process is doing, an optimizer step included, so the run ends without
its checkpoint; and under torchrun a rank whose loader died cannot take its part in the step the
other ranks are in. So workers do not die of the signals that ask a run to stop
(:data:`reid.utils.stop_request.STOP_SIGNALS`): the main process finishes its step, agrees on the
stop with the other ranks, saves, and then shuts its workers down as usual.

* :class:`StopSafeDataLoader` starts its workers with these signals blocked and gives them
  :class:`WorkerSignalGuard` as ``worker_init_fn``. Where the platform has
  ``sigwaitinfo`` (Linux) a worker blocks the stop signals and one thread reads them with the
  sender's pid: a signal sent by the process that owns the workers (multiprocessing's
  ``terminate()`` at shutdown) still ends the worker at once, any other sender (a scheduler, a
  terminal) is left to the main process. Elsewhere only SIGUSR1, whose default action would end
  the worker, is ignored.
* :func:`tolerate_worker_exits` covers what the guard cannot (a signal in the instant before a
  worker installed it, platforms without ``sigwaitinfo``): while a stop is under way, the main
  process does not turn a worker's death into an error; the training loop then stops at the last
  complete step.
"""
from __future__ import annotations

import logging
import os
import signal
import threading
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Iterator, Optional

from torch.utils.data import DataLoader

from reid.utils.stop_request import STOP_SIGNALS, stop_signal

logger = logging.getLogger(__name__)


def _read_stop_signals(owner: int) -> None:
    """Worker thread: consume the (blocked) stop signals; end the worker only at its owner's word."""
    while True:
        info = signal.sigwaitinfo(STOP_SIGNALS)
        if info.si_pid == owner:
            # The owner ends its workers this way only when it shuts them down (exit code 0: the
            # owner's loader then does not report an unexpected death).
            os._exit(0)


@contextmanager
def stop_signals_blocked() -> Iterator[None]:
    """Block the stop signals in this thread for the duration (they stay pending, then arrive).

    Around the start of loader workers: a new process inherits the mask (through exec too), so a
    worker started by spawn or forkserver, which has more than one thread by the time its
    ``worker_init_fn`` runs, has the signals blocked in every thread from its first instruction.
    """
    # Only where the guard can read them (sigwaitinfo): a worker that blocks them without the
    # reader would not end even when its owner ends it.
    if not hasattr(signal, "sigwaitinfo") or threading.current_thread() is not threading.main_thread():
        yield
        return
    # multiprocessing's resource tracker, started on first need, unblocks SIGINT and SIGTERM in
    # this thread once it has started: started now, it cannot undo the block below (which the
    # forkserver, when it starts inside the block, passes on to every worker it forks).
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


class WorkerSignalGuard:
    """``worker_init_fn`` of every loader (picklable; created in the process that owns the workers).

    Records the owner's pid at creation: with spawn or forkserver the worker's parent is not
    always the owner. (Start the workers with the signals blocked, :class:`StopSafeDataLoader`,
    or a signal can reach a thread the worker had before this runs.) A process the worker starts
    in turn inherits the blocked signals: such a child must be ended by its parent.
    """

    def __init__(self) -> None:
        self.owner = os.getpid()

    def __call__(self, worker_id: int) -> None:
        if not hasattr(signal, "sigwaitinfo"):
            if hasattr(signal, "SIGUSR1"):
                signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            return
        # Blocked in this (the worker's only) thread, so in every thread it starts later: the
        # signals stay pending for the reader below instead of running a default action.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        threading.Thread(target=_read_stop_signals, args=(self.owner,), name="reid-stop-signals", daemon=True).start()


class StopSafeDataLoader(DataLoader):
    """A DataLoader whose workers leave stop signals to this process: they start with the signals
    blocked and run :class:`WorkerSignalGuard` (unless another ``worker_init_fn`` is given)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.num_workers > 0 and self.worker_init_fn is None:
            self.worker_init_fn = WorkerSignalGuard()

    def _get_iterator(self) -> Any:
        guarded = isinstance(self.worker_init_fn, WorkerSignalGuard)  # another init: signals as usual
        with stop_signals_blocked() if guarded else nullcontext():  # the workers start here (once if persistent)
            return super()._get_iterator()


def _install_torch_child_handler() -> None:
    """PyTorch installs its SIGCHLD handler when the first workers start; install it now, so
    that the wrapper of :func:`tolerate_worker_exits` sits on top of it."""
    try:
        from torch.utils.data._utils import signal_handling
    except ImportError:  # pragma: no cover - a PyTorch that moved it: its handler chains to ours
        return
    install = getattr(signal_handling, "_set_SIGCHLD_handler", None)
    if callable(install):
        install()


def tolerate_worker_exits() -> Callable[[], None]:
    """While a stop is requested, a loader worker's death is not an error; returns the undo.

    Call it in the main thread of the process that owns the workers. A no-op (returning a
    no-op) where the platform has no SIGCHLD or off the main thread.
    """
    if not hasattr(signal, "SIGCHLD") or threading.current_thread() is not threading.main_thread():
        return lambda: None
    _install_torch_child_handler()
    previous = signal.getsignal(signal.SIGCHLD)

    def handler(signum: int, frame: Any) -> None:
        if not callable(previous):
            return
        try:
            previous(signum, frame)
        except RuntimeError as e:  # PyTorch's "DataLoader worker ... is killed by signal"
            if stop_signal() is None:
                raise
            logger.debug("Ignored while stopping: %s", e)

    signal.signal(signal.SIGCHLD, handler)

    def undo() -> None:
        if signal.getsignal(signal.SIGCHLD) is handler:
            signal.signal(signal.SIGCHLD, previous if previous is not None else signal.SIG_DFL)

    return undo


def shutdown_workers(loader: Any) -> None:
    """End the persistent workers a DataLoader keeps between epochs (nothing if it has none).

    After a stop they may be dead or guarding signals; the next ``iter(loader)`` then starts
    fresh workers instead of reusing them.
    """
    iterator: Optional[Any] = getattr(loader, "_iterator", None)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if callable(shutdown):
        shutdown()
        loader._iterator = None


__all__ = ["StopSafeDataLoader", "WorkerSignalGuard", "shutdown_workers", "stop_signals_blocked",
           "tolerate_worker_exits"]
