"""One process per run folder: the lock, its message, and a holder killed with SIGKILL."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from reid.utils.run_lock import LOCK_NAME, RunFolderBusyError, RunLock, UnsafeLockFileError

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
    with pytest.raises(OSError, match=r"Cannot create .*file.sub.*choose another --output-dir"):
        RunLock(str(blocker / "sub"), hint="choose another --output-dir").acquire()


# --- files placed at the lock's name by someone else ---------------------------------------

def precious_and_run(tmp_path):
    """A file someone wants kept, and an empty run folder."""
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me")
    run = tmp_path / "run"
    run.mkdir()
    return precious, run


def test_a_link_at_the_lock_name_is_refused_and_its_target_left_untouched(tmp_path):
    precious, run = precious_and_run(tmp_path)
    os.symlink(precious, run / LOCK_NAME)
    with pytest.raises(UnsafeLockFileError, match=r"\.run\.lock is a symbolic link.*Delete the link"):
        RunLock(str(run)).acquire()
    assert precious.read_text() == "keep me"
    os.symlink(run / "nowhere", tmp_path / "dangling")
    os.unlink(run / LOCK_NAME)
    os.symlink(tmp_path / "dangling", run / LOCK_NAME)  # a dangling link would be created through
    with pytest.raises(UnsafeLockFileError, match="symbolic link"):
        RunLock(str(run)).acquire()
    assert not (run / "nowhere").exists()


def test_a_hard_link_or_a_fifo_at_the_lock_name_is_refused_at_once(tmp_path):
    precious, run = precious_and_run(tmp_path)
    os.link(precious, run / LOCK_NAME)
    with pytest.raises(UnsafeLockFileError, match="hard link to another file"):
        RunLock(str(run)).acquire()
    assert precious.read_text() == "keep me"
    os.unlink(run / LOCK_NAME)
    os.mkfifo(run / LOCK_NAME)  # opening a FIFO for writing would wait for a reader forever
    with pytest.raises(UnsafeLockFileError, match="not a regular file"):
        RunLock(str(run)).acquire()


def test_a_damaged_holder_description_still_gives_one_line(tmp_path):
    proc = hold_in_subprocess(tmp_path)
    try:
        with open(tmp_path / LOCK_NAME, "w") as f:  # what the holder wrote, replaced by junk
            f.write('["not", "a", "mapping"]' + "x" * 10000)
        with pytest.raises(RunFolderBusyError, match="in use by another process") as err:
            RunLock(str(tmp_path)).acquire()
        assert len(str(err.value)) < 300
    finally:
        proc.kill()
        proc.wait()


def test_forked_children_do_not_keep_the_folder_locked(tmp_path):
    """A DataLoader worker is a forked child: it must not hold the lock once its parent let go
    (or died), or the next --resume is refused naming the dead parent."""
    lock = RunLock(str(tmp_path)).acquire()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child lives on, as a persistent worker would
        os.close(read_end)
        os.write(write_end, b"up")
        time.sleep(30)
        os._exit(0)
    try:
        os.close(write_end)
        assert os.read(read_end, 2) == b"up"
        lock.release()
        with RunLock(str(tmp_path)) as again:  # the child still runs, but holds nothing
            assert again.held
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
