"""Ingest tracks: the result files of tools/track.py or tools/link_cameras.py with their sequences.

Each sequence's tracks (``<sequence name>.txt`` in the results folder: ``<output>/<model>/`` of
track.py, ``<output>/tracks/`` of link_cameras.py; or ``gt``, the ground truth with camera-local
ids, as link_cameras.py reads it) become one tracklet per track id. Its sightings are the crops the
linker pools (:func:`reid.tracking.tracklets.select_crops`: up to ``crops_per_tracklet`` spread over
its time, the best :func:`~reid.tracking.tracklets.crop_quality` of each stretch), each with its
quality as its weight in the tracklet's feature. A sighting's time is ``start_time + (frame - 1) /
frame rate``; its camera is the sequence's (seqinfo.ini ``camera=``). A tracklet's time span is
its track's first to last frame (all its rows, as the offline linker's), not its sightings'.

Boxes with no pixel inside the image (a tracker's prediction run off the edge) are never chosen; a
track with no other box has no crop and is left out.

Keys: ``track:<name>:<sequence>:<track id>`` and ``...:<frame>`` per sighting, where the name is the
caller's (``--source-name``; by default the results folder's own and its parent's name), so two
recordings with sequences of one name stay apart.
"""
from __future__ import annotations

import os
from typing import Dict, List, Optional, Sequence as Seq

import numpy as np

from reid.tracking.appearance import AppearanceModel
from reid.tracking.frames import clip_boxes, frame_crops
from reid.tracking.mot_files import MOTRows
from reid.tracking.sequences import Sequence
from reid.tracking.tracklets import DEFAULT_CROPS, crop_quality, select_crops

from .crops import encode_crop
from .ingest import IngestSource, Planned, check_unique, source_key
from .records import NewSighting, NewTracklet


def default_track_name(tracks: str, sequences: str) -> str:
    """The name that keeps one results folder's keys apart from another's: ``<parent>/<folder>`` of the
    results folder (``track/demo``, ``links/tracks``), or ``gt/<folder of the sequences>`` for ``gt``."""
    if tracks == "gt":
        return "gt/" + os.path.basename(os.path.abspath(sequences))
    path = os.path.abspath(tracks)
    return f"{os.path.basename(os.path.dirname(path))}/{os.path.basename(path)}"


class TrackSource(IngestSource):
    """The tracks `rows` of `sequences` (row for row, e.g. :func:`reid.tracking.cross_camera.read_camera_tracks`)
    as tracklets, features by `model` (module docstring; it may be set after planning, before building)."""

    kind = "tracks"

    def __init__(self, sequences: Seq[Sequence], rows: Seq[MOTRows], model: Optional[AppearanceModel], name: str,
                 start_time: float = 0.0, crops_per_tracklet: int = DEFAULT_CROPS) -> None:
        if len(sequences) != len(rows):
            raise ValueError(f"{len(sequences)} sequences but {len(rows)} track files; give one per sequence.")
        self.sequences, self.rows, self.model = list(sequences), list(rows), model
        self.name, self.start_time, self.k = name, float(start_time), int(crops_per_tracklet)

    def time(self, seq: Sequence, frame: np.ndarray) -> np.ndarray:
        """Seconds since 1970 of `frame` (1-based) of `seq`."""
        return self.start_time + (np.asarray(frame, np.float64) - 1.0) / float(seq.frame_rate)

    def plan(self) -> List[Planned]:
        planned: List[Planned] = []
        for index, (seq, rows) in enumerate(zip(self.sequences, self.rows)):
            # each track's span: its first and last frame over all its rows (as the offline linker's
            # tracklet_features), not over the few crops kept as sightings; online linking compares spans
            span_ids, span_track = np.unique(rows.track_id, return_inverse=True)
            first = np.full(len(span_ids), np.iinfo(np.int64).max)
            last = np.full(len(span_ids), np.iinfo(np.int64).min)
            np.minimum.at(first, span_track.reshape(-1), rows.frame)
            np.maximum.at(last, span_track.reshape(-1), rows.frame)
            pixels = clip_boxes(rows.boxes, seq.width, seq.height)
            inside = np.flatnonzero((pixels[:, 2] > pixels[:, 0]) & (pixels[:, 3] > pixels[:, 1]))
            rows = rows.select(inside)
            if not len(rows):
                continue
            # quality of the boxes that can be cut; covering by boxes off the image does not count either
            quality = crop_quality(rows, seq.width, seq.height)
            ids, track = np.unique(rows.track_id, return_inverse=True)
            track = track.reshape(-1)
            chosen = select_crops(track, rows.frame, quality, self.k)
            span = np.searchsorted(span_ids, ids)  # every id left is among all rows' ids
            for t, tid in enumerate(ids):
                mine = chosen[track[chosen] == t]
                picked = {"sequence": index, "frame": rows.frame[mine], "box": rows.boxes[mine],
                          "quality": quality[mine], "first": int(first[span[t]]), "last": int(last[span[t]])}
                planned.append(Planned(source_key("track", self.name, seq.name, int(tid)),
                                       float(self.time(seq, picked["first"])), picked))
        check_unique(planned, "tracks")
        # arrival order: online linking sees tracklets as a live system would, by start time
        return sorted(planned, key=lambda p: (p.start, p.key))

    def build(self, planned: Seq[Planned]) -> List[NewTracklet]:
        if self.model is None:
            raise RuntimeError("TrackSource.build needs its model; set .model after planning.")
        crops: Dict[int, List[np.ndarray]] = {}
        for index in sorted({p.item["sequence"] for p in planned}):
            # each frame image is read once for all the crops of this batch in it
            mine = [(n, p) for n, p in enumerate(planned) if p.item["sequence"] == index]
            seq = self.sequences[index]
            frames = np.concatenate([p.item["frame"] for _, p in mine])
            boxes = np.concatenate([p.item["box"] for _, p in mine])
            owner = np.concatenate([np.full(len(p.item["frame"]), n) for n, p in mine])
            slot = np.concatenate([np.arange(len(p.item["frame"])) for _, p in mine])
            for n, p in mine:
                crops[n] = [None] * len(p.item["frame"])
            for _, rows, cut in frame_crops(seq, frames, clip_boxes(boxes, seq.width, seq.height)):
                for r, c in zip(rows, cut):
                    crops[int(owner[r])][int(slot[r])] = np.ascontiguousarray(c)
        flat = [c for n in range(len(planned)) for c in crops[n]]
        feats = self.model.embed([np.ascontiguousarray(c[:, :, ::-1]) for c in flat])  # BGR -> RGB, one call
        out, at = [], 0
        for n, p in enumerate(planned):
            seq, item = self.sequences[p.item["sequence"]], p.item
            times = self.time(seq, item["frame"])
            sightings = [NewSighting(source=source_key(p.key, int(f)), time=float(t), box=tuple(float(v) for v in b),
                                     crop=encode_crop(c), feature=feats[at + i], frame=int(f), quality=float(q))
                         for i, (f, t, b, c, q) in enumerate(zip(item["frame"], times, item["box"], crops[n],
                                                                  item["quality"]))]
            at += len(sightings)
            out.append(NewTracklet(source=p.key, camera=int(seq.camera), sightings=sightings, camera_name=seq.name,
                                   start_time=float(self.time(seq, item["first"])),
                                   end_time=float(self.time(seq, item["last"]))))
        return out


__all__ = ["TrackSource", "default_track_name"]
