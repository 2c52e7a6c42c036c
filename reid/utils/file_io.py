"""Atomic file writes: a crash or a full disk never leaves a half-written file behind."""
from __future__ import annotations

import glob
import os
import tempfile
from typing import Any, Callable, List

# atomic_write's temporary files: "." + target name + "." + random part + ".tmp"
_TEMP_PATTERN = ".*.tmp"


def atomic_write(path: str, write_fn: Callable[[Any], None], mode: str = "wb") -> None:
    """Call ``write_fn(fileobj)`` on a temp file next to `path`, fsync it, then rename over `path`."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
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
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
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
