"""MOTChallenge sequences: a folder with ``seqinfo.ini``, its frames (``img1/000001.jpg`` ...), and
optionally ``gt/gt.txt`` and ``det/det.txt``.

``seqinfo.ini`` (MOTChallenge writes the keys in camelCase; they are read case-insensitively)::

    [Sequence]
    name=MOT17-02        ; optional, default: the folder's name
    imDir=img1           ; optional, default img1
    frameRate=30
    seqLength=600
    imWidth=1920
    imHeight=1080
    imExt=.jpg           ; optional, default .jpg
    camera=2             ; ours, optional: the camera of a multi-camera scene
    scene=lobby          ; ours, optional: the scene whose cameras share global track ids

Without ``camera``, a sequence's camera is its 1-based index among the sequence folders next to it
(sorted by folder name); without ``scene``, its scene is the name of the folder it lies in.
Every problem (no seqinfo.ini, a missing key, a value that is not a number, no image folder, a
missing frame) is one line naming the file and what to do.
"""
from __future__ import annotations

import configparser
import math
import os
from dataclasses import dataclass
from typing import Dict, List, Optional

from reid.utils.path_kinds import check_folder, file_problem, is_missing
from reid.utils.text_files import brief

SEQINFO = "seqinfo.ini"
SECTION = "Sequence"
#: Keys every seqinfo.ini needs (MOTChallenge's spelling; read case-insensitively).
REQUIRED_KEYS = ("frameRate", "seqLength", "imWidth", "imHeight")
MAX_SIDE = 16384  # pixels: imWidth / imHeight beyond this are typing errors

LAYOUT = ("a sequence folder holds seqinfo.ini and img1/000001.jpg ...; DIR is one sequence, a folder of "
          "sequences (DIR/MOT17-02/seqinfo.ini), or a folder of such folders (DIR/train/MOT17-02/seqinfo.ini)")


class SequenceError(ValueError):
    """A sequence folder that cannot be used; the message names the file and what to do (one line)."""


@dataclass(frozen=True)
class Sequence:
    """One MOTChallenge sequence (see the module docstring)."""

    name: str
    root: str
    frame_rate: float
    length: int
    width: int
    height: int
    image_dir: str
    image_ext: str
    camera: int
    scene: str

    def frame_path(self, frame: int) -> str:
        """Path of frame `frame` (1-based): ``image_dir/000001<ext>``."""
        return os.path.join(self.image_dir, f"{int(frame):06d}{self.image_ext}")

    @property
    def gt_path(self) -> Optional[str]:
        """``root/gt/gt.txt`` when it exists (None when nothing is there; one line when something
        other than a file is: a folder, a FIFO or a device would be read as no ground truth)."""
        return _optional_file(os.path.join(self.root, "gt", "gt.txt"))

    @property
    def det_path(self) -> Optional[str]:
        """``root/det/det.txt`` when it exists (as :attr:`gt_path`)."""
        return _optional_file(os.path.join(self.root, "det", "det.txt"))


def _optional_file(path: str) -> Optional[str]:
    """`path` when it is a regular file, None when nothing is there, else a one-line SequenceError."""
    problem = file_problem(path)
    if problem is None:
        return path
    if is_missing(problem) and not os.path.islink(path):
        return None
    raise SequenceError(f"{path} {problem}; put the MOTChallenge text file there, or remove it.")


def is_sequence_folder(folder: str) -> bool:
    """Whether `folder` holds a seqinfo.ini file."""
    return os.path.isfile(os.path.join(folder, SEQINFO))


