"""A lock that many readers hold at once, or one writer alone."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class ReadWriteLock:
    """Many readers at once or one writer (e.g. faiss searches, const and thread-safe together, and
    an add, which changes the lists under them). A waiting writer goes before new readers, so a
    steady stream of readers never starves it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Hold the lock as one of its readers."""
        with self._cond:
            while self._writer or self._waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock alone (readers finish first; new ones wait)."""
        with self._cond:
            self._waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


__all__ = ["ReadWriteLock"]
