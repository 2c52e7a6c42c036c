"""Run logging: a console + ``log.txt`` logger and a ``metrics.jsonl`` writer.

Only the main process (rank 0) writes files; other ranks log warnings and errors to the
console, prefixed with their rank, so a distributed run's output stays readable.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import logging
import os
import sys
import time
from typing import Any, Dict, Iterator, Mapping, Optional

from .file_io import atomic_write_text, raise_if_disk_full
from .json_values import jsonable

LOGGER_NAME = "reid"
_FORMAT = "[%(asctime)s %(name)s %(levelname)s] %(message)s"
_DATEFMT = "%m/%d %H:%M:%S"
# Marks handlers installed here so a second setup_logger call (a new run in the same
# process, e.g. in tests) replaces them instead of duplicating every line.
_OWNED = "_reid_owned_handler"


class _StdoutHandler(logging.StreamHandler):
    """A console handler that writes to whatever ``sys.stdout`` is at the time of each line.

    A handler bound to the ``sys.stdout`` of its creation breaks ("I/O operation on closed
    file") once that stream is swapped and closed: by pytest's output capture between tests,
    or by a notebook that redirects output. Resolving the stream per line follows the swap.
    """

    def __init__(self) -> None:
        super().__init__(stream=sys.stdout)

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        # StreamHandler.__init__ and setStream assign here; the current sys.stdout always wins.
        pass


class LineProgress:
    """Progress for a stream that is not a terminal (a log file, a pipe): whole lines.

    A terminal bar redraws one line with carriage returns, which a log file keeps as one
    endless line. This writes a complete line when the count passes each tenth of `total`
    and, in between, at most every `interval` seconds (so a slow job shows it is alive): at
    most 11 lines plus one per `interval`. The counters follow tqdm's (``n``, ``update``,
    ``set_postfix``), so callers use either without knowing which.
    """

    def __init__(self, total: Optional[int], desc: str, stream: Any, initial: int = 0, unit: str = "it",
                 interval: float = 60.0) -> None:
        self.total, self.desc, self.stream, self.unit, self.interval = total, desc, stream, unit, float(interval)
        self.n = self._start = int(initial)
        self._postfix = ""
        self._t0 = self._last_line = time.monotonic()
        self._next_tenth = self._tenth(self.n) + 1

    def _tenth(self, n: int) -> int:
        return 10 * n // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        """Count `n` more; write a line at each tenth of the total or after `interval` seconds."""
        self.n += int(n)
        now = time.monotonic()
        if (self.total and self._tenth(self.n) >= self._next_tenth) or now - self._last_line >= self.interval:
            self._next_tenth = self._tenth(self.n) + 1
            self._write(now)

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        """Values shown at the end of the next line (e.g. ``loss=1.23``)."""
        self._postfix = ", ".join(f"{k}={v}" for k, v in values.items())

    def _write(self, now: float) -> None:
        self._last_line = now
        elapsed = now - self._t0
        rate = (self.n - self._start) / elapsed if elapsed > 0 else 0.0
        parts = [f"{format_duration(elapsed)} elapsed", f"{rate:.1f} {self.unit}/s"]
        if self.total and rate > 0 and self.n < self.total:
            parts.append(f"eta {format_duration((self.total - self.n) / rate)}")
        if self._postfix:
            parts.append(self._postfix)
        count = f"{100 * self.n // self.total:3d}% {self.n}/{self.total}" if self.total else f"{self.n}"
        self.stream.write(f"{self.desc}: {count} {self.unit} [{', '.join(parts)}]\n")
        self.stream.flush()

    def close(self) -> None:
        """Nothing to clear: every line is already complete."""


def format_duration(seconds: float) -> str:
    """`seconds` as H:MM:SS (whole seconds; negative counts as 0)."""
    return str(datetime.timedelta(seconds=int(max(0.0, seconds))))


@contextlib.contextmanager
def progress_bar(
    total: Optional[int], desc: str, enabled: bool = True, initial: int = 0, leave: bool = True, unit: str = "it"
) -> Iterator[Any]:
    """Progress on stderr: a tqdm bar on a terminal, whole lines (:class:`LineProgress`) elsewhere.

    While a bar lives, console log lines go through ``tqdm.write`` (tqdm's own
    ``logging_redirect_tqdm``), so lines and bar never overwrite each other. In a log file or
    a pipe a bar would leave one line joined by carriage returns, so there a line is written
    at each tenth of `total` (and at most every minute in between). `enabled` False gives a
    bar that draws nothing (its counters still work).
    """
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    if enabled and not bool(getattr(sys.stderr, "isatty", lambda: False)()):
        yield LineProgress(total, desc, sys.stderr, initial=initial, unit=unit)  # its lines need no closing
        return
    with logging_redirect_tqdm(loggers=[logging.getLogger(LOGGER_NAME)]):
        with tqdm(total=total, desc=desc, initial=initial, disable=not enabled, leave=leave, unit=unit, file=sys.stderr,
                  mininterval=0.1, dynamic_ncols=True) as bar:
            yield bar


def setup_logger(
    output_dir: Optional[str] = None, rank: int = 0, name: str = LOGGER_NAME, level: int = logging.INFO
) -> logging.Logger:
    """Configure and return logger `name` (default "reid", the parent of every module logger).

    Rank 0 logs INFO and above to stdout and, when `output_dir` is given, appends to
    ``output_dir/log.txt`` (appending keeps the history of a resumed run in one file).
    Other ranks only show WARNING and above, prefixed with ``[rank N]``.
    """
    logger = logging.getLogger(name)
    for handler in list(logger.handlers):
        if getattr(handler, _OWNED, False):
            logger.removeHandler(handler)
            handler.close()
    logger.setLevel(level)
    # Our handlers print everything once; propagating would print again via root handlers.
    logger.propagate = False

    prefix = "" if rank == 0 else f"[rank {rank}] "
    formatter = logging.Formatter(prefix + _FORMAT, datefmt=_DATEFMT)

    def add(handler: logging.Handler, handler_level: int) -> None:
        handler.setLevel(handler_level)
        handler.setFormatter(formatter)
        setattr(handler, _OWNED, True)
        logger.addHandler(handler)

    add(_StdoutHandler(), level if rank == 0 else logging.WARNING)
    if rank == 0 and output_dir:
        os.makedirs(output_dir, exist_ok=True)
        file_handler = _LogFileHandler(os.path.join(output_dir, "log.txt"), mode="a", encoding="utf-8")
        file_handler.owner = name
        add(file_handler, level)
    return logger


class OutputDirError(OSError):
    """The output folder cannot be created or written; the message says which and what to do."""


def setup_run_logger(output_dir: str, rank: int = 0, output_hint: str = "choose another OUTPUT_DIR") -> logging.Logger:
    """:func:`setup_logger` for a run writing into `output_dir`; a folder that cannot be created or
    written raises :class:`OutputDirError` naming it and ending with `output_hint` (what to change)."""
    try:
        return setup_logger(output_dir, rank=rank)
    except OSError as e:
        reason = e.strerror or str(e)
        raise OutputDirError(
            f"Cannot write the run's files into {output_dir!r} ({reason}: {e.filename or output_dir}); "
            f"{output_hint}, or make that folder writable."
        ) from e


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


class _LogFileHandler(logging.FileHandler):
    """log.txt; when a line cannot be written (full disk), one warning on stderr, then the file is
    left alone: the console still shows everything, and a traceback per log line helps nobody."""

    owner = LOGGER_NAME  # the logger it is attached to

    def emit(self, record: logging.LogRecord) -> None:
        # a closed handler reopens its file on the next line, outside logging's own error handling: a run
        # folder moved or removed meanwhile (a program that trained in-process goes on) would raise there
        try:
            super().emit(record)
        except OSError:
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        error = sys.exc_info()[1]
        sys.stderr.write(f"warning: cannot write {self.baseFilename} ({error}); log lines go to the console only\n")
        for logger in (logging.getLogger(self.owner), logging.getLogger(LOGGER_NAME)):
            logger.removeHandler(self)
        self.close()


class MetricsWriter:
    """Append one JSON object per line to ``output_dir/metrics.jsonl`` (and TensorBoard).

    Each line is flushed at once, so a crashed or killed run keeps every record written so
    far, and ``tail -f`` shows progress. When `enabled` is False (ranks other than 0) every
    call is a no-op. TensorBoard events go to ``output_dir/tensorboard`` only when the
    ``tensorboard`` package is installed; otherwise one info line says how to get them.
    """

    def __init__(
        self,
        output_dir: str,
        enabled: bool = True,
        tensorboard: bool = True,
        logger: Optional[logging.Logger] = None,
        resume_at: Optional[int] = None,
        redo_epoch_end: bool = False,
    ) -> None:
        """`resume_at`: the iteration a resumed (or restarted) run continues from. Records of later
        iterations, which it trains again, are removed from metrics.jsonl and TensorBoard, so that
        each iteration keeps one record; with `redo_epoch_end` also the end-of-epoch records
        (evaluation, clustering) of `resume_at` itself, which the run makes again."""
        self.enabled = enabled
        self.path = os.path.join(output_dir, "metrics.jsonl")
        self._file = None
        self._tb = None
        if not enabled:
            return
        os.makedirs(output_dir, exist_ok=True)
        if resume_at is not None and os.path.isfile(self.path):
            self._drop_after(int(resume_at), redo_epoch_end)
        self._file = open(self.path, "a", encoding="utf-8")
        if self._file.tell() and not _ends_with_newline(self.path):
            self._file.write("\n")  # a line cut short by a crash or a full disk stays a line of its own
        if tensorboard:
            log = logger or logging.getLogger(LOGGER_NAME)
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.info("TensorBoard events off: install the 'tensorboard' package to get them.")
            else:
                # purge_step: TensorBoard drops the events of the steps trained again.
                purge = None if resume_at is None else int(resume_at) + 1
                self._tb = SummaryWriter(log_dir=os.path.join(output_dir, "tensorboard"), purge_step=purge)

    def _drop_after(self, resume_at: int, redo_epoch_end: bool) -> None:
        """Rewrite metrics.jsonl (atomically) without the records the resumed run makes again."""
        with open(self.path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()

        def redone(line: str) -> bool:
            try:
                record = json.loads(line)
                it = int(record["iter"])
            except (ValueError, TypeError, KeyError):
                return False  # not a record with an iteration (a line cut short stays as it was)
            return it > resume_at or (redo_epoch_end and it == resume_at and record.get("type") != "train")

        kept = [line for line in lines if not redone(line)]
        if len(kept) != len(lines):
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, record: Mapping[str, Any]) -> None:
        """Append `record` as one JSON line; numeric fields also go to TensorBoard.

        A full disk raises DiskFullError naming the file (the line may then be cut short: the
        next writer starts on a new line, and readers skip a line that does not parse).
        """
        if not self.enabled or self._file is None:
            return
        clean = jsonable(dict(record))
        try:
            self._file.write(json.dumps(clean, allow_nan=False) + "\n")
            self._file.flush()
        except OSError as e:
            raise_if_disk_full(e, self.path, "the records written before are intact")
            raise
        if self._tb is not None:
            self._write_tensorboard(clean)

    def _write_tensorboard(self, record: Dict[str, Any]) -> None:
        step = int(record.get("iter", 0))
        if record.get("type") == "eval":
            prefix = f"{record.get('split', 'test')}/{record.get('dataset', '')}".rstrip("/")
        else:
            prefix = str(record.get("type", "train"))
        for key, value in record.items():
            if key in ("type", "split", "dataset", "epoch", "iter", "time"):
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._tb.add_scalar(f"{prefix}/{key}", value, step)
        self._tb.flush()

    def close(self) -> None:
        """Close the file (and the TensorBoard writer); later writes are ignored."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> "MetricsWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["LOGGER_NAME", "LineProgress", "MetricsWriter", "OutputDirError", "format_duration", "progress_bar", "setup_logger",
           "setup_run_logger"]