def read_seqinfo(folder: str) -> Dict[str, str]:
    """The keys of ``folder/seqinfo.ini``'s [Sequence] section, lower-cased, values stripped."""
    path = os.path.join(folder, SEQINFO)
    problem = file_problem(path)
    if problem is not None:
        raise SequenceError(f"{path}: {problem}; a MOTChallenge sequence folder needs a seqinfo.ini ({LAYOUT}).")
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    try:
        with open(path, "r", encoding="utf-8-sig") as f:
            parser.read_file(f)
    except (configparser.Error, UnicodeDecodeError) as e:
        what = " ".join(str(e).split())
        raise SequenceError(f"{path}: not a readable INI file ({brief(what)}); write a [Sequence] section with "
                            f"{', '.join(REQUIRED_KEYS)}.") from None
    if not parser.has_section(SECTION):
        raise SequenceError(f"{path}: no [{SECTION}] section; MOTChallenge's seqinfo.ini starts with [{SECTION}] "
                            f"and sets {', '.join(REQUIRED_KEYS)}.")
    return {key.lower(): value.strip() for key, value in parser.items(SECTION)}


def _number(info: Dict[str, str], key: str, path: str, kind: type):
    """seqinfo.ini's value of `key` as a positive `kind` (int or float); one line naming it otherwise."""
    text = info.get(key.lower())
    if text is None or text == "":
        raise SequenceError(f"{path}: [{SECTION}] has no {key}; add '{key}=<number>' (MOTChallenge's seqinfo.ini "
                            f"sets {', '.join(REQUIRED_KEYS)}).")
    try:
        value = kind(float(text)) if kind is float else int(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise SequenceError(f"{path}: {key}={brief(text)} is not {what}; write e.g. '{key}=30'.") from None
    if not (math.isfinite(value) and value > 0):
        raise SequenceError(f"{path}: {key}={brief(text)} must be a positive number; correct it.")
    return value


def _default_camera(folder: str) -> int:
    """1-based index of `folder` among the sequence folders next to it, sorted by name."""
    parent = os.path.dirname(folder)
    siblings = sorted(e.name for e in os.scandir(parent) if e.is_dir() and is_sequence_folder(e.path))
    name = os.path.basename(folder)
    return siblings.index(name) + 1 if name in siblings else 1


def _check_frames(image_dir: str, ext: str, length: int, ini: str) -> None:
    names = {e.name for e in os.scandir(image_dir) if e.name.endswith(ext)}
    # Only names that can be frames are counted: a seqLength of 10^11 costs nothing before it is refused.
    present = sum(1 for n in names if len(n) == 6 + len(ext) and n[:6].isdigit() and 1 <= int(n[:6]) <= length)
    if present < length:
        first = next(i for i in range(1, present + 2) if f"{i:06d}{ext}" not in names)
        raise SequenceError(
            f"{image_dir}: {length - present} of the {length} frames (seqLength in {ini}) are missing, the first "
            f"{os.path.join(image_dir, f'{first:06d}{ext}')} (frame {first}; {len(names)} {ext} files found); "
            "add the frames or correct seqLength / imExt."
        )


def read_sequence(folder: str) -> Sequence:
    """The :class:`Sequence` of `folder`, checked: seqinfo.ini's keys, the image folder, every frame."""
    folder = os.path.abspath(check_folder(folder, "Sequence folder", LAYOUT, error=SequenceError,
                                          missing_error=SequenceError))
    ini = os.path.join(folder, SEQINFO)
    info = read_seqinfo(folder)
    frame_rate = _number(info, "frameRate", ini, float)
    length = _number(info, "seqLength", ini, int)
    width = _number(info, "imWidth", ini, int)
    height = _number(info, "imHeight", ini, int)
    for key, value in (("imWidth", width), ("imHeight", height)):
        if value > MAX_SIDE:  # a frame buffer of that size would be allocated before the first frame is read
            raise SequenceError(f"{ini}: {key}={value} is larger than any camera's frames (at most {MAX_SIDE}); "
                                "write the frames' size.")
    ext = info.get("imext") or ".jpg"
    ext = ext if ext.startswith(".") else "." + ext
    im_dir = info.get("imdir") or "img1"
    if os.path.isabs(im_dir) or os.path.normpath(im_dir).split(os.sep)[0] == os.pardir:
        raise SequenceError(f"{ini}: imDir={brief(im_dir)} leads outside the sequence folder, so its frames would be "
                            "another folder's; MOTChallenge's imDir names a folder inside it (img1): move the frames "
                            "there, or link them in (ln -s).")
    image_dir = os.path.join(folder, im_dir)
    if not os.path.isdir(image_dir):
        raise SequenceError(f"{ini}: the image folder {image_dir} (imDir) does not exist; put the frames there "
                            f"(000001{ext} ...) or set imDir in seqinfo.ini.")
    _check_frames(image_dir, ext, length, ini)
    camera = _number(info, "camera", ini, int) if "camera" in info else _default_camera(folder)
    sequence = Sequence(name=info.get("name") or os.path.basename(folder), root=folder, frame_rate=frame_rate,
                        length=length, width=width, height=height, image_dir=image_dir, image_ext=ext, camera=camera,
                        scene=info.get("scene") or os.path.basename(os.path.dirname(folder)))
    sequence.gt_path, sequence.det_path  # noqa: B018  a gt/det that is no file is refused now, before any work
    return sequence


def identity_scope(sequence: Sequence) -> str:
    """What a track id is unique within: the declared scene (global ids across its cameras), else the sequence."""
    return f"scene:{sequence.scene}" if "scene" in read_seqinfo(sequence.root) else f"sequence:{sequence.root}"


def _looks_like_sequence(folder: str) -> bool:
    """A folder with MOTChallenge's img1/, det/det.txt or gt/gt.txt: a sequence, if it had a seqinfo.ini."""
    return any(os.path.exists(os.path.join(folder, p)) for p in ("img1", os.path.join("det", "det.txt"),
                                                                  os.path.join("gt", "gt.txt")))


def _sequence_folders(folder: str) -> List[str]:
    found = sorted(e.path for e in os.scandir(folder) if e.is_dir() and is_sequence_folder(e.path))
    if found:  # a sequence beside them without seqinfo.ini would be left out without a word
        lost = sorted(e.path for e in os.scandir(folder)
                      if e.is_dir() and not is_sequence_folder(e.path) and _looks_like_sequence(e.path))
        if lost:
            raise SequenceError(f"{lost[0]} looks like a sequence (img1/, det/ or gt/) but has no {SEQINFO}, and the "
                                f"sequences beside it have one; add its {SEQINFO} (frameRate, seqLength, imWidth, "
                                "imHeight), or move the folder out.")
    return found


def find_sequences(folder: str) -> List[Sequence]:
    """Every sequence in `folder`: `folder` itself, its sub-folders, or their sub-folders (MOT17's
    ``train/`` and ``test/``), the first level that holds any; sorted by name."""
    check_folder(folder, "Sequences folder", LAYOUT, error=SequenceError, missing_error=SequenceError)
    if is_sequence_folder(folder):
        return [read_sequence(folder)]
    found = _sequence_folders(folder)
    if not found:
        subs = sorted(e.path for e in os.scandir(folder) if e.is_dir())
        found = [path for sub in subs for path in _sequence_folders(sub)]
    if not found:
        raise SequenceError(f"{folder}: no MOTChallenge sequence found ({LAYOUT}).")
    sequences = sorted((read_sequence(path) for path in found), key=lambda s: (s.name, s.root))
    for a, b in zip(sequences, sequences[1:]):
        if a.name == b.name:  # result files are named after sequences: two would write one file
            raise SequenceError(f"sequences {a.root} and {b.root} are both named {a.name!r}, and their result files "
                                "would be one file; give them distinct names (seqinfo.ini name=), or pass them apart.")
    return sequences


__all__ = ["LAYOUT", "SEQINFO", "Sequence", "SequenceError", "find_sequences", "identity_scope", "is_sequence_folder", "read_seqinfo",
           "read_sequence"]
