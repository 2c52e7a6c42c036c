"""MOTChallenge text files: ground truth, detections and tracker results; read checked, written atomically.

One row per box, values separated by commas (spaces around them are tolerated; a file without a
single comma is read as whitespace-separated, as some tools write it):

* ``gt.txt``: ``frame,id,x,y,w,h,consider,class,visibility`` (MOT16/17/20; class 1 = pedestrian);
* ``det.txt``: ``frame,-1,x,y,w,h,conf`` plus optionally ``,x,y,z`` (world coordinates, -1);
* tracker results (TrackEval's input): ``frame,id,x,y,w,h[,conf[,x,y,z]]``.

Boxes are left, top, width, height in pixels; frames are 1-based. The files are parsed in one
vectorised pass; a bad file is reported by its FIRST bad line, as one line
``<file>:<line>: <what is wrong>; <what to do>`` (:class:`MOTFileError`): a wrong number of
values, a value that is not a number (or is NaN / infinite), a frame or id that is not a whole
number, and, given the :class:`~reid.tracking.sequences.Sequence`, a frame outside 1..seqLength or
a box with w or h <= 0 or entirely outside the image. A box partly outside the image is normal in
MOT ground truth and kept as it is. An empty file has no rows.
"""
from __future__ import annotations

import io
import os
import re
from dataclasses import dataclass, fields
from typing import Iterable, List, Optional, Sequence as Seq, Tuple, Union

import numpy as np

from reid.utils.file_io import atomic_write_text
from reid.utils.path_kinds import check_file, check_folder
from reid.utils.text_files import brief

from .sequences import SECTION, Sequence

GT_COLUMNS = ("frame", "id", "x", "y", "w", "h", "consider", "class", "visibility")
DET_COLUMNS = ("frame", "id", "x", "y", "w", "h", "conf", "world_x", "world_y", "world_z")
RESULT_COLUMNS = DET_COLUMNS
#: What the writers write (np.savetxt formats); a caller may pass other precisions for the same columns.
GT_FORMAT = "%d,%d,%.2f,%.2f,%.2f,%.2f,%d,%d,%.4g"
DET_FORMAT = "%d,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%d,%d,%d"


class MOTFileError(ValueError):
    """A MOTChallenge file that cannot be read: ``<file>:<line>: <what is wrong>; <what to do>``."""


@dataclass(frozen=True)
class MOTRows:
    """Rows of one MOTChallenge text file, column arrays of equal length N."""

    frame: np.ndarray       # int64, 1-based frame numbers
    track_id: np.ndarray    # int64 (detections: -1)
    boxes: np.ndarray       # float64 [N, 4]: left, top, width, height in pixels (MOT convention)
    conf: np.ndarray        # float64: gt 'consider' flag (0/1); detections and results: score
    cls: np.ndarray         # int64: gt class (1 = pedestrian); -1 where the file has none
    visibility: np.ndarray  # float64 in [0, 1]; -1 where the file has none

    def __len__(self) -> int:
        return int(self.frame.shape[0])

    def select(self, mask_or_index: Union[np.ndarray, Seq[int], slice]) -> "MOTRows":
        """The rows a boolean mask, an index array or a slice picks, in that order."""
        return MOTRows(*(getattr(self, f.name)[mask_or_index] for f in fields(self)))

    def in_frame(self, frame: int) -> "MOTRows":
        """The rows of frame `frame`."""
        return self.select(self.frame == int(frame))

    @staticmethod
    def empty() -> "MOTRows":
        """No rows."""
        return MOTRows(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros((0, 4)), np.zeros(0),
                       np.zeros(0, np.int64), np.zeros(0))

    @staticmethod
    def concatenate(parts: Iterable["MOTRows"]) -> "MOTRows":
        """The rows of all `parts`, one after the other."""
        parts = [MOTRows.empty()] + list(parts)
        return MOTRows(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(MOTRows)))


# ------------------------------------------------------------------------------------------ reading

def _read_text(path: str, what: str) -> str:
    check_file(path, what, "name a MOTChallenge text file (one box per line).", missing_hint="check the path.")
    try:
        with open(path, "r", encoding="utf-8-sig") as f:
            return f.read()
    except UnicodeDecodeError:
        raise MOTFileError(f"{path}: not UTF-8 text; name a MOTChallenge text file (one box per line).") from None


