"""Calibrated decision thresholds: "is the best match the same person, at a false accept rate I choose?"

A threshold that means something is chosen on data the model has not trained on and that is not
the test split: the validation split of a run (``TEST.VAL_IDS`` identities held out of training).
After training, the run's result is evaluated there with the verification protocol
(reid/evaluation/verification.py, cosine distances), and for each FAR of
``TEST.VERIFICATION.FARS`` the threshold is stored in ``OUTPUT_DIR/thresholds.json``.

Searches score matches by cosine similarity (1 = identical), so the file gives each threshold as
a similarity too: a match is accepted when its score is **above** ``similarity`` (= 1 - the
distance threshold; verification accepts a pair when its distance is below it).
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Optional, Sequence

from reid.utils.file_io import atomic_write_text
from reid.utils.text_files import brief

from .verification import check_fars, verification_metrics_from_features

THRESHOLDS_FILE = "thresholds.json"
FORMAT_VERSION = 1


def calibrate(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids, fars: Sequence[float],
              source: str = "validation split") -> Dict[str, Any]:
    """Thresholds at each of `fars` from query/gallery features of a held-out split (a record for
    :func:`save_thresholds`)."""
    v = verification_metrics_from_features(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids,
                                           metric="cosine", fars=fars)
    return {
        "format_version": FORMAT_VERSION,
        "metric": "cosine",
        "rule": "a match is accepted when its cosine similarity is above 'similarity' (its cosine distance below "
                "'distance')",
        "source": source,
        "num_genuine": v["num_genuine"],
        "num_impostor": v["num_impostor"],
        "thresholds": {
            f"{f:g}": {"similarity": 1.0 - v["threshold"][f], "distance": v["threshold"][f], "tar": v["tar"][f],
                       "far_reached": v["far_reached"][f]}
            for f in fars
        },
        "eer": v["eer"],
    }


def save_thresholds(folder: str, record: Dict[str, Any]) -> str:
    """Write `record` to ``folder/thresholds.json`` atomically; returns the path."""
    path = os.path.join(folder, THRESHOLDS_FILE)
    atomic_write_text(path, json.dumps(record, indent=2))
    return path


def _bad(path: str, what: str) -> ValueError:
    return ValueError(f"Thresholds file {path!r} is damaged ({what}); delete it and calibrate again "
                      "(train with TEST.VAL_IDS > 0).")


def load_thresholds(path: str) -> Dict[str, Any]:
    """The record in a thresholds file, checked: every threshold a finite similarity in [-1, 1]."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.loads(f.read(1 << 20))
    except (OSError, UnicodeDecodeError) as e:
        raise _bad(path, type(e).__name__) from None
    except (ValueError, RecursionError):
        raise _bad(path, "not JSON") from None
    table = record.get("thresholds") if isinstance(record, dict) else None
    if not isinstance(table, dict) or not table:
        raise _bad(path, "no 'thresholds' mapping")
    for far, entry in table.items():
        value = entry.get("similarity") if isinstance(entry, dict) else None
        try:
            ok = 0.0 < float(far) < 1.0 and isinstance(value, (int, float)) and math.isfinite(value) \
                and -1.0 <= value <= 1.0
        except ValueError:
            ok = False
        if not ok:
            raise _bad(path, f"entry {brief(far)}: {brief(entry)}")
    return record


def find_thresholds(weights: str) -> Optional[str]:
    """The ``thresholds.json`` beside the weights file `weights` (a run's folder), if any."""
    path = os.path.join(os.path.dirname(os.path.abspath(weights)), THRESHOLDS_FILE)
    return path if os.path.isfile(path) else None


def calibrated_for(record: Dict[str, Any], weights: str) -> bool:
    """Whether a thresholds record was calibrated on the weights file `weights` (a run folder holds
    several checkpoints, and each has its own distances: another's thresholds would not hold)."""
    name = record.get("weights")
    return not name or name == os.path.basename(weights)


def similarity_at(record: Dict[str, Any], far: float, path: str = THRESHOLDS_FILE) -> float:
    """The calibrated similarity threshold for FAR `far` (which must be one the file holds)."""
    far = check_fars([far])[0]
    table = record["thresholds"]
    for key, entry in table.items():
        if math.isclose(float(key), far, rel_tol=1e-9):
            return float(entry["similarity"])
    raise ValueError(f"{path!r} has thresholds for FAR {', '.join(sorted(table, key=float))}, not {far:g}; pick one "
                     "of those, or calibrate at it (TEST.VERIFICATION.FARS) and train again.")


__all__ = ["FORMAT_VERSION", "THRESHOLDS_FILE", "calibrate", "calibrated_for", "find_thresholds", "load_thresholds", "save_thresholds",
           "similarity_at"]
