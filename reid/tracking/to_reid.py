"""Tracking data -> re-ID data: crops of MOTChallenge boxes in the layouts the trainer reads.

With ground truth (:func:`gt_to_reid`): the boxes of ``gt/gt.txt`` that pass the filters
(:class:`CropSettings`: classes, the ``consider`` flag, visibility, height, every n-th frame) become
a Market-1501 folder: ``bounding_box_train/``, ``query/``, ``bounding_box_test/``, files
``{pid:04d}_c{camera}s1_{frame:06d}_00.jpg``. Identities are split between train and test (seeded,
disjoint); each test identity gets one query per camera (Market-1501's protocol), the rest of
its crops are its gallery. Person ids count from 1 (Market-1501's 0 means distractor). The same
items are listed in ``train.txt``, ``query.txt``, ``gallery.txt`` (``path pid camid``, the
``custom`` dataset), which also reads more than Market-1501's six cameras.

Identities: a track id names one person within its sequence; sequences whose seqinfo.ini name
the same ``scene`` are the cameras of one scene and share GLOBAL ids (one person, one pid in all
of them). Without that key every sequence has its own ids (MOT17's sequences are different
places: their id 1 are different people). The camera of a crop is its sequence's camera.

Without ground truth (:func:`tracks_to_crops`): a tracker's result file per sequence gives
tracklets; their crops go to ``crops/`` named ``{sequence}_c{camera}_t{track:06d}_f{frame:06d}.jpg``,
listed in ``crops.txt`` (``path camid``, the ``unlabelled`` dataset), with ``tracklets.csv``
(path, tracklet, sequence, camera, track id, frame). ``UDA.TRACKLET_REGEX`` :data:`TRACKLET_REGEX`
then keeps the crops of one tracklet in one cluster.

Crops: boxes partly outside the image are clipped to it (and the height filter applies to the
clipped box); every frame is read once for all its crops. The output folder is built aside and
renamed into place when complete, with ``summary.json`` (counts, identities, settings).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Callable, Dict, List, Sequence as Seq, Tuple

import numpy as np

from reid.utils.file_io import atomic_write_text, build_folder_atomically, check_output_folder

from .frames import clip_boxes, frame_crops
from .mot_files import MOTRows, read_gt, read_results, result_files
from .sequences import Sequence, SequenceError, identity_scope

Log = Callable[[str], None]

SPLITS = ("bounding_box_train", "query", "bounding_box_test")
LISTS = {"bounding_box_train": "train.txt", "query": "query.txt", "bounding_box_test": "gallery.txt"}
#: UDA.TRACKLET_REGEX for the crops of :func:`tracks_to_crops`: the sequence and track part of a name.
TRACKLET_REGEX = r"^(.+_t\d+)_f\d+"
#: Cameras the market1501 dataset reads (c1..c6); more need the custom lists.
MARKET_CAMERAS = 6
IMAGE_EXTS = (".jpg", ".png")


@dataclass(frozen=True)
class CropSettings:
    """Which boxes become crops, and how the identities are split."""

    classes: Tuple[int, ...] = (1,)   # gt classes kept (MOTChallenge: 1 = pedestrian)
    min_visibility: float = 0.3       # gt visibility at least this
    min_height: int = 32              # pixels, after clipping to the image
    frame_step: int = 5               # frames 1, 1 + step, 1 + 2 step, ...
    train_fraction: float = 0.5       # share of identities for training
    seed: int = 0                     # of the identity split and the query choice
    image_ext: str = ".jpg"           # crops' format: .jpg or .png (lossless)

    def check(self) -> "CropSettings":
        """Self, or one line naming the setting that cannot work."""
        if not self.classes:
            raise ValueError("classes: name at least one gt class to keep (MOTChallenge: 1 = pedestrian).")
        if not 0.0 <= self.min_visibility <= 1.0:
            raise ValueError(f"min visibility {self.min_visibility} must lie in [0, 1] (0.3 is usual).")
        if self.min_height < 1 or self.frame_step < 1:
            raise ValueError(f"min height {self.min_height} and frame step {self.frame_step} must be >= 1.")
        if not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"train fraction {self.train_fraction} must lie in (0, 1): both train and test need "
                             "identities.")
        if self.image_ext not in IMAGE_EXTS:
            raise ValueError(f"image format {self.image_ext!r} is not one of {', '.join(IMAGE_EXTS)}.")
        return self


def _kept(rows: MOTRows, sequence: Sequence, settings: CropSettings, gt: bool) -> Tuple[MOTRows, np.ndarray]:
    """The rows that pass the filters, and their clipped boxes."""
    pixels = clip_boxes(rows.boxes, sequence.width, sequence.height)
    keep = ((rows.frame - 1) % settings.frame_step == 0) & (pixels[:, 3] - pixels[:, 1] >= settings.min_height)
    keep &= pixels[:, 2] > pixels[:, 0]
    if gt:
        keep &= np.isin(rows.cls, settings.classes) & (rows.conf == 1) & (rows.visibility >= settings.min_visibility)
    return rows.select(keep), pixels[keep]


def write_crops(sequence: Sequence, frames: np.ndarray, pixels: np.ndarray, paths: Seq[str]) -> None:
    """Cut ``image[y0:y1, x0:x1]`` of each of `pixels` from frame `frames[i]` of `sequence` to `paths[i]`;
    each frame is read once for all its crops."""
    import cv2

    for _, rows, crops in frame_crops(sequence, frames, pixels):
        for i, crop in zip(rows, crops):
            if not cv2.imwrite(paths[i], crop):
                raise OSError(f"{paths[i]}: could not be written (cv2.imwrite failed); check the output folder.")


def _check_unique(names: List[str], owners: List[str], hint: str) -> None:
    seen: Dict[str, str] = {}
    for name, owner in zip(names, owners):
        if name in seen:
            raise ValueError(f"Two crops would both be named {name} (from {seen[name]} and {owner}); {hint}")
        seen[name] = owner


def _prepare_output(output: str) -> None:
    check_output_folder(output)
    if os.path.isdir(output) and os.listdir(output):
        raise FileExistsError(f"Output folder {output} exists and is not empty; name a new folder (or remove it).")
    if os.path.exists(output) and not os.path.isdir(output):
        raise FileExistsError(f"Output {output} is a file; name a folder to create.")
    if os.path.isdir(output):
        os.rmdir(output)  # empty: rebuilt as a whole below


def _split_identities(num: int, settings: CropSettings) -> np.ndarray:
    """Whether each of `num` identities trains (seeded); both sides get one at least when num >= 2."""
    if num < 2:
        raise ValueError(f"The ground truth has {num} identity after the filters; a train/test split needs two at "
                         "least: add sequences or loosen the filters (--min-visibility, --min-height, --frame-step).")
    num_train = min(max(int(round(settings.train_fraction * num)), 1), num - 1)
    trains = np.zeros(num, bool)
    trains[np.random.default_rng(settings.seed).permutation(num)[:num_train]] = True
    return trains


def gt_to_reid(sequences: Seq[Sequence], output: str, settings: CropSettings = CropSettings(),
               log: Log = print) -> Dict:
    """Crops of the ground truth of `sequences` as a Market-1501 folder `output` (see the module
    docstring); returns the summary also written to ``output/summary.json``."""
    settings.check()
    _prepare_output(output)
    missing = [s.root for s in sequences if s.gt_path is None]
    if missing:
        raise SequenceError(f"{missing[0]}: no gt/gt.txt ({len(missing)} of {len(sequences)} sequences lack one); "
                            "give --tracks DIR (a tracker's result files) to make unlabelled crops instead.")
    parts, pixels, seq_index, scopes = [], [], [], []
    for k, seq in enumerate(sequences):
        rows, pix = _kept(read_gt(seq.gt_path, seq), seq, settings, gt=True)
        parts.append(rows)
        pixels.append(pix)
        seq_index.append(np.full(len(rows), k))
        scopes.append(identity_scope(seq))
    rows, pix, seq_of = MOTRows.concatenate(parts), np.concatenate(pixels), np.concatenate(seq_index)
    scope_ids = np.unique(scopes, return_inverse=True)[1].reshape(-1)[seq_of] if len(rows) else seq_of
    keys, person = np.unique(np.stack([scope_ids, rows.track_id], axis=1), axis=0, return_inverse=True)
    person = person.reshape(-1)
    trains = _split_identities(len(keys), settings)
    # pids 1..T for training identities, T+1..N for test ones, each side in the order of the keys
    pid_of = np.empty(len(keys), np.int64)
    pid_of[trains] = np.arange(1, trains.sum() + 1)
    pid_of[~trains] = np.arange(trains.sum() + 1, len(keys) + 1)
    pid = pid_of[person]
    camera = np.array([s.camera for s in sequences], np.int64)[seq_of]
    split = np.where(trains[person], 0, 2)
    # one query per test identity and camera, chosen at random: the first of a seeded shuffle
    test = np.flatnonzero(split == 2)
    shuffled = test[np.random.default_rng(settings.seed + 1).permutation(len(test))]
    _, first = np.unique(np.stack([pid[shuffled], camera[shuffled]], axis=1), axis=0, return_index=True)
    split[shuffled[first]] = 1
    names = [f"{p:04d}_c{c}s1_{f:06d}_00{settings.image_ext}" for p, c, f in zip(pid, camera, rows.frame)]
    relative = [os.path.join(SPLITS[s], n) for s, n in zip(split, names)]
    _check_unique(relative, [sequences[k].root for k in seq_of],
                  "sequences of one scene must be different cameras: give each a distinct camera= in seqinfo.ini.")
    summary = _gt_summary(sequences, settings, rows, keys, trains, pid_of, scopes, seq_of, pid, camera, split)

    def build(folder: str) -> None:
        for sub in SPLITS:
            os.makedirs(os.path.join(folder, sub))
        paths = [os.path.join(folder, r) for r in relative]
        for k, seq in enumerate(sequences):
            mine = np.flatnonzero(seq_of == k)
            write_crops(seq, rows.frame[mine], pix[mine], [paths[i] for i in mine])
        for s, sub in enumerate(SPLITS):
            lines = [f"{relative[i]} {pid[i]} {camera[i] - 1}\n" for i in np.flatnonzero(split == s)]
            atomic_write_text(os.path.join(folder, LISTS[sub]), "".join(lines))
        atomic_write_text(os.path.join(folder, "summary.json"), json.dumps(summary, indent=2) + "\n")

    build_folder_atomically(output, build, "summary.json")
    _log_gt_summary(summary, output, log)
    return summary


def _gt_summary(sequences, settings, rows, keys, trains, pid_of, scopes, seq_of, pid, camera, split) -> Dict:
    counts = {}
    for s, sub in enumerate(SPLITS):
        mine = split == s
        counts[sub] = {"images": int(mine.sum()), "ids": int(len(np.unique(pid[mine])))}
    # a query counts under Market-1501's protocol when its identity has a gallery crop in another camera
    cameras_of: Dict[int, set] = {}
    for p, c in zip(pid[split == 2].tolist(), camera[split == 2].tolist()):
        cameras_of.setdefault(p, set()).add(c)
    valid = sum(bool(cameras_of.get(p, set()) - {q}) for p, q in zip(pid[split == 1].tolist(), camera[split == 1].tolist()))
    scope_names = sorted(set(scopes))
    identities = [{"pid": int(pid_of[i]), "split": "train" if trains[i] else "test",
                   "scope": scope_names[int(keys[i, 0])], "track_id": int(keys[i, 1])} for i in range(len(keys))]
    return {
        "source": "ground truth",
        "settings": {**asdict(settings), "classes": list(settings.classes)},
        "sequences": [{"name": s.name, "root": s.root, "camera": s.camera, "scene": s.scene,
                       "crops": int((seq_of == k).sum())} for k, s in enumerate(sequences)],
        "splits": counts,
        "cameras": sorted(set(camera.tolist())),
        "queries_with_cross_camera_match": int(valid),
        "identities": sorted(identities, key=lambda d: d["pid"]),
    }


def _log_gt_summary(summary: Dict, output: str, log: Log) -> None:
    c = summary["splits"]
    log(f"wrote {output}: train {c['bounding_box_train']['images']} crops of {c['bounding_box_train']['ids']} ids, "
        f"query {c['query']['images']}, gallery {c['bounding_box_test']['images']} ({c['bounding_box_test']['ids']} "
        "ids)")
    if max(summary["cameras"], default=0) > MARKET_CAMERAS:
        log(f"note: cameras up to c{max(summary['cameras'])}: the market1501 dataset reads c1..c{MARKET_CAMERAS} only; "
            "train with the custom lists (DATASETS.NAMES \"['custom']\", see docs/datasets.md)")
    if summary["queries_with_cross_camera_match"] == 0:
        log("note: no query has a gallery crop of its identity from another camera, and the Market-1501 protocol "
            "ignores same-camera matches, so this test split cannot be scored: use it for training (test on "
            "another dataset), or convert a multi-camera scene (seqinfo.ini: scene=, camera=)")


def tracks_to_crops(sequences: Seq[Sequence], tracks_dir: str, output: str, settings: CropSettings = CropSettings(),
                    log: Log = print) -> Dict:
    """Crops of the tracklets in ``tracks_dir/<sequence name>.txt`` (a tracker's MOT results, as
    TrackEval lays them out) for learning without labels (see the module docstring); returns the
    summary also written to ``output/summary.json``."""
    settings.check()
    _prepare_output(output)
    per_seq = [_kept(read_results(p, s), s, settings, gt=False)
               for p, s in zip(result_files(sequences, tracks_dir), sequences)]
    names, owners, tracklet_keys = [], [], []
    for (rows, _), seq in zip(per_seq, sequences):
        stems = [f"{seq.name}_c{seq.camera}_t{t:06d}" for t in rows.track_id]
        names += [f"crops/{stem}_f{f:06d}{settings.image_ext}" for stem, f in zip(stems, rows.frame)]
        owners += [seq.root] * len(rows)
        tracklet_keys += stems
    if not names:
        raise ValueError(f"No box of the tracker results in {tracks_dir} passes the filters (min height "
                         f"{settings.min_height}, every {settings.frame_step}. frame); loosen them.")
    _check_unique(names, owners, "sequences need distinct names (seqinfo.ini name=).")
    uniq, tracklet = np.unique(tracklet_keys, return_inverse=True)
    tracklet = tracklet.reshape(-1)
    cams = np.concatenate([np.full(len(rows), s.camera) for (rows, _), s in zip(per_seq, sequences)])
    summary = {
        "source": "tracker results", "tracks": os.path.abspath(tracks_dir),
        "settings": {"min_height": settings.min_height, "frame_step": settings.frame_step,
                     "image_ext": settings.image_ext},
        "sequences": [{"name": s.name, "root": s.root, "camera": s.camera, "scene": s.scene, "crops": len(rows),
                       "tracklets": int(len(np.unique(rows.track_id)))} for (rows, _), s in zip(per_seq, sequences)],
        "crops": len(names), "tracklets": int(len(uniq)), "tracklet_regex": TRACKLET_REGEX,
    }

    def build(folder: str) -> None:
        os.makedirs(os.path.join(folder, "crops"))
        start = 0
        for (rows, pix), seq in zip(per_seq, sequences):
            write_crops(seq, rows.frame, pix, [os.path.join(folder, n) for n in names[start:start + len(rows)]])
            start += len(rows)
        atomic_write_text(os.path.join(folder, "crops.txt"), "".join(f"{n} {c}\n" for n, c in zip(names, cams)))
        frames = np.concatenate([rows.frame for rows, _ in per_seq])
        ids = np.concatenate([rows.track_id for rows, _ in per_seq])
        seq_names = [s.name for (rows, _), s in zip(per_seq, sequences) for _ in range(len(rows))]
        atomic_write_text(os.path.join(folder, "tracklets.csv"), "path,tracklet,sequence,camera,track_id,frame\n" + "".join(
            f"{n},{t},{q},{c},{i},{f}\n" for n, t, q, c, i, f in zip(names, tracklet, seq_names, cams, ids, frames)))
        atomic_write_text(os.path.join(folder, "summary.json"), json.dumps(summary, indent=2) + "\n")

    build_folder_atomically(output, build, "summary.json")
    log(f"wrote {output}: {len(names)} crops of {len(uniq)} tracklets in {len(sequences)} sequences; crops.txt lists "
        "them for DATASETS.UNLABELLED.LIST")
    return summary


__all__ = ["CropSettings", "IMAGE_EXTS", "MARKET_CAMERAS", "SPLITS", "TRACKLET_REGEX", "clip_boxes", "gt_to_reid",
           "tracks_to_crops", "write_crops"]
