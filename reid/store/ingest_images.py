"""Ingest images: a folder of crops whose names carry camera and time, or a saved gallery.

Each image is one tracklet with one sighting (box ``0, 0, width, height``: the whole crop).

* :class:`CropFolderSource`: every image under the folder (recursive, sorted; reid.data.sources), its
  camera and time from its name by :data:`DEFAULT_NAME_PATTERN` (``c<camera>_<time>[_<anything>].<ext>``,
  the time in seconds since 1970 or compact ISO-8601 UTC, ``c3_20261128T140501.250Z_0007.jpg``) or a
  pattern with the named groups ``camera`` and ``time``; features by the model.
* :class:`GallerySource`: a gallery of tools/extract.py (reid.search.load_gallery): its features as they
  are (no model runs), its cameras (``camids``, required), the time from each image's name when the
  pattern matches it, else the given start time; the crops read from its paths.

Every name is checked before anything is written (a name the pattern does not fit, a camera that is
not a number or not in 0..2**31-1, a time that is not one: one line naming the file). An image that
cannot be read stops the ingest with one line naming it: the batches written before it are kept, and
the same command run again after the file is replaced or removed goes on from there (a skipped image
would silently be a person missing from the store).

Keys: ``crop:<name>:<path within the folder>`` and ``gallery:<name>:<path as the gallery holds it>``
(name: ``--source-name``, by default the folder's or the gallery file's name); a sighting's key is its
tracklet's with ``:0``.
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from reid.data.image_io import CorruptImageError, read_image
from reid.data.sources import images_in_folder
from reid.utils.safe_regex import compile_bounded, search_names

from .crops import encode_crop
from .ingest import IngestSource, Planned, check_unique, source_key
from .records import INT32_MAX, NewSighting, NewTracklet
from .times import parse_time

#: Names like ``c3_1764338701.25_0007.jpg`` or ``c3_20261128T140501.250Z.png``: camera 3 at that time.
DEFAULT_NAME_PATTERN = r"^c(?P<camera>\d+)_(?P<time>\d+(?:\.\d+)?|\d{8}T\d{6}(?:\.\d+)?Z?)(?:_[^/\\]*)?\.\w+$"
_JPEG = b"\xff\xd8\xff"


class NamePattern:
    """A pattern of file names with the named groups ``camera`` and ``time`` (bounded matching:
    reid.utils.safe_regex), applied to a file's base name."""

    def __init__(self, pattern: Optional[str] = None, flag: str = "--name-pattern") -> None:
        self.flag = flag
        self.regex = compile_bounded(pattern or DEFAULT_NAME_PATTERN, flag, DEFAULT_NAME_PATTERN)
        missing = [g for g in ("camera", "time") if g not in self.regex.groupindex]
        if missing:
            raise ValueError(f"{flag} {self.regex.pattern!r} has no named group {missing[0]!r}; name the parts as in "
                             f"{DEFAULT_NAME_PATTERN!r}.")

    def match(self, paths: Sequence[str]) -> List[Optional[Tuple[int, float]]]:
        """``(camera, time)`` of each path's base name, None where the pattern does not fit it; one line
        naming the file whose camera or time is not one."""
        names = [os.path.basename(p) for p in paths]
        found = search_names(self.regex, names, self.flag)
        cam, tim = self.regex.groupindex["camera"] - 1, self.regex.groupindex["time"] - 1
        out: List[Optional[Tuple[int, float]]] = []
        for path, groups in zip(paths, found):
            if groups is None or groups[cam] is None or groups[tim] is None:
                out.append(None)
                continue
            try:
                camera = int(groups[cam])
            except ValueError:
                raise ValueError(f"{path}: camera {groups[cam][:80]!r} ({self.flag}) is not a whole number; rename "
                                 "the file or change the pattern.") from None
            if not 0 <= camera <= INT32_MAX:  # PostgreSQL's INTEGER (records.py): say so before writing
                raise ValueError(f"{path}: camera {camera} ({self.flag}) is not in 0..{INT32_MAX}; rename the file or "
                                 "change the pattern.")
            out.append((camera, parse_time(groups[tim], f"{path}: the time")))
        return out


def read_crop(path: str, what: str) -> Tuple[np.ndarray, bytes]:
    """RGB pixels of the image `path` and the JPEG bytes the store keeps of it (the file's own bytes
    when it is a JPEG: no second compression); one line naming the file when it cannot be read."""
    try:
        rgb = read_image(path)
    except CorruptImageError as e:
        why = e.why or "the file does not exist or is not a file"
        raise CorruptImageError(f"{what} {path}: {why}; replace or remove it, then run the same command again "
                                "(what was ingested before it is kept and skipped).") from None
    with open(path, "rb") as f:
        data = f.read()
    return rgb, data if data[:3] == _JPEG else encode_crop(np.ascontiguousarray(rgb[:, :, ::-1]))


