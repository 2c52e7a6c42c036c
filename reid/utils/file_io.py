"""Atomic file writes: a crash or a full disk never leaves a half-written file behind."""
from __future__ import annotations

import os
import tempfile
from typing import Any, Callable


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