def _columns_text(names: Seq[str], counts: Tuple[int, int]) -> str:
    low, high = counts
    expected = f"{low}" if low == high else f"{low} to {high}"
    return f"{expected} comma-separated values ({','.join(names[:high])})"


def _parse(path: str, what: str, names: Seq[str], counts: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
    """The values ``[N, C]`` (float64) of the non-blank lines of `path` and their line numbers."""
    text = _read_text(path, what)
    lines = text.splitlines()
    numbers = np.flatnonzero(np.char.str_len(np.char.strip(np.array(lines, dtype=str)))) if lines else np.zeros(0, int)
    if numbers.size == 0:
        return np.zeros((0, counts[1])), numbers
    kept = [lines[i] for i in numbers]
    numbers = numbers + 1  # 1-based line numbers
    if "," not in kept[0]:  # whitespace-separated: the same values, other separators
        kept = [",".join(line.split()) for line in kept]
    found = np.char.count(np.array(kept, dtype=str), ",") + 1
    low, high = counts
    bad = np.flatnonzero((found < low) | (found > high) | (found != found[0]))
    if bad.size:
        i = int(bad[0])
        if low <= found[i] <= high:
            raise MOTFileError(f"{path}:{numbers[i]}: {found[i]} values, unlike the {found[0]} of line {numbers[0]}; "
                               "write every line of a file with the same columns.")
        raise MOTFileError(f"{path}:{numbers[i]}: expected {_columns_text(names, counts)}, found {found[i]}; "
                           f"fix or remove the line (is this a {what}?).")
    try:
        values = np.loadtxt(io.StringIO("\n".join(kept)), delimiter=",", ndmin=2, dtype=np.float64)
    except ValueError as e:
        _raise_first_non_number(path, kept, numbers, names)
        # numpy refuses what Python's float() takes (e.g. '1_0'); its message gives the row
        row = re.search(r"at row (\d+), column (\d+)", str(e))
        line = f"{numbers[int(row.group(1))]}" if row else "?"
        raise MOTFileError(f"{path}:{line}: a value is not a plain number ({str(e).split(' at row')[0]}); write "
                           "decimal numbers.") from None
    _check_finite(path, values, numbers, names)
    return values, numbers


def _raise_first_non_number(path: str, lines: List[str], numbers: np.ndarray, names: Seq[str]) -> None:
    """The first field of `lines` that is not a number, as one MOTFileError (only on the error path)."""
    for line, number in zip(lines, numbers):
        for column, field in enumerate(line.split(",")):
            try:
                float(field)
            except ValueError:
                raise MOTFileError(f"{path}:{number}: column {column + 1} ({names[column]}) is "
                                   f"{brief(field.strip())}, not a number; write numbers only.") from None


def _check_finite(path: str, values: np.ndarray, numbers: np.ndarray, names: Seq[str]) -> None:
    bad = ~np.isfinite(values)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        raise MOTFileError(f"{path}:{numbers[row]}: column {column + 1} ({names[column]}) is {values[row, column]}; "
                           "write a finite number.")


def _first_problem(path: str, numbers: np.ndarray, checks: Seq[Tuple[np.ndarray, object]]) -> None:
    """Raise the problem of the earliest line any check flags; `checks` are ``(bad mask, message(i))``."""
    first: Optional[Tuple[int, int]] = None
    for k, (mask, _) in enumerate(checks):
        if mask.any():
            row = int(np.argmax(mask))
            if first is None or row < first[0]:
                first = (row, k)
    if first is not None:
        row, k = first
        raise MOTFileError(f"{path}:{numbers[row]}: {checks[k][1](row)}")


def _whole(values: np.ndarray) -> np.ndarray:
    return values != np.round(values)


def _rows(path: str, values: np.ndarray, numbers: np.ndarray, sequence: Optional[Sequence], has_ids: bool,
          kind: str, more_checks: Seq[Tuple[np.ndarray, object]] = (), inside: bool = True) -> MOTRows:
    """Check the common columns (frame, id, box) of parsed `values` and `more_checks` (the earliest
    line any check flags is reported), and make the rows."""
    frame, ids, boxes = values[:, 0], values[:, 1], values[:, 2:6]
    checks = [
        (_whole(frame), lambda i: f"frame {frame[i]:g} is not a whole number; frames are numbered 1, 2, ..."),
        (_whole(ids), lambda i: f"id {ids[i]:g} is not a whole number; write the {kind} id as an integer."),
        ((boxes[:, 2] <= 0) | (boxes[:, 3] <= 0),
         lambda i: f"box width/height {boxes[i, 2]:g}/{boxes[i, 3]:g} must be > 0; fix or remove the line."),
    ]
    if sequence is None:
        checks.append((frame < 1, lambda i: f"frame {frame[i]:g} is below 1; frames are numbered from 1."))
    else:
        checks.append(((frame < 1) | (frame > sequence.length),
                       lambda i: f"frame {frame[i]:g} is outside 1..{sequence.length} (seqLength of sequence "
                                 f"{sequence.name}); fix the line or seqinfo.ini."))
        x, y, w, h = boxes.T
        outside = (x >= sequence.width) | (y >= sequence.height) | (x + w <= 0) | (y + h <= 0)
        checks.append((outside & inside, lambda i: f"box x,y,w,h = {x[i]:g},{y[i]:g},{w[i]:g},{h[i]:g} lies entirely outside "
                                          f"the {sequence.width}x{sequence.height} image of sequence {sequence.name}; "
                                          "fix or remove the line."))
    if not has_ids:
        checks = checks[:1] + checks[2:]
    _first_problem(path, numbers, [*checks, *more_checks])
    n = len(frame)
    return MOTRows(frame.astype(np.int64), ids.astype(np.int64), boxes.copy(), np.ones(n), np.full(n, -1, np.int64),
                   np.full(n, -1.0))


def _repeated(frame: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Rows whose (frame, id) an earlier row already has: one box per track and frame."""
    order = np.lexsort((ids, frame))
    same = (frame[order][1:] == frame[order][:-1]) & (ids[order][1:] == ids[order][:-1])
    flags = np.zeros(len(frame), bool)
    flags[order[1:][same]] = True
    return flags


def read_gt(path: str, sequence: Optional[Sequence] = None) -> MOTRows:
    """Ground truth ``frame,id,x,y,w,h,consider,class,visibility`` (9 columns, MOT16/17/20).

    `sequence` checks frames and boxes against it (see the module docstring)."""
    values, numbers = _parse(path, "gt.txt", GT_COLUMNS, (9, 9))
    cls, vis = values[:, 7], values[:, 8]
    rows = _rows(path, values, numbers, sequence, True, "track", [
        (_whole(cls), lambda i: f"class {cls[i]:g} is not a whole number; MOTChallenge classes are integers "
                                "(1 = pedestrian)."),
        ((vis < 0) | (vis > 1), lambda i: f"visibility {vis[i]:g} is outside [0, 1]; write the visible fraction."),
        (_repeated(values[:, 0], values[:, 1]), lambda i: f"track {values[i, 1]:g} has a second box in frame "
                                                          f"{values[i, 0]:g}; keep one box per track and frame."),
    ])
    return MOTRows(rows.frame, rows.track_id, rows.boxes, values[:, 6].copy(), cls.astype(np.int64), vis.copy())


def read_detections(path: str, sequence: Optional[Sequence] = None) -> MOTRows:
    """Detections ``frame,-1,x,y,w,h,conf`` (7 columns, or 10 with world coordinates); ids as written."""
    values, numbers = _parse(path, "det.txt", DET_COLUMNS, (7, 10))
    rows = _rows(path, values, numbers, sequence, False, "detection")
    ids = np.where(_whole(values[:, 1]), -1, values[:, 1]).astype(np.int64)  # -1 in MOTChallenge files
    return MOTRows(rows.frame, ids, rows.boxes, values[:, 6].copy(), rows.cls, rows.visibility)


def read_results(path: str, sequence: Optional[Sequence] = None) -> MOTRows:
    """A tracker's results ``frame,id,x,y,w,h[,conf[,x,y,z]]`` (6 to 10 columns); conf 1 where absent."""
    values, numbers = _parse(path, "Tracker result file", RESULT_COLUMNS, (6, 10))
    # a tracker's prediction may run past the image edge for a frame or two: kept, as TrackEval keeps it
    rows = _rows(path, values, numbers, sequence, True, "track", inside=False, more_checks=[
        (values[:, 1] < 0, lambda i: f"track id {values[i, 1]:g} is negative; a tracker's result gives each track an "
                                     "id >= 0."),
        (_repeated(values[:, 0], values[:, 1]), lambda i: f"track {values[i, 1]:g} has a second box in frame "
                                                          f"{values[i, 0]:g}; keep one box per track and frame."),
    ])
    conf = values[:, 6].copy() if values.shape[1] > 6 else np.ones(len(rows))
    return MOTRows(rows.frame, rows.track_id, rows.boxes, conf, rows.cls, rows.visibility)


def result_files(sequences: Seq[Sequence], folder: str) -> List[str]:
    """The tracker result file of each sequence in `folder`, TrackEval's layout: one
    ``<sequence name>.txt`` per sequence. One line naming the file when the folder is not one, a
    sequence has no file, or a ``.txt`` file names no sequence (results of other sequences, or a
    misspelt name, would silently be left out)."""
    check_folder(folder, "Tracks folder", "name a folder of <sequence name>.txt tracker result files.",
                 missing_hint="check the path.")
    names = {s.name for s in sequences}
    strays = sorted(f for f in os.listdir(folder) if f.endswith(".txt") and f[:-4] not in names)
    if strays:
        raise ValueError(f"{os.path.join(folder, strays[0])}: no sequence {strays[0][:-4]!r} among the sequences "
                         f"({', '.join(sorted(names))}); remove the file or add its sequence.")
    files = [os.path.join(folder, f"{s.name}.txt") for s in sequences]
    missing = [p for p in files if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"{missing[0]}: no tracker result file for sequence "
                                f"{os.path.basename(missing[0])[:-4]} ({len(missing)} of {len(sequences)} missing); "
                                "name a folder with one <sequence name>.txt per sequence.")
    return files


# ------------------------------------------------------------------------------------------ writing

def _sorted(rows: MOTRows) -> MOTRows:
    return rows.select(np.lexsort((rows.track_id, rows.frame)))


def _write(path: str, columns: List[np.ndarray], fmt: str) -> str:
    table = np.column_stack(columns) if columns[0].size else np.zeros((0, len(columns)))
    buffer = io.StringIO()
    np.savetxt(buffer, table, fmt=fmt, delimiter=",")
    atomic_write_text(path, buffer.getvalue())
    return path


def write_results(path: str, rows: MOTRows) -> str:
    """Write `rows` as a tracker result file (TrackEval's input): ``frame,id,x,y,w,h,conf,-1,-1,-1``,
    sorted by (frame, id), 2 decimals; atomic. Returns `path`."""
    rows = _sorted(rows)
    minus = np.full(len(rows), -1.0)
    return _write(path, [rows.frame, rows.track_id, *rows.boxes.T, rows.conf, minus, minus, minus], DET_FORMAT)


def write_gt(path: str, rows: MOTRows, fmt: str = GT_FORMAT) -> str:
    """Write `rows` as MOTChallenge ``gt.txt`` (9 columns, as `fmt` formats them), sorted by (frame, id);
    atomic. Returns `path`."""
    rows = _sorted(rows)
    return _write(path, [rows.frame, rows.track_id, *rows.boxes.T, rows.conf, rows.cls, rows.visibility], fmt)


def write_detections(path: str, rows: MOTRows, fmt: str = DET_FORMAT) -> str:
    """Write `rows` as ``det.txt``: ``frame,-1,x,y,w,h,conf,-1,-1,-1`` (as `fmt` formats them), sorted by
    frame; atomic. Returns `path`."""
    rows = rows.select(np.argsort(rows.frame, kind="stable"))
    minus = np.full(len(rows), -1.0)
    return _write(path, [rows.frame, minus, *rows.boxes.T, rows.conf, minus, minus, minus], fmt)


def write_seqinfo(path: str, name: str, frame_rate: float, length: int, width: int, height: int,
                  camera: Optional[int] = None, scene: Optional[str] = None) -> str:
    """Write a ``seqinfo.ini`` that reid.tracking.sequences reads (frames in ``img1/`` as ``.jpg``;
    `camera` and `scene` are ours, left out when None); atomic. Returns `path`."""
    keys = {"name": name, "imDir": "img1", "frameRate": f"{frame_rate:g}", "seqLength": length, "imWidth": width,
            "imHeight": height, "imExt": ".jpg", "camera": camera, "scene": scene}
    atomic_write_text(path, f"[{SECTION}]\n" + "".join(f"{k}={v}\n" for k, v in keys.items() if v is not None))
    return path


__all__ = ["DET_COLUMNS", "DET_FORMAT", "GT_COLUMNS", "GT_FORMAT", "MOTFileError", "MOTRows", "RESULT_COLUMNS",
           "read_detections", "read_gt", "read_results", "result_files", "write_detections", "write_gt",
           "write_results", "write_seqinfo"]
