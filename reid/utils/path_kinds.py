"""Saying what a path is when it is not what a loader expected.

``os.path.isfile`` is False for a FIFO, a device, a folder and a broken symbolic link alike, and
a loader that then answers "does not exist" sends the user looking for a file that is right
there. :func:`file_problem` and :func:`folder_problem` say what the path really is ("is a FIFO
(named pipe), not a file", "is a broken symbolic link to 'x'", "is a file, not a folder");
"does not exist" only when nothing is there. :func:`check_file` / :func:`check_folder` raise it
as one line naming the path, so that every loader (configs, checkpoints, pretrained weights, list
files, galleries, indexes, exported models, thresholds, feature files, images, run folders)
words it the same way.

Only ``stat`` is called (never ``open``): a FIFO is recognised without blocking on it.
"""
from __future__ import annotations

import errno
import os
import stat
from typing import Callable, Optional, Union

PathLike = Union[str, "os.PathLike[str]"]

#: The problem of a path with nothing at it (and nothing but a missing target behind a link).
MISSING = "does not exist"

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISREG, "a regular file"),
)


def mode_kind(mode: int) -> str:
    """What a ``st_mode`` is, as a noun phrase ("a folder", "a FIFO (named pipe)", ...)."""
    return next((name for test, name in _KINDS if test(mode)), "a special file")


def _file_above(path: str) -> Optional[str]:
    """The nearest existing ancestor of `path` that is not a folder (what made stat fail with ENOTDIR)."""
    current = os.path.dirname(os.path.abspath(path))
    while True:
        if os.path.exists(current) and not os.path.isdir(current):
            return current
        up = os.path.dirname(current)
        if up == current:
            return None
        current = up


def _unreachable(path: str, error: OSError) -> str:
    """Why ``os.stat(path)`` failed, as the phrase after the path."""
    try:
        link = os.lstat(path)
    except OSError:
        link = None
    if link is not None and stat.S_ISLNK(link.st_mode):
        if error.errno == errno.ELOOP:
            return "is a symbolic link that loops (it leads back to itself)"
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            return f"is a broken symbolic link (its target {target!r} does not exist)"
        return f"is a symbolic link to {target!r}, which cannot be reached ({os.strerror(error.errno)})"
    if error.errno == errno.ENOTDIR:
        above = _file_above(path)
        return f"{MISSING} ({above!r} is a file, not a folder)" if above else MISSING
    if error.errno == errno.ENOENT:
        return MISSING
    if error.errno in (errno.EACCES, errno.EPERM):
        return "cannot be reached (permission denied on a folder above it)"
    return f"cannot be examined ({os.strerror(error.errno) if error.errno else error})"


def _problem(path: PathLike, want: Callable[[int], bool], expected: str) -> Optional[str]:
    path = os.fspath(path)
    if not path:
        return "is an empty path"
    try:
        st = os.stat(path)  # follows links: a link to the right kind is that kind
    except (OSError, ValueError) as e:  # ValueError: an embedded NUL byte
        return _unreachable(path, e) if isinstance(e, OSError) else "is not a valid path (it holds a NUL byte)"
    if want(st.st_mode):
        return None
    return f"is {mode_kind(st.st_mode)}, not {expected}"


def file_problem(path: PathLike) -> Optional[str]:
    """None when `path` is a regular file (or a link to one); else what it is, as the words that
    follow the path in a sentence: "does not exist", "is a folder, not a file", "is a FIFO (named
    pipe), not a file", "is a broken symbolic link (its target 'x' does not exist)", ..."""
    return _problem(path, stat.S_ISREG, "a file")


def folder_problem(path: PathLike) -> Optional[str]:
    """None when `path` is a folder (or a link to one); else what it is ("is a regular file, not a
    folder", "does not exist", ...), as :func:`file_problem` words it."""
    return _problem(path, stat.S_ISDIR, "a folder")


def is_missing(problem: Optional[str]) -> bool:
    """Whether a problem from :func:`file_problem` / :func:`folder_problem` means nothing is there
    (a missing path, or a link whose target is missing)."""
    return bool(problem) and (problem.startswith(MISSING) or problem.startswith("is a broken symbolic link"))


class WrongPathKindError(ValueError):
    """A path names something other than what was expected (a FIFO, a device, a folder for a file)."""


Error = Callable[[str], BaseException]


def _checked(path: PathLike, problem: Optional[str], what: str, hint: str, missing_hint: Optional[str], error: Error,
             missing_error: Error) -> str:
    if problem is not None:
        missing = is_missing(problem)
        advice = missing_hint if missing and missing_hint is not None else hint
        message = f"{what} {os.fspath(path)!r} {problem}" + (f"; {advice}" if advice else ".")
        raise (missing_error if missing else error)(message)
    return os.fspath(path)


def check_file(path: PathLike, what: str, hint: str = "", missing_hint: Optional[str] = None,
               error: Error = WrongPathKindError, missing_error: Error = FileNotFoundError) -> str:
    """`path` (as a string) when it is a regular file; else raise one line "`what` 'PATH' is a
    FIFO (named pipe), not a file; `hint`".

    Nothing there (a missing path, a broken link) raises `missing_error` with `missing_hint`
    (default: `hint`); any other kind raises `error`.
    """
    return _checked(path, file_problem(path), what, hint, missing_hint, error, missing_error)


def check_folder(path: PathLike, what: str, hint: str = "", missing_hint: Optional[str] = None,
                 error: Error = WrongPathKindError, missing_error: Error = FileNotFoundError) -> str:
    """`path` when it is a folder; else one line as :func:`check_file` raises it."""
    return _checked(path, folder_problem(path), what, hint, missing_hint, error, missing_error)


__all__ = ["MISSING", "WrongPathKindError", "check_file", "check_folder", "file_problem", "folder_problem",
           "is_missing", "mode_kind"]
