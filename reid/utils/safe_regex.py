"""Regular expressions from configs, matched within bounds: a config cannot make a tool hang.

Python's ``re`` backtracks without limit: ``(a|aa)+$`` takes about 1.6^n steps on a name of n
``a``s followed by ``!``, so one file name of 60 characters would stop a folder scan for days. A
pattern that a config or a command line gives (``DATASETS.UNLABELLED.CAMERA_REGEX``,
``UDA.TRACKLET_REGEX``) is therefore

* at most :data:`MAX_PATTERN` characters long, and matched against names of at most
  :data:`MAX_NAME` characters (a longer name is an error naming it);
* matched by the `regex` package, whose ``timeout=`` stops a name that takes longer than
  :data:`SECONDS_PER_NAME`; the error names the name. Its repeat guards also make shapes that are
  exponential in ``re`` (``(a+)+$``, ``(\\d*)*x``) finish at once.

``re`` still decides what is a pattern, so the accepted syntax and the error messages stay Python's
and no syntax that only `regex` knows (``\\p{L}``, ``(?|...)``, duplicate group names) gets in.
Among the patterns ``re`` accepts, `regex` (its default VERSION0, "re-compatible") matches
differently in the cases known here (docs/datasets.md lists them for users):

* a POSIX class: ``[[:digit:]]`` is a digit (``re``, which warns "Possible nested set": one of
  ``[:digt`` followed by ``]``);
* ``{e<=1}`` after an item is fuzzy matching, one error allowed (``re``: the literal text);
* on Python 3.10 only, an inline flag after the start (``c(?i)am``, which ``re`` deprecates and
  3.11 refuses) applies to what follows (``re``: to the whole pattern).
"""
from __future__ import annotations

import re
from typing import List, Optional, Sequence, Tuple

import regex

from .text_files import brief

#: Longest pattern accepted (characters); a camera pattern is a dozen.
MAX_PATTERN = 256
#: Longest name matched (characters); file names are at most 255 bytes on common file systems.
MAX_NAME = 1024
#: Longest a single name may take to match, in seconds (a sane pattern takes microseconds).
SECONDS_PER_NAME = 2.0


class RegexError(ValueError):
    """A pattern from a config is refused, or took too long on a name; the message names both."""


def compile_bounded(pattern: str, key: str, example: str = "") -> regex.Pattern:
    """`pattern` compiled for :func:`search_names`, after the length cap of the module docstring;
    RegexError names `key` (the config key) and suggests `example` (a pattern that works) when refused."""
    if len(pattern) > MAX_PATTERN:
        advice = f"; write it more simply, e.g. {example!r}" if example else "; write it more simply"
        raise RegexError(f"{key} is {len(pattern)} characters long ({brief(pattern)}); at most {MAX_PATTERN} are "
                         f"accepted{advice}.")
    try:
        re.compile(pattern)  # first: Python's own error message (see the module docstring)
        return regex.compile(pattern)
    except (re.error, regex.error, RecursionError, OverflowError) as e:
        such = f"; give one such as {example!r}" if example else ""
        raise RegexError(f"{key} {pattern!r} is not a regular expression ({e}){such}.") from None


def search_names(pattern: regex.Pattern, names: Sequence[str], key: str,
                 seconds_per_name: float = SECONDS_PER_NAME) -> List[Optional[Tuple[Optional[str], ...]]]:
    """``pattern.search(name).groups()`` for each of `names` (None where it does not match), each
    name matched within `seconds_per_name`; RegexError names `key` and the name that took too long,
    or a name longer than :data:`MAX_NAME`."""
    for name in names:
        if len(name) > MAX_NAME:
            raise RegexError(f"{key}: the name {brief(name)} is {len(name)} characters long; names of at most "
                             f"{MAX_NAME} are matched. Rename the file.")
    found: List[Optional[Tuple[Optional[str], ...]]] = []
    for name in names:
        try:
            match = pattern.search(name, timeout=seconds_per_name)
        except TimeoutError:
            raise RegexError(
                f"{key} {pattern.pattern!r} took more than {seconds_per_name:g} s on the name {brief(name)} and was "
                "stopped: it backtracks without end on names like it. Write the expression more simply (one "
                "repeat per part, e.g. '_c(\\d+)'), or rename the file.") from None
        except MemoryError:
            raise RegexError(f"{key} {pattern.pattern!r}: matching stopped at the name {brief(name)} (out of memory); "
                             f"write the expression more simply, or leave {key} empty.") from None
        found.append(None if match is None else match.groups())
    return found


__all__ = ["MAX_NAME", "MAX_PATTERN", "SECONDS_PER_NAME", "RegexError", "compile_bounded", "search_names"]
