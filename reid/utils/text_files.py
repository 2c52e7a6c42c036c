"""Text from files someone else made: list files read line by line with checks, values shown briefly.

A list file names images, one per line. Handed a binary file, a FIFO or a multi-gigabyte
single "line" by mistake (or on purpose), a plain ``for line in open(...)`` blocks, fails
with a codec error that names no file, or holds the whole line in memory. :func:`text_lines`
reads only regular files, decodes UTF-8 (a byte-order mark is dropped), and refuses a line
longer than :data:`MAX_LINE` characters, each with one message naming the file.
"""
from __future__ import annotations

import reprlib
from typing import Any, Iterator, Tuple

from .path_kinds import check_file

#: Longest line accepted; an image path is rarely longer than a few hundred characters.
MAX_LINE = 1 << 16

_repr = reprlib.Repr()
_repr.maxlevel, _repr.maxlist, _repr.maxdict, _repr.maxstring, _repr.maxother = 3, 6, 6, 60, 60
_BRIEF = 200


def brief(value: Any) -> str:
    """``repr(value)`` cut to about 200 characters, so that an error message naming a value from
    someone else's file stays one readable line however large the value is."""
    text = _repr.repr(value)
    return text if len(text) <= _BRIEF else text[:_BRIEF] + "..."


def printable(text: str) -> str:
    """`text` with control characters escaped (``\\x1b``, ``\\n``): a path from someone else's
    gallery must not move the cursor, recolour or rewrite the user's terminal when printed."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def text_lines(path: str, what: str = "List file") -> Iterator[Tuple[int, str]]:
    """``(line number, line)`` for each line of text file `path` (line numbers from 1).

    Raises FileNotFoundError / ValueError naming `path` (as "`what` PATH") for a missing
    file, a path that is not a regular file (saying what it is: a FIFO, a folder, ...), text that is not UTF-8, or an overlong line.
    """
    check_file(path, what, "name a text file with one entry per line.", missing_hint="check the path.")
    with open(path, "r", encoding="utf-8-sig") as f:
        lineno = 0
        while True:
            try:
                line = f.readline(MAX_LINE + 1)
            except UnicodeDecodeError:
                raise ValueError(f"{what} {path!r} is not UTF-8 text (line {lineno + 1}); name a text file "
                                 "with one entry per line.") from None
            if not line:
                return
            lineno += 1
            if len(line) > MAX_LINE:
                raise ValueError(f"{what} {path!r}, line {lineno}: longer than {MAX_LINE} characters; it is not a "
                                 "list of paths (one per line).")
            yield lineno, line


__all__ = ["MAX_LINE", "brief", "printable", "text_lines"]
