"""Regular expressions from configs, matched within bounds: a config cannot make a tool hang.

Python's ``re`` backtracks: ``(a+)+$`` takes about 2^n steps on a name of n ``a``s followed by
``!``, so one file name of 40 characters would stop a folder scan for days. A pattern that a
config or a command line gives (``DATASETS.UNLABELLED.CAMERA_REGEX``) is therefore

* at most :data:`MAX_PATTERN` characters long, and matched against names of at most
  :data:`MAX_NAME` characters (a longer name is an error naming it);
* refused up front when it has a shape that backtracks exponentially: a repeated group that holds
  its own repeat or alternatives (``(a+)+``, ``(a*)*``, ``(\\d+_)*``, ``(ab|a)*``), or a
  back-reference (``\\1``, ``(?(1)...)``), which no engine matches in linear time;
* matched in a child process, name by name: the interpreter itself with ``re`` only (started in
  isolated mode), answering one line per name. A name that takes longer than
  :data:`SECONDS_PER_NAME` ends the child, and the error names the name. This bounds what the
  shape check cannot see (polynomial shapes such as ``\\d*\\d*\\d*\\d*x``), the same way on Linux,
  macOS and Windows, from any thread or process (no signals, no threads inside ``re``).
"""
from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from typing import List, Optional, Sequence, Tuple

try:  # Python 3.11+
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # Python 3.10
    import sre_constants as _sre  # type: ignore[no-redef]
    import sre_parse as _sre_parse  # type: ignore[no-redef]

from .text_files import brief

#: Longest pattern accepted (characters); a camera pattern is a dozen.
MAX_PATTERN = 256
#: Longest name matched (characters); file names are at most 255 bytes on common file systems.
MAX_NAME = 1024
#: Longest a single name may take to match, in seconds (a sane pattern takes microseconds).
SECONDS_PER_NAME = 2.0
#: Allowed on top for starting the child interpreter (a loaded machine can be slow to start one).
STARTUP_SECONDS = 30.0

_REPEATS = {_sre.MAX_REPEAT, _sre.MIN_REPEAT} | ({_sre.POSSESSIVE_REPEAT} if hasattr(_sre, "POSSESSIVE_REPEAT") else set())
_BACKREFS = {_sre.GROUPREF, _sre.GROUPREF_EXISTS, getattr(_sre, "GROUPREF_IGNORE", _sre.GROUPREF)}

# The child: compile, say it is ready (so that its start-up is timed apart from the names), then
# answer each JSON-encoded name with the JSON of its groups (null: no match).
_READY = '"ready"'
_CHILD = (
    "import json, re, sys\n"
    "p = re.compile(sys.argv[1], int(sys.argv[2]))\n"
    f"sys.stdout.write({_READY!r} + '\\n')\n"
    "sys.stdout.flush()\n"
    "for line in sys.stdin:\n"
    "    m = p.search(json.loads(line))\n"
    "    sys.stdout.write(json.dumps(None if m is None else m.groups()) + '\\n')\n"
    "    sys.stdout.flush()\n"
)


class RegexError(ValueError):
    """A pattern from a config is refused, or took too long on a name; the message names both."""


def _shape_problem(items, repeated: bool) -> Optional[str]:
    """What in parsed pattern `items` can backtrack exponentially (None: nothing); `repeated`: the
    items are inside a group repeated a variable number of times."""
    for op, av in items:
        if op in _REPEATS:
            low, high, body = av
            variable = low != high
            if repeated and variable:
                return "it repeats a group that holds a repeat of its own (like '(a+)+')"
            found = _shape_problem(body, repeated or (variable and high > 1))
        elif op == _sre.BRANCH:
            if repeated:
                return "it repeats a group that holds alternatives (like '(a|ab)*')"
            found = next((p for p in (_shape_problem(b, repeated) for b in av[1]) if p), None)
        elif op in _BACKREFS:
            return "it has a back-reference ('\\1' or '(?(1)...)')"
        elif op == _sre.SUBPATTERN:
            found = _shape_problem(av[-1], repeated)
        elif op in (_sre.ASSERT, _sre.ASSERT_NOT):
            found = _shape_problem(av[1], repeated)
        elif op == getattr(_sre, "ATOMIC_GROUP", None):
            found = _shape_problem(av, repeated)
        else:
            found = None
        if found:
            return found
    return None


