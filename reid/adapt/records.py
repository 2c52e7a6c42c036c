"""The recipe's output folder and its stages' records: what makes a rerun skip, resume or refuse.

Each stage works in its own sub-folder of ``--output``. When it starts it writes
``settings.json`` there (the settings it runs with: those of the stages before it included);
when it is complete, ``done.json`` (the same settings plus what it produced). A rerun skips a
stage whose ``done.json`` holds the same settings, continues (training) or redoes (the other
stages) one that has only ``settings.json``, and refuses, before any work, a stage recorded
with other settings: mixing two runs' results in one folder would make the report a lie.

The folder itself is claimed as ``reid.tracking.outputs`` claims a tracking tool's: an owner
file names this tool, and a folder that holds anything without it is never written to.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Any, Dict, Optional, Sequence

from reid.tracking.outputs import OWNER_FILE, output_owner
from reid.utils.file_io import atomic_write_text, check_output_folder
from reid.utils.run_lock import RunLock

TOOL = "adapt"
SETTINGS_FILE = "settings.json"
DONE_FILE = "done.json"


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def claim_folder(output: str, inputs: Sequence[str]) -> RunLock:
    """Check `output`, make it ours and return its held lock (``lock.release()`` at the end).

    One-line ValueErrors: a folder holding files of someone else (no owner file of this tool: a
    user's folder, another tool's results), an output inside an input or an input inside it.
    The owner file is written once, so a rerun that only skips changes no file.
    """
    check_output_folder(output, "--output")
    for given in inputs:
        if _inside(output, given) or _inside(given, output):
            raise ValueError(f"--output {output} and the input {given} lie one inside the other: the results would mix "
                             "with the files read; choose an --output folder outside the inputs.")
    if os.path.isdir(output) and os.listdir(output):
        owner = output_owner(output)
        if owner != TOOL:
            what = f"the results of tools/{owner}.py" if owner else "files that tools/adapt.py did not write"
            raise ValueError(f"--output {output} holds {what}; choose a new or empty folder (nothing there was "
                             "changed).")
    os.makedirs(output, exist_ok=True)
    lock = RunLock(output, "tools/adapt.py", "wait for it to finish, or choose another --output folder").acquire()
    try:
        if not os.path.isfile(os.path.join(output, OWNER_FILE)):
            atomic_write_text(os.path.join(output, OWNER_FILE), TOOL + "\n")
    except BaseException:
        lock.release()
        raise
    return lock


def read_json(path: str) -> Optional[Dict[str, Any]]:
    """The JSON object in `path`, None when there is no file; a damaged one is a one-line ValueError."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} cannot be read ({e}); delete that stage's folder to redo it.") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a record of tools/adapt.py; delete that stage's folder to redo it.")
    return data


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return " ".join(str(v) for v in value) or "(none)"
    if isinstance(value, dict):
        return " ".join(f"{k}={json.dumps(v)}" for k, v in value.items()) or "(none)"
    return "(not given)" if value is None else str(value)


def settings_difference(recorded: Dict[str, Any], wanted: Dict[str, Any], where: str) -> Optional[str]:
    """One line naming the first setting whose value differs between `recorded` (read from `where`) and
    `wanted`, with both values; None when they agree."""
    for key in list(wanted) + [k for k in recorded if k not in wanted]:
        old, new = recorded.get(key), wanted.get(key)
        if json.dumps(old, sort_keys=True) != json.dumps(new, sort_keys=True):
            again = f"without {key}" if old is None else f"with {key} {_shown(old)}"
            return (f"{key} is {_shown(new)} on this command but {_shown(old)} in the run recorded in {where}; "
                    f"run it {again} to continue that run, or choose another --output folder.")
    return None


class StageRecord:
    """The records of one stage, in `folder` (``<output>/<stage name>``)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.name = os.path.basename(folder.rstrip(os.sep))

    @property
    def done(self) -> Optional[Dict[str, Any]]:
        """``done.json``'s content, None while the stage is not complete."""
        return read_json(os.path.join(self.folder, DONE_FILE))

    def check(self, settings: Dict[str, Any], started: bool = True) -> None:
        """Refuse (ValueError, one line) when the stage was run with other settings, or, with `started`,
        began with them (a stage whose partial work a rerun continues rather than redoes)."""
        for name in (DONE_FILE, SETTINGS_FILE) if started else (DONE_FILE,):
            path = os.path.join(self.folder, name)
            record = read_json(path)
            if record is not None:
                problem = settings_difference(record.get("settings", {}), settings, path)
                if problem:
                    raise ValueError(problem)
                return

    def start(self, settings: Dict[str, Any], fresh: bool) -> None:
        """Begin the stage: with `fresh`, what an interrupted attempt left is removed first (the folder
        is this tool's: it lies in the claimed --output); ``settings.json`` is written."""
        if fresh and os.path.isdir(self.folder):
            shutil.rmtree(self.folder)
        os.makedirs(self.folder, exist_ok=True)
        atomic_write_text(os.path.join(self.folder, SETTINGS_FILE), json.dumps({"settings": settings}, indent=1))

    def finish(self, settings: Dict[str, Any], result: Dict[str, Any]) -> None:
        """Mark the stage complete: ``done.json`` with its settings and `result`."""
        atomic_write_text(os.path.join(self.folder, DONE_FILE),
                          json.dumps({"stage": self.name, "settings": settings, "result": result}, indent=1,
                                     default=str))


__all__ = ["DONE_FILE", "SETTINGS_FILE", "StageRecord", "TOOL", "claim_folder", "read_json", "settings_difference"]
