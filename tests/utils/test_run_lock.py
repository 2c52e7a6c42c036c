"""One process per run folder: the lock, its message, and a holder killed with SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from reid.utils.run_lock import LOCK_NAME, RunFolderBusyError, RunLock

HOLD = textwrap.dedent(
    """
    import sys, time
    from reid.utils.run_lock import RunLock
    lock = RunLock(sys.argv[1], "training").acquire()
    print("locked", flush=True)
    time.sleep(120)
    """
)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def hold_in_subprocess(folder):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_start(tmp_path):
    proc = hold_in_subprocess(tmp_path / "run")
    try:
        with pytest.raises(RunFolderBusyError) as err:
            RunLock(str(tmp_path / "run")).acquire()
        msg = str(err.value)
        assert f"in use by process {proc.pid}" in msg and "training since 20" in msg
        assert "Wait for it to finish" in msg and "choose another OUTPUT_DIR" in msg and "\n" not in msg
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    proc = hold_in_subprocess(tmp_path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (tmp_path / LOCK_NAME).exists()  # the file stays; the OS released the lock itself
    start = time.monotonic()
    with RunLock(str(tmp_path)) as lock:
        assert lock.held and time.monotonic() - start < 1.0
        assert f'"pid": {os.getpid()}' in (tmp_path / LOCK_NAME).read_text()


def test_release_lets_the_next_process_in_and_an_unwritable_folder_is_explained(tmp_path):
    with RunLock(str(tmp_path)):
        pass
    RunLock(str(tmp_path)).acquire().release()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(OSError, match=r"Cannot create .*file.*\.run\.lock.*choose another --output-dir"):
        RunLock(str(blocker / "sub"), hint="choose another --output-dir").acquire()
