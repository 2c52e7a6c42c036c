"""What people reviewed, as training data: a Market-1501 folder, list files, and a calibrated threshold.

An identity counts as reviewed when a person confirmed at least one of its links (or merged into
it) and none of its links still waits (proposed), counting only links whose tracklet is still in the
identity (a later split or merge makes a link out of date): its tracklets are then one person by a
person's word. :func:`export_reviewed` writes, under a new folder:

* ``bounding_box_train/``, ``query/``, ``bounding_box_test/`` with Market-1501 names
  ``<pid>_c<camera>s1_<frame>_<k>.jpg`` (pids numbered 1..N in the order of the store's identity ids; ``k``:
  the sighting's number within its identity, in time order, which keeps every name unique;
  ``DATASETS.NAMES ("market1501",)`` reads it when the cameras are numbered 1..6) and the same images
  listed in ``train.txt``, ``query.txt``, ``gallery.txt`` (``path pid camid``; ``DATASETS.NAMES
  ("custom",)`` reads any camera numbers); identities seen by at least two cameras are drawn (seeded)
  for the test split, one query per camera (its first sighting), except that every query keeps a
  gallery image of another camera: when fewer than two of an identity's cameras have two or more
  sightings, its last camera of one sighting gives no query (that sighting stays in the gallery);
* ``export.json``: what was exported (identities, sightings, the split, the store's model).

:func:`calibrate_reviewed` calibrates the model's decision threshold on the reviewed identities
(reid.evaluation.thresholds.calibrate: pairs of different reviewed people give the false-accept
rate, pairs of one person in different cameras the true-accept rate) and records it on the model,
so that search (and online linking) use it from then on.
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Tuple

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from reid.utils.file_io import atomic_write_text

from .schema import Feature, Link, Sighting, Tracklet

SPLITS = ("bounding_box_train", "query", "bounding_box_test")


def reviewed_identities(s: Session) -> List[int]:
    """Ids of the identities a person reviewed (module docstring), ascending."""
    # links whose tracklet is still in their identity (a split or merge since makes a link out of date)
    current = select(Link.identity_id).join(Tracklet, Tracklet.id == Link.tracklet_id).where(
        Tracklet.identity_id == Link.identity_id)
    confirmed = set(s.scalars(current.where(Link.status == "confirmed")))
    waiting = set(s.scalars(current.where(Link.status == "proposed")))
    held = set(s.scalars(select(func.distinct(Tracklet.identity_id))))
    return sorted((confirmed - waiting) & held)


def reviewed_sightings(s: Session, identities: List[int]) -> List[Tuple[int, int, int, int, str]]:
    """``(identity, sighting, camera, frame, crop)`` of the identities' sightings, in time order."""
    rows = s.execute(select(Tracklet.identity_id, Sighting.id, Sighting.camera_id, Sighting.frame, Sighting.crop)
                     .join(Tracklet, Tracklet.id == Sighting.tracklet_id)
                     .where(Tracklet.identity_id.in_(identities))
                     .order_by(Tracklet.identity_id, Sighting.time, Sighting.id)).all() if identities else []
    return [(int(i), int(sid), int(cam), int(frame if frame is not None else sid), crop)
            for i, sid, cam, frame, crop in rows]


def split_identities(rows: List[Tuple[int, int, int, int, str]], test_fraction: float,
                     seed: int) -> Dict[int, str]:
    """Identity -> "train" or "test": a seeded draw of `test_fraction` of the identities seen by two or
    more cameras (a test identity needs a query and a gallery image from another camera)."""
    cameras: Dict[int, set] = {}
    for identity, _, cam, _, _ in rows:
        cameras.setdefault(identity, set()).add(cam)
    several = sorted(i for i, c in cameras.items() if len(c) >= 2)
    rng = np.random.default_rng(seed)
    n_test = int(round(test_fraction * len(several)))
    test = set(rng.choice(several, size=n_test, replace=False).tolist()) if n_test else set()
    return {i: ("test" if i in test else "train") for i in cameras}


def gallery_only_cameras(rows: List[Tuple[int, int, int, int, str]], side: Dict[int, str]) -> Dict[int, int]:
    """Test identity -> the camera that gives no query (module docstring): its last camera of one
    sighting, for the identities where fewer than two cameras have two or more sightings (otherwise a
    query could have no gallery image of another camera, and evaluation no valid query)."""
    counts: Dict[int, Dict[int, int]] = {}
    last_single: Dict[int, int] = {}
    for identity, _, cam, _, _ in rows:
        if side.get(identity) == "test":
            per = counts.setdefault(identity, {})
            per[cam] = per.get(cam, 0) + 1
    for identity, _, cam, _, _ in rows:  # time order: the last one-sighting camera wins
        if identity in counts and counts[identity][cam] == 1:
            last_single[identity] = cam
    return {i: last_single[i] for i, per in counts.items()
            if sum(n >= 2 for n in per.values()) < 2 and i in last_single}


