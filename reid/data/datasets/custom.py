"""Your own crops, described by list files: one image per line, ``path pid camid``.

Format (text or CSV):

* fields separated by whitespace or by commas: ``imgs/0001_a.jpg 1 0`` or ``imgs/0001_a.jpg,1,0``;
  the path may contain spaces (the last two fields are pid and camid). A line that splits at
  its last two runs of whitespace into a path and two integers is whitespace-separated (so a
  comma may appear in its path); any other line is comma-separated;
* ``#`` starts a comment at the start of a line or after whitespace (``imgs/a#1.jpg`` is a
  path); blank lines are ignored; an optional first line ``path,pid,camid`` (or
  ``path pid camid``) is a header;
* relative image paths are relative to the folder of the list file;
* pid: an integer identity; ``-1`` marks junk images, which are dropped; camid: a non-negative
  integer camera label (only compared for equality, so 0- or 1-based both work).

A relative list-file path is looked up under the dataset root first, then the working folder.
"""
from __future__ import annotations

import os
import re
from typing import List, Optional

from reid.utils.text_files import text_lines

from .base import (DATASET_REGISTRY, DatasetFormatError, DatasetNotFoundError, Item, ReIDDataset, check_id,
                   check_listed_image)

_HEADER_TOKENS = ("path", "pid", "camid")
_PID_RE = re.compile(r"-?\d+", re.ASCII)
_CAMID_RE = re.compile(r"\d+", re.ASCII)
# Loose on purpose: it only decides the separator; "+1" then fails the strict check with the
# line quoted, instead of the line being re-split at commas.
_INT_LIKE_RE = re.compile(r"[+-]?\d[\d_]*", re.ASCII)
_COMMENT_RE = re.compile(r"(?:^|\s)#.*$", re.S)

#: Where custom-list errors send the user (base.README_HINT is about downloading a dataset).
CUSTOM_HINT = (
    "The format is described in the 'Custom list files (custom)' section of datasets/README.md."
)


def root_candidates(root: str, path: str) -> List[str]:
    """Where a dataset file given as `path` is looked for: `path` when absolute, else under `root`, then as given."""
    return [path] if os.path.isabs(path) else [os.path.join(root, path), path]


def _resolve_list(root: str, list_file: str, what: str) -> str:
    candidates = root_candidates(root, list_file)
    for cand in candidates:
        if os.path.lexists(cand):  # whatever it is: text_lines names a FIFO or a folder for what it is
            return cand
    raise DatasetNotFoundError(
        f"Custom dataset: the {what} list {list_file!r} was not found (looked at: "
        f"{', '.join(repr(c) for c in candidates)}). Set DATASETS.CUSTOM.{what.upper()}_LIST to an "
        f"existing file with lines 'path pid camid'. {CUSTOM_HINT}"
    )


def strip_comment(line: str) -> str:
    """`line` without its comment, stripped.

    ``#`` starts a comment only at the start of the line or after whitespace, so that a file
    name such as ``imgs/a#1.jpg`` stays whole.
    """
    return _COMMENT_RE.sub("", line).strip()


def split_list_line(line: str) -> List[str]:
    """The fields of one list line: ``[path, pid, camid]`` when it has three, stripped.

    Whitespace separates when the line splits at its last two whitespace runs into a path
    and two integers (its path may then contain commas, and spaces); otherwise commas
    separate when the line has one (its path may contain spaces), else whitespace. Comments
    must already be removed (:func:`strip_comment`).
    """
    fields = line.rsplit(None, 2)
    if len(fields) == 3 and all(_INT_LIKE_RE.fullmatch(x) for x in fields[1:]):
        return [x.strip() for x in fields]
    if "," in line:
        return [x.strip() for x in line.rsplit(",", 2)]
    return [x.strip() for x in fields]


def is_header(fields: List[str]) -> bool:
    """Whether `fields` is the optional ``path pid camid`` header line."""
    return [x.lower() for x in fields] == list(_HEADER_TOKENS)


def read_list_file(list_path: str) -> List[Item]:
    """Parse one list file into items (junk pid -1 dropped).

    Raises DatasetFormatError naming the file and line for a malformed line, and
    DatasetNotFoundError naming the image when it does not exist.
    """
    base = os.path.dirname(os.path.abspath(list_path))
    items: List[Item] = []
    first_content = True
    for lineno, raw in text_lines(list_path):
        line = strip_comment(raw)
        if not line:
            continue
        fields = split_list_line(line)
        if first_content and is_header(fields):
            first_content = False
            continue
        first_content = False
        # Strict patterns: int() alone would read "1_0" as pid 10 and accept "+1".
        ok = (
            len(fields) == 3 and bool(fields[0])
            and _PID_RE.fullmatch(fields[1]) is not None and _CAMID_RE.fullmatch(fields[2]) is not None
            and int(fields[1]) >= -1
        )
        if not ok:
            raise DatasetFormatError(
                f"{list_path}, line {lineno}: expected 'path pid camid' (pid an integer >= -1, "
                f"camid an integer >= 0; separated by spaces or commas), got {raw.strip()!r}. "
                f"Fix or remove the line. {CUSTOM_HINT}"
            )
        where = f"{list_path}, line {lineno}"
        path, pid, camid = fields[0], check_id(fields[1], "pid", where), check_id(fields[2], "camid", where)
        if pid == -1:
            continue
        full = path if os.path.isabs(path) else os.path.join(base, path)
        check_listed_image(full, where, base)
        items.append((full, pid, camid))
    return items


@DATASET_REGISTRY.register("custom")
class CustomDataset(ReIDDataset):
    """A dataset from up to three list files (DATASETS.CUSTOM.TRAIN_LIST / QUERY_LIST / GALLERY_LIST).

    Any list may be empty ("") - e.g. a test-only dataset has no train list - but not all three.
    """

    name = "custom"
    empty_test_hint = (
        "Set DATASETS.CUSTOM.QUERY_LIST and DATASETS.CUSTOM.GALLERY_LIST to list files of the test images, "
        "or take 'custom' out of DATASETS.TESTS (TEST.VAL_IDS holds out identities of the training list "
        "for validation instead)."
    )

    def __init__(
        self,
        root: str = "datasets",
        train_list: Optional[str] = "",
        query_list: Optional[str] = "",
        gallery_list: Optional[str] = "",
    ) -> None:
        lists = {"train": train_list, "query": query_list, "gallery": gallery_list}
        if not any(lists.values()):
            raise DatasetNotFoundError(
                "Custom dataset: no list file given. Set DATASETS.CUSTOM.TRAIN_LIST and/or "
                f"DATASETS.CUSTOM.QUERY_LIST + GALLERY_LIST to files with lines 'path pid camid'. {CUSTOM_HINT}"
            )
        self.list_files = {k: _resolve_list(root, v, k) if v else "" for k, v in lists.items()}
        parsed = {k: read_list_file(p) if p else [] for k, p in self.list_files.items()}
        if bool(parsed["query"]) != bool(parsed["gallery"]):
            empty = "query" if not parsed["query"] else "gallery"
            raise DatasetFormatError(
                f"Custom dataset: the {empty} list is empty or missing while the other test list is "
                f"set; evaluation needs both DATASETS.CUSTOM.QUERY_LIST and GALLERY_LIST."
            )
        super().__init__(parsed["train"], parsed["query"], parsed["gallery"])
