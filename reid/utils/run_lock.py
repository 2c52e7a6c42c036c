"""One process per run folder: an exclusive OS file lock held for the life of a run.

Two trainings in one ``OUTPUT_DIR`` (the same command in two terminals, a scheduler retrying a
job that still runs) would overwrite each other's checkpoints, ``last_checkpoint``, ``log.txt``
and ``metrics.jsonl``. A run therefore takes ``OUTPUT_DIR/.run.lock`` with ``fcntl.flock``
before it writes anything; a second process finds it held and stops at once, naming the
holder. The operating system releases the lock when the holder exits in any way (``kill -9``
included), so nothing stale is ever left: the lock file itself stays, holding the last
holder's description, and means nothing while no process holds its lock.

The lock belongs to this process alone. ``flock`` locks belong to the open file, which a forked
child (a DataLoader worker, any subprocess started by fork) shares: such a child would keep the
folder locked after its parent ended (``kill -9``) or released it (``main`` returned in a
notebook while persistent workers lived on). So the lock file is opened close-on-exec and every
forked child closes its copy at once (``os.register_at_fork``); only the process that took the
lock holds it.

The lock file is opened without following a symbolic link and must be a regular file with one
name: a link (or hard link) placed at ``.run.lock`` by someone else would otherwise make the
run truncate and overwrite the file it points to.

Linux and macOS (``fcntl``). On a file system without locks (some network mounts) or a platform
without ``fcntl``, the run warns once and goes on unprotected.
"""
from __future__ import annotations

import contextlib
import datetime
import errno
import json
import logging
import os
import socket
import stat
import sys
from typing import Any, Dict, Optional, Set

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

LOCK_NAME = ".run.lock"
# errno values of file systems that do not implement locks
_NO_LOCKS = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL}


class RunFolderBusyError(RuntimeError):
    """Another process holds the run folder; the message names it and what to do."""


class UnsafeLockFileError(OSError):
    """The lock file is a link, a hard link or not a regular file; the message says what to do."""


# File descriptors of the locks this process holds; a forked child closes its copies.
_HELD: Set[int] = set()


def _close_in_child() -> None:
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def _open_lock_file(path: str, hint: str) -> int:
    """`path` opened for writing, never through a link; refused unless a regular file with one name."""
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    # O_NONBLOCK: opening a FIFO placed at the lock's name would otherwise wait for a writer forever.
    flags |= getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP or os.path.islink(path):
            raise UnsafeLockFileError(
                f"{path} is a symbolic link; a run lock is never written through a link (it could overwrite "
                f"the file it points to). Delete the link, or {hint}."
            ) from None
        raise OSError(f"Cannot create {path} ({e.strerror}); make the folder writable or {hint}.") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
        os.close(fd)
        what = "a hard link to another file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise UnsafeLockFileError(
            f"{path} is {what}; a run lock is only written to a file of its own. Delete it, or {hint}."
        )
    return fd


class RunLock:
    """Exclusive lock on `folder` for this process (a context manager; also ``acquire``/``release``).

    `what` says what the process does there ("training", "testing"), for the holder's
    description that a refused process prints; `hint` is what a user changes to go elsewhere.
    """

    def __init__(self, folder: str, what: str = "training", hint: str = "choose another OUTPUT_DIR",
                 command: Optional[str] = None) -> None:
        self.folder = os.path.abspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.what, self.hint = what, hint
        # The holder's command line (default: this process's); main(argv) callers pass theirs.
        self.command = " ".join(sys.argv) if command is None else command
        self._fd: Optional[int] = None

    def acquire(self) -> "RunLock":
        """Take the lock or raise :class:`RunFolderBusyError` at once (never waits)."""
        if fcntl is None:
            logger.warning("No file locks on this platform: nothing stops a second run from writing into %s.", self.folder)
            return self
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as e:
            raise OSError(f"Cannot create {self.folder} ({e.strerror}); make its parent writable or "
                          f"{self.hint}.") from None
        fd = _open_lock_file(self.path, self.hint)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read_holder(fd)
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderBusyError(_busy_message(self.folder, holder, self.hint)) from None
            if e.errno in _NO_LOCKS:
                logger.warning("The file system of %s has no file locks (%s): nothing stops a second run from "
                               "writing into it; do not start two runs there.", self.folder, e.strerror)
                return self
            raise
        self._fd = fd
        _HELD.add(fd)
        description = {
            "pid": os.getpid(), "host": socket.gethostname(), "what": self.what,
            "started": datetime.datetime.now().isoformat(timespec="seconds"), "command": self.command,
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(description) + "\n").encode("utf-8"), 0)
        return self

    def release(self) -> None:
        """Let go of the lock (closing the file releases it)."""
        if self._fd is not None:
            _HELD.discard(self._fd)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _read_holder(fd: int) -> Dict[str, str]:
    """The holder's description (short strings), or {} when the file holds none."""
    try:
        data = json.loads(os.pread(fd, 4096, 0).decode("utf-8") or "{}")
    except (OSError, ValueError, RecursionError):
        return {}  # the holder may be between truncating and writing its description
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v)[:100] for k, v in data.items() if k in ("pid", "host", "what", "started")}


def _busy_message(folder: str, holder: Dict[str, Any], hint: str) -> str:
    who = f"process {holder['pid']}" if holder.get("pid") else "another process"
    if holder.get("host") and holder.get("host") != socket.gethostname():
        who += f" on {holder['host']}"
    since = f", {holder.get('what', 'running')} since {holder['started']}" if holder.get("started") else ""
    return f"{folder} is in use by {who}{since}: one run per folder. Wait for it to finish (or stop it), or {hint}."


__all__ = ["LOCK_NAME", "RunFolderBusyError", "RunLock", "UnsafeLockFileError"]
