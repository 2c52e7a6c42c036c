"""The output folder of a tracking tool: held by one run at a time, never another tool's results, never
the tool's own inputs.

``tools/track.py`` and ``tools/link_cameras.py`` both write ``metrics.json`` (and more) into their
``--output``: one folder given to both would end with one tool's metrics beside the other's
identities, and ``link_cameras --tracks L/tracks --output L`` would replace its input tracks with
its own results. :func:`claim_output` refuses both in one line before any work, marks the folder
with the tool that writes it, and holds it (``reid.utils.run_lock``) while the tool runs, so two
runs at once into one folder are refused too.
"""
from __future__ import annotations

import os
from typing import Sequence

from reid.utils.file_io import atomic_write_text, check_output_folder
from reid.utils.run_lock import RunLock

OWNER_FILE = ".circle-reid-tool"
#: What each tool leaves in its folder: a folder of results older than the owner file is known by them.
SIGNATURES = {"track": ("summary.md",), "link_cameras": ("identities.json",),
              "tune_tracker": ("tracker_settings.json",)}


def _inside(path: str, folder: str) -> bool:
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def output_owner(folder: str) -> str:
    """The tool whose results `folder` holds ("" for none): its owner file, else the files it writes."""
    marker = os.path.join(folder, OWNER_FILE)
    if os.path.isfile(marker):
        with open(marker, encoding="utf-8", errors="replace") as f:
            return f.read(64).strip()
    return next((tool for tool, names in SIGNATURES.items()
                 if any(os.path.exists(os.path.join(folder, n)) for n in names)), "")


def claim_output(folder: str, tool: str, inputs: Sequence[str] = (), writes: Sequence[str] = (),
                 reports: Sequence[str] = ()) -> RunLock:
    """Check `folder` for `tool`, take it, and return its held lock (``lock.release()`` when the tool is done).

    One-line ValueErrors: the folder holds another tool's results; an input (`inputs`) lies in the
    output folder's sub-folders the tool writes (`writes`, relative to `folder`), or the output folder
    lies inside an input (its results would mix with the user's files). An earlier run's `reports`
    (files relative to `folder` that the tool writes last) are removed once the folder is held, so a
    run stopped midway leaves none beside its new results: their absence says it did not finish.
    """
    check_output_folder(folder, "--output")
    owner = output_owner(folder) if os.path.isdir(folder) else ""
    if owner and owner != tool:
        raise ValueError(f"--output {folder} holds the results of tools/{owner}.py, and tools/{tool}.py would mix its "
                         f"own with them (or replace them); choose another --output folder.")
    for given in inputs:
        if _inside(folder, given):
            raise ValueError(f"--output {folder} lies inside the input {given}: the results would mix with the files "
                             "read; choose an --output folder outside it.")
        clash = next((w for w in writes if _inside(given, os.path.join(folder, w))), None)
        if clash is not None:
            raise ValueError(f"the input {given} lies in {os.path.join(folder, clash)}, where tools/{tool}.py writes its "
                             "results: they would replace it; choose another --output folder.")
    os.makedirs(folder, exist_ok=True)
    lock = RunLock(folder, f"tools/{tool}.py", "choose another --output folder").acquire()
    try:
        atomic_write_text(os.path.join(folder, OWNER_FILE), tool + "\n")
        for name in reports:
            if os.path.isfile(os.path.join(folder, name)):
                os.remove(os.path.join(folder, name))
    except BaseException:
        lock.release()
        raise
    return lock


__all__ = ["OWNER_FILE", "claim_output", "output_owner"]
