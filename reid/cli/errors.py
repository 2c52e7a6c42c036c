"""How every command-line program reports a user's mistake: one line on stderr, exit code 1.

A user error is what the input or the environment caused (a missing file, a bad value, an
unreadable image, weights that do not fit the model); its message already names the thing
and says what to do, so a traceback would only hide it. Anything else is a bug and keeps its
traceback. A message of several lines (a missing dataset: the folders searched, the expected
layout) gives the ``error:`` line from its first line, and its other lines follow as they are.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Callable, Tuple, Type


def user_errors() -> Tuple[Type[BaseException], ...]:
    """Exception types printed as ``error: <message>`` (an unknown registry name is an
    UnknownNameError, a ValueError; a corrupt image is a CorruptImageError, an OSError).

    Imported here, when an error is being reported, so that this module stays light: a program
    can report errors before it has loaded torch.
    """
    from reid.data.download import DownloadUnavailableError
    from reid.engine.checkpoint_files import CheckpointError
    from reid.export.writer import ExportMismatchError
    from reid.modeling.backbones.resnet import PretrainedWeightsError
    from reid.export.precision_export import PrecisionCheckError
    from reid.hub.download import DownloadError
    from reid.tracking.tracker_env import TrackerEnvError
    from reid.utils.run_lock import RunFolderBusyError

    return (ValueError, OSError, ImportError, CheckpointError, ExportMismatchError, PretrainedWeightsError,
            DownloadUnavailableError, RunFolderBusyError, TrackerEnvError, PrecisionCheckError, DownloadError)

# A DataLoader worker re-raises its exception in the main process with the worker's whole
# traceback folded into the message ("Caught X in DataLoader worker process 0.\nOriginal
# Traceback ..."); the user needs only the original message, the traceback's last line.
_WORKER_TRACEBACK = re.compile(r"Original Traceback \(most recent call last\):")


# Longest error line printed: messages name files and values, and a value from a hostile file
# (a huge path, an expanded YAML value) must not turn one line into megabytes.
MAX_MESSAGE = 2000


def one_line(error: BaseException) -> str:
    """The message of `error` as one line (at most MAX_MESSAGE characters), without a
    DataLoader worker's folded traceback."""
    text = str(error)
    if _WORKER_TRACEBACK.search(text):
        last = [line for line in text.strip().splitlines() if line.strip()][-1].strip()
        # "module.ErrorType: message" -> "message"
        text = re.sub(r"^[\w.]+(Error|Exception)\w*: ", "", last)
    text = " ".join(part.strip() for part in text.splitlines() if part.strip())
    if len(text) > MAX_MESSAGE:
        text = f"{text[:MAX_MESSAGE]}... [{len(text) - MAX_MESSAGE} more characters]"
    return text


def error_text(error: BaseException) -> str:
    """What a program prints for a user error: ``error: <first line>`` and any further lines
    of the message indented below it (a DataLoader worker's folded traceback is dropped)."""
    text = str(error)
    if _WORKER_TRACEBACK.search(text) or "\n" not in text.strip():
        return f"error: {one_line(error)}"
    first, *rest = [line.rstrip() for line in text.strip().splitlines()]
    return "\n".join([f"error: {first.strip()}"] + [f"  {line}" for line in rest if line.strip()])


def run_main(command: Callable[[], Any]) -> int:
    """Run a program's work; a user error prints ``error: ...`` and gives exit code 1.

    Otherwise an integer that the work returns is the exit code; anything else counts as 0.
    """
    try:
        rc = command()
    except Exception as e:
        # The common user errors are checked first: the rest of the list imports torch.
        if not isinstance(e, (ValueError, OSError, ImportError)) and not isinstance(e, user_errors()):
            raise
        print(error_text(e), file=sys.stderr)
        return 1
    return rc if isinstance(rc, int) else 0


__all__ = ["error_text", "one_line", "run_main", "user_errors"]