def compile_bounded(pattern: str, key: str, example: str = "") -> re.Pattern:
    """`pattern` compiled, after the checks of the module docstring; RegexError names `key`
    (the config key) and suggests `example` (a pattern that works) when refused."""
    advice = f"; write it more simply, e.g. {example!r}" if example else "; write it more simply"
    if len(pattern) > MAX_PATTERN:
        raise RegexError(f"{key} is {len(pattern)} characters long ({brief(pattern)}); at most {MAX_PATTERN} are "
                         f"accepted{advice}.")
    try:
        compiled = re.compile(pattern)
        problem = _shape_problem(_sre_parse.parse(pattern), False)
    except (re.error, RecursionError, OverflowError) as e:
        such = f"; give one such as {example!r}" if example else ""
        raise RegexError(f"{key} {pattern!r} is not a regular expression ({e}){such}.") from None
    if problem:
        raise RegexError(f"{key} {pattern!r} can take exponential time on a file name that does not match: {problem}"
                         f"{advice}.")
    return compiled


def _read_lines(stream, lines: "queue.Queue[Optional[str]]") -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _write_names(stream, names: Sequence[str]) -> None:
    try:
        for name in names:
            stream.write(json.dumps(name) + "\n")
        stream.close()
    except (BrokenPipeError, OSError, ValueError):  # the child was ended: the reader reports why
        pass


def search_names(pattern: re.Pattern, names: Sequence[str], key: str,
                 seconds_per_name: float = SECONDS_PER_NAME) -> List[Optional[Tuple[Optional[str], ...]]]:
    """``pattern.search(name).groups()`` for each of `names` (None where it does not match), each
    name matched within `seconds_per_name` (see the module docstring); RegexError names `key`
    and the name that took too long, or a name longer than :data:`MAX_NAME`."""
    for name in names:
        if len(name) > MAX_NAME:
            raise RegexError(f"{key}: the name {brief(name)} is {len(name)} characters long; names of at most "
                             f"{MAX_NAME} are matched. Rename the file.")
    if not names:
        return []
    child = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", _CHILD, pattern.pattern, str(int(pattern.flags))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, encoding="ascii",
    )
    lines: "queue.Queue[Optional[str]]" = queue.Queue()
    threads = [threading.Thread(target=_write_names, args=(child.stdin, names), daemon=True),
               threading.Thread(target=_read_lines, args=(child.stdout, lines), daemon=True)]
    for thread in threads:
        thread.start()
    found: List[Optional[Tuple[Optional[str], ...]]] = []
    try:
        try:  # the start-up has its own allowance: the first name then gets the same time as the others
            ready = lines.get(timeout=STARTUP_SECONDS)
        except queue.Empty:
            raise RegexError(f"{key} {pattern.pattern!r}: the matching process did not start within "
                             f"{STARTUP_SECONDS:g} s (a very busy machine?); try again.") from None
        if ready is None or ready.strip() != _READY:
            raise RegexError(f"{key} {pattern.pattern!r}: the matching process ended as it started (code "
                             f"{child.wait()}): check that this Python starts ({sys.executable}), or leave {key} empty.")
        for name in names:
            try:
                line = lines.get(timeout=seconds_per_name)
            except queue.Empty:
                raise RegexError(
                    f"{key} {pattern.pattern!r} took more than {seconds_per_name:g} s on the name {brief(name)} and was "
                    "stopped: it backtracks without end on names like it. Write the expression more simply (one "
                    "repeat per part, e.g. '_c(\\d+)'), or rename the file.") from None
            if line is None:
                raise RegexError(f"{key} {pattern.pattern!r}: matching stopped at the name {brief(name)} (the matching "
                                 f"process ended with code {child.wait()}, out of memory?); write the expression more simply, or leave "
                                 f"{key} empty.")
            groups = json.loads(line)
            found.append(None if groups is None else tuple(groups))
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for thread in threads:  # both end once the child is gone (end of file, broken pipe)
            thread.join(timeout=5.0)
        child.stdout.close()
    return found


__all__ = ["MAX_NAME", "MAX_PATTERN", "SECONDS_PER_NAME", "RegexError", "compile_bounded", "search_names"]
