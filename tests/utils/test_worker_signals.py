"""Loader workers under stop signals: a scheduler's signal leaves them to the main process, the
main process's own terminate() still ends them, and a worker's death during a stop is no error."""
import os
import signal
import subprocess
import time

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from reid.utils import stop_request
from reid.utils.worker_signals import StopSafeDataLoader, shutdown_workers, tolerate_worker_exits

pytestmark = pytest.mark.skipif(not hasattr(signal, "sigwaitinfo"), reason="the guard needs sigwaitinfo (Linux)")


class Numbers(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        time.sleep(0.01)
        return torch.tensor(i)


def _loader(guard: bool, start: str = "fork") -> DataLoader:
    import multiprocessing

    kind = StopSafeDataLoader if guard else DataLoader
    return kind(Numbers(), batch_size=4, num_workers=2, persistent_workers=True,
                multiprocessing_context=multiprocessing.get_context(start))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped) also answers kill(pid, 0).
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _from_elsewhere(signum: int, pids) -> None:
    """Signal `pids` from another process, as a scheduler or a terminal would."""
    subprocess.run(["kill", f"-{signal.Signals(signum).name[3:]}", *map(str, pids)], check=True)


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fork", "forkserver", "spawn"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1, signal.SIGINT], ids=["TERM", "USR1", "INT"])
def test_guarded_workers_outlive_a_stop_signal_from_elsewhere_and_serve_every_batch(signum, start):
    # Workers started by spawn or forkserver have a second thread before their worker_init_fn runs.
    loader = _loader(guard=True, start=start)
    it = iter(loader)
    got = [next(it)]
    pids = [w.pid for w in it._workers]
    _from_elsewhere(signum, pids)
    time.sleep(0.3)
    assert all(_alive(p) for p in pids)
    got += list(it)
    assert torch.equal(torch.cat(got), torch.arange(64))
    shutdown_workers(loader)  # the owner ends them as usual
    assert loader._iterator is None
    deadline = time.time() + 10
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)


@pytest.mark.slow
@pytest.mark.parametrize("start", ["fork", "forkserver", "spawn"])
def test_a_signal_from_the_owner_still_ends_a_guarded_worker_at_once(start):
    # multiprocessing's terminate() at shutdown: refusing it would hang the owner's exit.
    loader = _loader(guard=True, start=start)
    it = iter(loader)
    next(it)
    worker = it._workers[0]
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(timeout=5)
    assert worker.exitcode == 0
    del it
    shutdown_workers(loader)


@pytest.mark.slow
def test_unguarded_workers_die_of_a_stop_signal_which_is_what_the_guard_prevents():
    loader = DataLoader(Numbers(), batch_size=4, num_workers=1)
    it = iter(loader)
    next(it)
    pid = it._workers[0].pid
    with pytest.raises(RuntimeError, match="DataLoader worker .* killed by signal"):
        _from_elsewhere(signal.SIGTERM, [pid])
        for _ in range(200):  # PyTorch's SIGCHLD handler raises here, in whatever runs
            time.sleep(0.01)
        list(it)


@pytest.mark.slow
def test_a_worker_death_while_stopping_is_not_an_error_but_otherwise_is():
    undo = tolerate_worker_exits()
    try:
        loader = DataLoader(Numbers(), batch_size=4, num_workers=1)
        it = iter(loader)
        next(it)
        stop_request.request_stop(signal.SIGTERM)
        _from_elsewhere(signal.SIGKILL, [it._workers[0].pid])
        for _ in range(100):  # the SIGCHLD arrives during this: tolerated while stopping
            time.sleep(0.01)
        with pytest.raises(RuntimeError):  # the loader itself still reports it when asked for more
            list(it)
        del it
        stop_request.clear_stop()
        loader = DataLoader(Numbers(), batch_size=4, num_workers=1)
        it = iter(loader)
        next(it)
        with pytest.raises(RuntimeError, match="killed by signal"):
            _from_elsewhere(signal.SIGKILL, [it._workers[0].pid])
            for _ in range(200):
                time.sleep(0.01)
        del it
    finally:
        stop_request.clear_stop()
        undo()
