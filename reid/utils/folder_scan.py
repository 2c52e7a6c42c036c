"""Listing the files under a folder someone else may have made: every real folder once, no loops.

A folder of crops can hold symbolic links: to a folder above itself (a loop that a walk
following links never leaves), to itself, to files elsewhere on the disk, or twice to the
same image. :func:`scan_folder` therefore

* visits each real directory once, by its path under the folder, and never follows a link to
  a directory: a link to a directory inside the folder repeats what the walk reaches anyway,
  and one to a directory outside it leads out of what the user named;
* keeps a link to a file only when the file lies inside the folder and is not already listed
  (two names of one file, by inode, count once: the first in sorted order);
* keeps only regular files (a FIFO named ``x.jpg`` would block a reader forever);
* reports everything it skipped, grouped by reason, so that the caller can print one line
  per reason naming an example.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Tuple

# Reasons a path is skipped, in the order they are reported.
LINK_OUTSIDE = "symbolic links that point outside the folder (name their targets as inputs to include them)"
LINK_DIR = "symbolic links to folders (a folder is scanned once, by its real path; links to folders can loop)"
LINK_BROKEN = "symbolic links whose target does not exist"
DUPLICATE = "second names of files already listed (links or hard links to the same file)"
NOT_REGULAR = "entries that are not regular files (FIFOs, devices, sockets)"
UNREADABLE = "folders that cannot be read (permissions)"


@dataclass
class FolderScan:
    """Files found under `root` (sorted paths, each file once) and what was skipped, by reason."""

    root: str
    files: List[str] = field(default_factory=list)
    skipped: Dict[str, List[str]] = field(default_factory=dict)

    def skip(self, reason: str, path: str) -> None:
        self.skipped.setdefault(reason, []).append(path)

    def notes(self) -> List[str]:
        """One line per reason: how many were skipped and the first example."""
        lines = []
        for reason, paths in self.skipped.items():
            example = paths[0]
            if os.path.islink(example):
                example = f"{example} -> {os.readlink(example)}"
            lines.append(f"{self.root}: skipped {len(paths)} {reason}; e.g. {example}")
        return lines


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def scan_folder(folder: str, accept: Callable[[str], bool]) -> FolderScan:
    """Every regular file under `folder` whose name `accept` takes, sorted, each file once.

    Hidden folders (names starting with ".") are not entered. See the
    module docstring for how links, duplicates and special files are treated.
    """
    root_real = os.path.realpath(folder)
    scan = FolderScan(root=folder)
    candidates: List[Tuple[str, Tuple[int, int]]] = []
    pending = [folder]
    while pending:
        current = pending.pop()
        try:
            with os.scandir(current) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            scan.skip(UNREADABLE, current)
            continue
        for entry in entries:
            path = entry.path
            if entry.is_symlink():
                _symlink(scan, path, root_real, accept, candidates)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                scan.skip(UNREADABLE, path)
                continue
            if stat.S_ISDIR(st.st_mode):
                if not entry.name.startswith("."):
                    pending.append(path)
            elif accept(entry.name):
                if stat.S_ISREG(st.st_mode):
                    candidates.append((path, (st.st_dev, st.st_ino)))
                else:
                    scan.skip(NOT_REGULAR, path)
    seen = set()
    for path, inode in sorted(candidates):
        if inode in seen:
            scan.skip(DUPLICATE, path)
            continue
        seen.add(inode)
        scan.files.append(path)
    return scan


def _symlink(scan: FolderScan, path: str, root_real: str, accept: Callable[[str], bool],
             candidates: List[Tuple[str, Tuple[int, int]]]) -> None:
    target = os.path.realpath(path)
    try:
        st = os.stat(path)  # follows the link
    except OSError:  # dangling, or a loop of links (ELOOP)
        scan.skip(LINK_BROKEN, path)
        return
    if stat.S_ISDIR(st.st_mode):
        scan.skip(LINK_DIR if _inside(target, root_real) else LINK_OUTSIDE, path)
        return
    if not accept(os.path.basename(path)):
        return
    if not _inside(target, root_real):
        scan.skip(LINK_OUTSIDE, path)
    elif not stat.S_ISREG(st.st_mode):
        scan.skip(NOT_REGULAR, path)
    else:
        candidates.append((path, (st.st_dev, st.st_ino)))


__all__ = ["FolderScan", "scan_folder"]
