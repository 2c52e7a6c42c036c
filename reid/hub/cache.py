"""Where downloaded model files live, and the hashes recorded for files the catalogue has none for.

The cache is ``$REID_HOME/hub`` (``~/.cache/circle-reid/hub`` without REID_HOME), one folder per
publisher: ``hub/torchreid/osnet_x0_25_msmt17.pth``. A file whose catalogue entry has no sha256
gets one recorded beside it on its first download (``<file>.sha256``, trust on first use): a later
download (the file deleted, another machine sharing the folder) must give the same bytes.
REID_OFFLINE=1 (also ``true``/``yes``) forbids every download: only what the cache holds is used.
"""
from __future__ import annotations

import contextlib
import os
import stat
from typing import Iterator, Optional

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: downloads are not serialised
    fcntl = None  # type: ignore[assignment]

from .download import DownloadError

#: Environment variables read here.
HOME_ENV, OFFLINE_ENV = "REID_HOME", "REID_OFFLINE"


def hub_home() -> str:
    """The cache folder (not created here)."""
    home = os.environ.get(HOME_ENV)
    base = os.path.expanduser(home) if home else os.path.join(os.path.expanduser("~"), ".cache", "circle-reid")
    return os.path.join(base, "hub")


def offline() -> bool:
    """True when REID_OFFLINE forbids downloading."""
    return os.environ.get(OFFLINE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def cache_path(name: str, filename: str) -> str:
    """The cached file of catalogue entry `name` (``publisher/model``)."""
    return os.path.join(hub_home(), name.split("/", 1)[0], filename)


def recorded_hash(path: str) -> Optional[str]:
    """The sha256 recorded beside `path` on its first download, or None."""
    try:
        with open(path + ".sha256", encoding="ascii") as f:
            text = f.read().split()
    except (OSError, UnicodeDecodeError):
        return None
    digest = text[0].lower() if text else ""
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) else None


def record_hash(path: str, digest: str) -> None:
    """Record `digest` beside `path` (written aside, then renamed: never half a hash)."""
    tmp = path + ".sha256.tmp"
    with open(tmp, "w", encoding="ascii") as f:
        f.write(f"{digest}  {os.path.basename(path)}\n")
    os.replace(tmp, path + ".sha256")


def writable_folder(folder: str) -> str:
    """`folder`, created if needed; DownloadError (one line, what to do) when it is a file or
    cannot be written."""
    home = hub_home()
    for part in (os.path.dirname(home), home, folder):
        if os.path.lexists(part) and not os.path.isdir(part):
            raise DownloadError(f"The model cache {part} is a file, not a folder: move it away or set {HOME_ENV} to a "
                                "folder.")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as e:
        raise DownloadError(f"Cannot create the model cache {folder} ({e.strerror}): set {HOME_ENV} to a writable "
                            "folder.") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DownloadError(f"The model cache {folder} is read-only: set {HOME_ENV} to a writable folder, or put the "
                            "file there by hand.")
    return folder


@contextlib.contextmanager
def download_lock(path: str) -> Iterator[None]:
    """Hold ``<path>.lock`` while downloading `path`: a second process waits, then finds the file."""
    if fcntl is None:
        yield
        return
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DownloadError(f"{path}.lock is not a regular file: remove it.")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


__all__ = ["HOME_ENV", "OFFLINE_ENV", "cache_path", "download_lock", "hub_home", "offline", "record_hash",
           "recorded_hash", "writable_folder"]
