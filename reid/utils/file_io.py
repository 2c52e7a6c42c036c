"""Atomic file writes: a crash or a full disk never leaves a half-written file behind.

A write that fails for lack of space (ENOSPC, or a quota: EDQUOT) raises :class:`DiskFullError`,
one line naming the file, the free space and that the previous version is intact, whatever
layer reported it (torch.save turns the OSError into a RuntimeError whose context holds it).
"""
from __future__ import annotations

import errno
import glob
import os
import shutil
import tempfile
import uuid
from typing import Any, Callable, List, Optional

# atomic_write's temporary files: "." + target name + "." + random part + ".tmp"
_TEMP_PATTERN = ".*.tmp"


_NO_SPACE = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFullError(OSError):
    """A write failed because the disk (or quota) is full; the message names the file."""


def _space_error(error: BaseException) -> Optional[OSError]:
    """The out-of-space OSError behind `error` (itself, its cause or its context), if any."""
    seen = 0
    while error is not None and seen < 10:
        if isinstance(error, OSError) and error.errno in _NO_SPACE:
            return error
        error, seen = error.__cause__ or error.__context__, seen + 1
    return None


def _free_space(folder: str) -> str:
    try:
        return f"{shutil.disk_usage(folder).free / 2**20:.0f} MB free there"
    except OSError:
        return "free space unknown"


def raise_if_disk_full(error: BaseException, path: str, kept: str = "") -> None:
    """Raise DiskFullError naming `path` when `error` comes from a full disk; otherwise return.

    `kept` says what survived (e.g. "the previous version is intact").
    """
    cause = _space_error(error)
    if cause is None:
        return
    folder = os.path.dirname(os.path.abspath(path))
    full = DiskFullError(
        f"Disk full: writing {path} failed ({os.strerror(cause.errno)}; {_free_space(folder)})"
        f"{'; ' + kept if kept else ''}. Free some space and run again (a training continues with --resume)."
    )
    full.errno = cause.errno
    raise full from None


def check_output_file(path: str) -> str:
    """`path` when a file can be written there; a folder in the way raises one line saying so (the
    rename of :func:`atomic_write` would fail only after all the work, with "Is a directory" naming
    its temporary file). Tools call it before slow work; :func:`atomic_write` calls it too."""
    if os.path.isdir(path):
        from .path_kinds import WrongPathKindError

        raise WrongPathKindError(f"Output {path!r} is a folder, not a file; name a file to write (inside it or "
                                 "elsewhere), or move the folder away.")
    return path


def check_output_folder(path: str, what: str = "Output folder") -> str:
    """`path` when it is a folder or nothing is there (it is made later); else one line naming what
    is there (a regular file, a FIFO, a device, a broken link) and what to do."""
    from .path_kinds import WrongPathKindError, folder_problem, is_missing

    problem = folder_problem(path)
    if problem is not None and not (is_missing(problem) and not os.path.islink(path)):
        raise WrongPathKindError(f"{what} {path!r} {problem}; name a folder (made if missing), or move it away.")
    return path


def atomic_write(path: str, write_fn: Callable[[Any], None], mode: str = "wb") -> None:
    """Call ``write_fn(fileobj)`` on a temp file next to `path`, fsync it, then rename over `path`.

    On any failure the temp file is removed and `path` is as it was; a full disk raises
    :class:`DiskFullError` (one line naming `path`).
    """
    check_output_file(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    existed = os.path.exists(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    except OSError as e:
        raise_if_disk_full(e, path, "nothing was written")
        raise
    try:
        with os.fdopen(fd, mode) as f:
            write_fn(f)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600 files; give the result the permissions a plain open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise_if_disk_full(e, path, "the previous version is intact" if existed else "nothing was written")
        raise


def atomic_write_text(path: str, text: str) -> None:
    """Write `text` to `path` atomically (UTF-8)."""
    atomic_write(path, lambda f: f.write(text), mode="w")


def remove_stale_temp_files(folder: str) -> List[str]:
    """Delete the temporary files that an interrupted :func:`atomic_write` left in `folder`.

    ``kill -9`` during a write leaves the hidden temp file behind (the target is untouched).
    Call this only while holding the folder's run lock: another process's write in progress
    would otherwise lose its file. Returns the paths removed.
    """
    removed = []
    for path in glob.glob(os.path.join(glob.escape(folder), _TEMP_PATTERN)):
        if os.path.isfile(path):
            os.remove(path)
            removed.append(path)
    return removed


def build_folder_atomically(final: str, build: Callable[[str], Any], done_file: str) -> None:
    """Make folder `final` all at once: ``build(tmp)`` creates and fills a new temporary sibling
    folder ``.tmp-<name>-<pid>-<random>``, which is then renamed to `final`.

    A failed build leaves no `final` and its temp folder is removed (a killed process leaves only
    the ``.tmp-*`` folder). When another process renamed its own result into place first, that
    result is kept if it holds `done_file`; otherwise the rename error is raised.
    """
    parent = os.path.dirname(os.path.abspath(final))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".tmp-{os.path.basename(final)}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        build(tmp)
        try:
            os.replace(tmp, final)
        except OSError:
            if not os.path.isfile(os.path.join(final, done_file)):
                raise
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