def _sighting(key: str, camera: int, time: float, rgb: np.ndarray, data: bytes, feature: np.ndarray) -> NewTracklet:
    box = (0.0, 0.0, float(rgb.shape[1]), float(rgb.shape[0]))
    return NewTracklet(source=key, camera=int(camera),
                       sightings=[NewSighting(source=source_key(key, 0), time=float(time), box=box, crop=data,
                                              feature=np.asarray(feature, np.float32))])


class CropFolderSource(IngestSource):
    """The crops under `folder` (module docstring), features by `model` (an AppearanceModel; it may be set
    after planning, before building)."""

    kind = "crops"

    def __init__(self, folder: str, model: Any = None, name: Optional[str] = None,
                 pattern: Optional[str] = None) -> None:
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"--crops {folder}: not a folder; name the folder of crop images.")
        self.folder, self.model = folder, model
        self.name = name or os.path.basename(os.path.abspath(folder))
        self.pattern = NamePattern(pattern)

    def plan(self) -> List[Planned]:
        paths = images_in_folder(self.folder)
        found = self.pattern.match(paths)
        bad = [p for p, f in zip(paths, found) if f is None]
        if bad:
            raise ValueError(f"{bad[0]}: the name does not say camera and time ({len(bad)} of {len(paths)} names, "
                             f"--name-pattern {self.pattern.regex.pattern!r}); rename the files (c<camera>_<time>_"
                             "<anything>.jpg), or give a --name-pattern with the groups camera and time.")
        planned = [Planned(source_key("crop", self.name, os.path.relpath(p, self.folder).replace(os.sep, "/")),
                           time, (p, camera)) for p, (camera, time) in zip(paths, found)]
        check_unique(planned, f"--crops {self.folder}")
        return sorted(planned, key=lambda p: (p.start, p.key))

    def build(self, planned: Sequence[Planned]) -> List[NewTracklet]:
        if self.model is None:
            raise RuntimeError("CropFolderSource.build needs its model; set .model after planning.")
        read = [read_crop(p.item[0], "--crops: image") for p in planned]
        feats = self.model.embed([rgb for rgb, _ in read])
        return [_sighting(p.key, p.item[1], p.start, rgb, data, f)
                for p, (rgb, data), f in zip(planned, read, feats)]


class GallerySource(IngestSource):
    """The rows of a saved gallery (module docstring)."""

    kind = "gallery"

    def __init__(self, gallery: Any, path: str, name: Optional[str] = None, pattern: Optional[str] = None,
                 start_time: float = 0.0) -> None:
        if gallery.camids is None:
            raise ValueError(f"--gallery {path} records no cameras (camids); a store files every sighting under its "
                             "camera: extract the gallery from a list file with 'path pid camid' lines, or ingest the "
                             "images with --crops and camera and time in their names.")
        self.gallery, self.path = gallery, path
        self.name = name or os.path.splitext(os.path.basename(path))[0]
        self.pattern, self.start_time = NamePattern(pattern), float(start_time)

    def plan(self) -> List[Planned]:
        camids = np.asarray(self.gallery.camids)
        bad = np.flatnonzero((camids < 0) | (camids > INT32_MAX))
        if len(bad):  # before anything is written, as a bad name
            raise ValueError(f"--gallery {self.path}: {self.gallery.paths[bad[0]]} has camera {camids[bad[0]]}, not "
                             f"in 0..{INT32_MAX} ({len(bad)} images); extract the gallery with camera numbers in that "
                             "range.")
        found = self.pattern.match(self.gallery.paths)
        planned = [Planned(source_key("gallery", self.name, p), f[1] if f else self.start_time, i)
                   for i, (p, f) in enumerate(zip(self.gallery.paths, found))]
        check_unique(planned, f"--gallery {self.path}")
        return sorted(planned, key=lambda p: (p.start, p.item))

    def build(self, planned: Sequence[Planned]) -> List[NewTracklet]:
        out = []
        for p in planned:
            rgb, data = read_crop(self.gallery.paths[p.item], f"--gallery {self.path}: image")
            out.append(_sighting(p.key, int(self.gallery.camids[p.item]), p.start, rgb, data,
                                 self.gallery.feats[p.item]))
        return out


__all__ = ["CropFolderSource", "DEFAULT_NAME_PATTERN", "GallerySource", "NamePattern", "read_crop"]
