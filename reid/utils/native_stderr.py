"""Catch what compiled libraries print straight to the process's stderr (file descriptor 2).

faiss' k-means prints one warning per run of k-means that has fewer training points than it
suggests; an IVF-PQ index trains one k-means per sub-vector, so the same line came 64 times
for ``--pq-m 64``. Python cannot intercept these lines (they bypass ``sys.stderr``), so
:func:`captured_stderr` points descriptor 2 at a temporary file for the duration of a call
and hands back the lines, for the caller to report once.
"""
from __future__ import annotations

import collections
import contextlib
import os
import sys
import tempfile
from typing import Iterator, List, Sequence


class CapturedLines:
    """The lines written to descriptor 2 inside :func:`captured_stderr` (filled on exit)."""

    def __init__(self) -> None:
        self.lines: List[str] = []


@contextlib.contextmanager
def captured_stderr() -> Iterator[CapturedLines]:
    """Redirect descriptor 2 (C and C++ code's stderr) to a temporary file; collect its lines.

    Python's own ``sys.stderr`` is flushed before and after, so nothing written through it
    is lost or reordered; the original descriptor is restored even when the block raises.
    """
    captured = CapturedLines()
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            captured.lines = tmp.read().decode("utf-8", "replace").splitlines()


def collapse_repeats(lines: Sequence[str]) -> List[str]:
    """`lines` in first-seen order, each once; a repeated one ends with "(N times)"."""
    counts = collections.Counter(line for line in lines if line.strip())
    return [line if n == 1 else f"{line} ({n} times)" for line, n in counts.items()]


__all__ = ["CapturedLines", "captured_stderr", "collapse_repeats"]