def export_reviewed(store: Any, output: str, test_fraction: float = 0.2, seed: int = 0,
                    include_unreviewed: bool = False) -> Dict[str, Any]:
    """Write the reviewed identities under `output` (module docstring); returns export.json's content.
    `include_unreviewed` exports every identity (the machine's links taken as labels)."""
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test fraction {test_fraction} must lie in [0, 1).")
    if not output:
        raise ValueError("no export folder given; name a new folder.")
    if os.path.exists(output) and not os.path.isdir(output):
        raise ValueError(f"export folder {output} is a file; give a new folder.")
    if os.path.isdir(output) and os.listdir(output):
        raise ValueError(f"export folder {output} is not empty; give a new folder.")
    with store.session() as s:
        identities = sorted(set(s.scalars(select(func.distinct(Tracklet.identity_id))))) if include_unreviewed \
            else reviewed_identities(s)
        rows = reviewed_sightings(s, identities)
    if not rows:
        raise ValueError("no reviewed identity to export: confirm links on the review page first "
                         "(or export every identity with include_unreviewed).")
    side = split_identities(rows, test_fraction, seed)
    no_query = gallery_only_cameras(rows, side)
    pid = {identity: n for n, identity in enumerate(sorted(side), 1)}
    for sub in SPLITS:
        os.makedirs(os.path.join(output, sub), exist_ok=True)
    lists: Dict[str, List[str]] = {"train": [], "query": [], "gallery": []}
    queried: set = set()
    number: Dict[int, int] = {}
    for identity, sid, cam, frame, crop in rows:
        k = number[identity] = number.get(identity, -1) + 1  # unique per identity: no name is written twice
        if side[identity] == "train":
            split = "train"
        else:
            split = "gallery" if (identity, cam) in queried or no_query.get(identity) == cam else "query"
            queried.add((identity, cam))
        folder = {"train": SPLITS[0], "query": SPLITS[1], "gallery": SPLITS[2]}[split]
        name = f"{pid[identity]:04d}_c{cam}s1_{frame:06d}_{k:02d}.jpg"
        path = os.path.join(output, folder, name)
        with open(path, "wb") as f:
            f.write(store.crops.read(crop))
        lists[split].append(f"{folder}/{name} {pid[identity]} {cam}")
    for split, lines in lists.items():
        atomic_write_text(os.path.join(output, f"{split}.txt"), "".join(line + "\n" for line in lines))
    record = {"created": time.time(), "store": store.folder, "reviewed_only": not include_unreviewed,
              "identities": len(pid), "test_identities": sum(v == "test" for v in side.values()),
              "images": {k: len(v) for k, v in lists.items()}, "seed": seed, "test_fraction": test_fraction,
              "pids": {str(i): p for i, p in pid.items()}}
    atomic_write_text(os.path.join(output, "export.json"), json.dumps(record, indent=1))
    return record


def calibrate_reviewed(store: Any, model_name: str, far: float = 1e-2) -> Dict[str, Any]:
    """Calibrate the model's threshold at `far` on the reviewed identities and record it on the model
    (module docstring); returns the calibration record (reid.evaluation.thresholds.calibrate)."""
    from reid.evaluation.thresholds import calibrate

    model = store.model(model_name)
    with store.session() as s:
        identities = reviewed_identities(s)
        rows = s.execute(select(Tracklet.identity_id, Sighting.camera_id, Feature.vector)
                         .join(Sighting, Sighting.tracklet_id == Tracklet.id)
                         .join(Feature, Feature.sighting_id == Sighting.id)
                         .where(Tracklet.identity_id.in_(identities), Feature.model_id == model.id)
                         .order_by(Sighting.id)).all() if identities else []
    if len({r[0] for r in rows}) < 2:
        raise ValueError(f"calibration needs at least 2 reviewed identities with features of {model.name!r}; "
                         f"{len({r[0] for r in rows})} found: review more links first.")
    pids = np.array([r[0] for r in rows], np.int64)
    cams = np.array([r[1] for r in rows], np.int64)
    # a copy: np.frombuffer's array is read-only, which torch (the distances) warns about
    feats = np.frombuffer(b"".join(r[2] for r in rows), np.float32).reshape(len(rows), model.dim).copy()
    record = calibrate(feats, feats, pids, pids, cams, cams, [far], source="reviewed identities of the store")
    entry = record.get("thresholds", {}).get(f"{far:g}")
    if entry is None:
        raise ValueError(f"the reviewed identities give too few pairs of different people to resolve a false "
                         f"accept rate of {far:g}; review more identities or use a larger rate.")
    # float32 distances of equal features may come out just below 0: a similarity just above 1
    threshold = min(1.0, max(-1.0, float(entry["similarity"])))
    store.register_model(model.name, model.identity, model.dim, threshold=threshold,
                         threshold_source=f"calibrated on {len(set(pids.tolist()))} reviewed identities at FAR {far:g}")
    return record


__all__ = ["SPLITS", "calibrate_reviewed", "export_reviewed", "gallery_only_cameras", "reviewed_identities",
           "split_identities"]
