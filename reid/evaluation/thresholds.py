"""Calibrated decision thresholds: "is the best match the same person, at a false accept rate I choose?"

A threshold that means something is chosen on data the model has not trained on and that is not
the test split: the validation split of a run (``TEST.VAL_IDS`` identities held out of training).
After training, the run's result is evaluated there with the verification protocol
(reid/evaluation/verification.py, cosine distances), and for each FAR of
``TEST.VERIFICATION.FARS`` the threshold is stored in ``OUTPUT_DIR/thresholds.json``.

Searches score matches by cosine similarity (1 = identical), so the file gives each threshold as
a similarity too: a match is accepted when its score is **above** ``similarity`` (= 1 - the
distance threshold; verification accepts a pair when its distance is below it).

A split resolves only the FARs its impostor pairs can measure (reid/evaluation/confidence.py):
FAR ``f`` needs at least ``ln(0.05) / ln(1 - f)`` impostor pairs (about ``3 / f``), else no
threshold chosen on it can show a FAR of ``f`` with 95% confidence. Such a FAR gets no threshold:
it is listed under ``unresolved`` with the pairs it would need, and applying it is refused with
the number of validation identities that would resolve it. Each threshold records the pairs
behind it, the impostors it accepts with the 95% upper bound of its FAR, and its TAR with a 95%
Clopper-Pearson interval.

Format (version 2)::

    {"format_version": 2, "metric": "cosine", "weights": "model_best.pth",
     "num_impostor": N, "num_genuine": G, "num_identities": V, "confidence": 0.95, ...,
     "thresholds": {"0.01": {"similarity": s, "distance": 1 - s, "tar": t, "tar_interval": [lo, hi],
                             "far_reached": k / N, "far_upper": u, "accepted_impostors": k,
                             "accepted_genuine": c, "num_impostor": N, "num_genuine": G}},
     "unresolved": {"0.0001": {"num_impostor": N, "num_genuine": G, "impostors_needed": n}},
     "extraction": {"input_size": [h, w], "flip": false}, "eer": e}

``extraction`` says how the features behind the thresholds were made (INPUT.SIZE_TEST, TEST.FLIP):
a search that makes them otherwise gets other scores, so ``--far`` is refused there
(:func:`extraction_difference`).

Version 1 files (no per-threshold counts, every FAR under ``thresholds``) are read with their
split's pair counts; a file without any count (not one this toolkit wrote) loads, but its
thresholds are of unknown resolution and are never applied.
"""
from __future__ import annotations

import json
import math
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np

from reid.utils.file_io import atomic_write_text
from reid.utils.path_kinds import check_file
from reid.utils.text_files import brief

from .confidence import CONFIDENCE, pairs_to_resolve, rate_interval, rate_upper_bound
from .verification import check_fars, verification_metrics_from_features

THRESHOLDS_FILE = "thresholds.json"
FORMAT_VERSION = 2
#: The format versions this toolkit reads (version 1: before the counts behind each threshold).
READABLE_VERSIONS = (1, 2)
#: The only metric a threshold file may use: its similarities are cosine similarities (1 - distance).
METRIC = "cosine"
INTERVAL_METHOD = "Clopper-Pearson"
RESOLUTION_RULE = (f"FAR f is resolved when the split holds at least ln(1 - c) / ln(1 - f) impostor pairs "
                   f"(c = {CONFIDENCE:g}; about 3 / f): fewer cannot show a FAR of f with confidence c, even "
                   "with no impostor accepted (one-sided Clopper-Pearson bound, the rule of three)")
# Pair counts above this are no split's (they also keep every count exact as a float).
_MAX_COUNT = 1 << 52
# Distances are float32 (a cosine distance of equal features may come out at -1e-7).
_SLACK = 1e-4
_DERIVED_TOL = 1e-6
# The largest input side a config accepts (reid.config.value_range("INPUT.SIZE_TEST")), kept here
# so that reading a thresholds file needs no config.
_MAX_SIDE = 4096


def extraction_settings(cfg) -> Dict[str, Any]:
    """How `cfg` makes features, as a thresholds file records it: the settings that change a
    feature of the same weights (the input size and flip averaging), as a search compares them."""
    h, w = (int(v) for v in cfg.INPUT.SIZE_TEST)
    return {"input_size": [h, w], "flip": bool(cfg.TEST.FLIP)}


def extraction_difference(record: Dict[str, Any], cfg) -> Optional[str]:
    """What differs between the features a checked thresholds record was calibrated on and those
    `cfg` makes (None: the same, or a file that does not record them); e.g.
    "TEST.FLIP True (calibrated with False)". A threshold holds only for the scores it was measured on."""
    calibrated = record.get("extraction")
    if calibrated is None:
        return None
    now = extraction_settings(cfg)
    keys = {"input_size": "INPUT.SIZE_TEST", "flip": "TEST.FLIP"}
    changed = [f"{keys[k]} {now[k]} (calibrated with {calibrated[k]})" for k in keys if now[k] != calibrated[k]]
    return ", ".join(changed) or None


def _stats(distance: float, tar: float, far_reached: float, num_impostor: int, num_genuine: int) -> Dict[str, Any]:
    """A threshold's entry: the threshold both ways, its rates, their counts and bounds."""
    accepted = int(round(far_reached * num_impostor))
    genuine = int(round(tar * num_genuine))
    lo, hi = rate_interval(genuine, num_genuine)
    return {"similarity": 1.0 - distance, "distance": distance, "tar": tar, "tar_interval": [lo, hi],
            "far_reached": far_reached, "far_upper": rate_upper_bound(accepted, num_impostor),
            "accepted_impostors": accepted, "accepted_genuine": genuine,
            "num_impostor": num_impostor, "num_genuine": num_genuine}


def _unresolved(far: float, num_impostor: int, num_genuine: int) -> Dict[str, Any]:
    return {"num_impostor": num_impostor, "num_genuine": num_genuine, "impostors_needed": pairs_to_resolve(far)}


def calibrate(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids, fars: Sequence[float],
              source: str = "validation split") -> Dict[str, Any]:
    """Thresholds at each of `fars` from query/gallery features of a held-out split (a record for
    :func:`save_thresholds`); a FAR the split cannot resolve is listed under ``unresolved``."""
    fars = sorted(set(check_fars(fars)))
    v = verification_metrics_from_features(q_feats, g_feats, q_pids, g_pids, q_camids, g_camids,
                                           metric=METRIC, fars=fars)
    n_imp, n_gen = int(v["num_impostor"]), int(v["num_genuine"])
    identities = np.unique(np.concatenate([np.asarray(q_pids).reshape(-1), np.asarray(g_pids).reshape(-1)]))
    resolved: Dict[str, Any] = {}
    unresolved: Dict[str, Any] = {}
    for f in fars:
        if n_imp < pairs_to_resolve(f):
            unresolved[f"{f:g}"] = _unresolved(f, n_imp, n_gen)
        else:
            resolved[f"{f:g}"] = _stats(float(v["threshold"][f]), float(v["tar"][f]), float(v["far_reached"][f]),
                                        n_imp, n_gen)
    return {
        "format_version": FORMAT_VERSION,
        "metric": METRIC,
        "rule": "a match is accepted when its cosine similarity is above 'similarity' (its cosine distance below "
                "'distance')",
        "source": source,
        "num_genuine": n_gen,
        "num_impostor": n_imp,
        "num_identities": int(len(identities)),
        "confidence": CONFIDENCE,
        "interval_method": INTERVAL_METHOD,
        "resolution": RESOLUTION_RULE,
        "thresholds": resolved,
        "unresolved": unresolved,
        "eer": float(v["eer"]),
    }


def save_thresholds(folder: str, record: Dict[str, Any]) -> str:
    """Write `record` to ``folder/thresholds.json`` atomically; returns the path."""
    path = os.path.join(folder, THRESHOLDS_FILE)
    atomic_write_text(path, json.dumps(record, indent=2))
    return path


# ----------------------------------------------------------------------------- reading, checked


class _Damaged(ValueError):
    def __init__(self, field: str, what: str) -> None:
        super().__init__(f"{field}: {what}")


def _bad(path: str, what: str) -> ValueError:
    return ValueError(f"Thresholds file {path!r} is damaged ({what}); delete it and calibrate again "
                      "(train with TEST.VAL_IDS > 0).")


def _is_number(value: Any) -> bool:
    # JSON true/false load as bool, a subclass of int: never a number here.
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _key(key: str) -> str:
    """A FAR key as a field name: as written when short and printable, else quoted briefly."""
    return key if len(key) <= 32 and key.isprintable() else brief(key)


def _name(where: str, field: str) -> str:
    return f"{where}.{field}" if where else field


def _number(entry: Dict[str, Any], field: str, where: str, low: float, high: float) -> float:
    value, name = entry.get(field), _name(where, field)
    if value is None:
        raise _Damaged(name, "missing")
    if not _is_number(value):
        raise _Damaged(name, f"{brief(value)} is not a finite number")
    if not low <= value <= high:
        raise _Damaged(name, f"{brief(value)} is outside [{low:g}, {high:g}]")
    return float(value)


def _count(entry: Dict[str, Any], field: str, where: str, low: int = 1, high: int = _MAX_COUNT,
           required: bool = True) -> Optional[int]:
    value, name = entry.get(field), _name(where, field)
    if value is None and not required:
        return None
    if value is None:
        raise _Damaged(name, "missing")
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Damaged(name, f"{brief(value)} is not an integer")
    if not low <= value <= high:
        raise _Damaged(name, f"{brief(value)} is outside [{low}, {high}]")
    return int(value)


def _table(record: Dict[str, Any], name: str, required: bool) -> Dict[str, Any]:
    table = record.get(name)
    if table is None and not required:
        return {}
    if not isinstance(table, dict):
        raise _Damaged(name, "missing" if table is None else f"{brief(table)} is not a mapping of FARs")
    return table


def _far(key: str, name: str, seen: Dict[float, str]) -> float:
    try:
        far = float(key)
    except ValueError:
        far = float("nan")
    if not 0.0 < far < 1.0:
        raise _Damaged(f"{name}.{_key(key)}", "the key is not a false accept rate in (0, 1)")
    if far in seen:
        raise _Damaged(f"{name}.{_key(key)}", f"a second entry for FAR {far:g} (also {brief(seen[far])})")
    seen[far] = key
    return far


def _same(stored: Any, computed: Any) -> bool:
    if isinstance(computed, list):
        return isinstance(stored, list) and len(stored) == len(computed) and all(map(_same, stored, computed))
    return _is_number(stored) and not isinstance(computed, bool) and abs(stored - computed) <= _DERIVED_TOL


def _entry(far: float, key: str, entry: Any, counts: Optional[Tuple[int, int]], version: int) -> Dict[str, Any]:
    """One threshold entry checked, and (with the split's counts) completed to the version-2 fields."""
    where = f"thresholds.{_key(key)}"
    if not isinstance(entry, dict):
        raise _Damaged(where, f"{brief(entry)} is not a mapping")
    similarity = _number(entry, "similarity", where, -1.0 - _SLACK, 1.0 + _SLACK)
    distance = _number(entry, "distance", where, -_SLACK, 2.0 + _SLACK)
    if abs(similarity - (1.0 - distance)) > _DERIVED_TOL:
        raise _Damaged(f"{where}.distance", f"{distance!r} contradicts similarity {similarity!r} (a cosine "
                                            "distance is 1 - the similarity)")
    tar = _number(entry, "tar", where, 0.0, 1.0)
    # The threshold never accepts more impostors than its FAR allows (verification.py).
    reached = _number(entry, "far_reached", where, 0.0, far * (1 + 1e-9))
    if counts is None:
        return {"similarity": similarity, "distance": distance, "tar": tar, "far_reached": reached}
    n_imp, n_gen = counts
    out = _stats(distance, tar, reached, n_imp, n_gen)
    out["similarity"] = similarity  # as written (1 - distance within rounding)
    if abs(out["accepted_impostors"] - reached * n_imp) > 1e-6 * n_imp + 1e-9:
        raise _Damaged(f"{where}.far_reached", f"{reached!r} is no count of the {n_imp} impostor pairs")
    if abs(out["accepted_genuine"] - tar * n_gen) > 1e-6 * n_gen + 1e-9:
        raise _Damaged(f"{where}.tar", f"{tar!r} is no count of the {n_gen} genuine pairs")
    if version >= 2:
        for field in ("num_impostor", "num_genuine", "accepted_impostors", "accepted_genuine"):
            if _count(entry, field, where, low=0) != out[field]:
                raise _Damaged(f"{where}.{field}", f"{brief(entry[field])} contradicts the split's counts "
                                                  f"(expected {out[field]})")
        for field in ("far_upper", "tar_interval"):
            if not _same(entry.get(field), out[field]):
                raise _Damaged(f"{where}.{field}", f"{brief(entry.get(field))} contradicts the counts "
                                                  f"(expected {brief(out[field])})")
    return out


def _check_monotone(table: Dict[str, Any], fars: Dict[str, float]) -> None:
    """A larger FAR accepts more: its similarity threshold is no higher, its TAR and FAR no lower."""
    order = sorted(table, key=fars.__getitem__)
    for a, b in zip(order, order[1:]):
        ea, eb = table[a], table[b]
        for field, sign in (("similarity", -1), ("tar", 1), ("far_reached", 1)):
            if sign * (eb[field] - ea[field]) < -1e-9:
                raise _Damaged(f"thresholds.{_key(b)}.{field}", f"{eb[field]!r} at FAR {b} against {ea[field]!r} at "
                                                                 f"the smaller FAR {a} (a larger FAR accepts more)")


def _extraction(entry: Any) -> Optional[Dict[str, Any]]:
    """The ``extraction`` field checked (None when the file does not record it)."""
    if entry is None:
        return None
    if not isinstance(entry, dict):
        raise _Damaged("extraction", f"{brief(entry)} is not a mapping")
    size, flip = entry.get("input_size"), entry.get("flip")
    if (not isinstance(size, list) or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= _MAX_SIDE for v in size)):
        raise _Damaged("extraction.input_size", f"{brief(size)} is not [height, width] in pixels (1 to {_MAX_SIDE})")
    if not isinstance(flip, bool):
        raise _Damaged("extraction.flip", f"{brief(flip)} is not true or false")
    return {"input_size": list(size), "flip": flip}


def check_thresholds(record: Any) -> Dict[str, Any]:
    """`record` (a thresholds file's JSON) checked as a whole and returned in the version-2 form.

    Raises ValueError naming the first bad field; see :func:`load_thresholds`.
    """
    if not isinstance(record, dict):
        raise _Damaged("the file", "not a JSON object")
    version = record.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise _Damaged("format_version", "missing" if version is None else f"{brief(version)} is not an integer")
    if version not in READABLE_VERSIONS:
        raise _Damaged("format_version", f"{version} is not one this toolkit reads "
                                         f"({', '.join(map(str, READABLE_VERSIONS))})")
    metric = record.get("metric")
    if metric != METRIC:
        raise _Damaged("metric", "missing" if metric is None else f"{brief(metric)} is not one whose thresholds "
                                                                  f"this toolkit applies ({METRIC!r})")
    weights = record.get("weights")
    if weights is not None and (not isinstance(weights, str) or not weights or weights in (".", "..")
                                or os.path.basename(weights) != weights or "\\" in weights):
        raise _Damaged("weights", f"{brief(weights)} is not the file name of a weights file")
    extraction = _extraction(record.get("extraction"))
    n_imp = _count(record, "num_impostor", "", required=version >= 2)
    n_gen = _count(record, "num_genuine", "", required=version >= 2)
    identities = _count(record, "num_identities", "", required=False)
    counts = (n_imp, n_gen) if n_imp is not None and n_gen is not None else None
    table = _table(record, "thresholds", required=True)
    listed = _table(record, "unresolved", required=False) if version >= 2 else {}
    seen: Dict[float, str] = {}
    fars = {key: _far(key, "thresholds", seen) for key in table}
    out_table: Dict[str, Any] = {}
    unresolved: Dict[str, Any] = {}
    for key, entry in table.items():
        if counts is not None and counts[0] < pairs_to_resolve(fars[key]):
            if version >= 2:
                raise _Damaged(f"thresholds.{_key(key)}", f"{counts[0]} impostor pairs cannot resolve FAR {key} "
                                                           f"(it needs {pairs_to_resolve(fars[key])})")
            _entry(fars[key], key, entry, counts, version)  # checked all the same, then set aside
            unresolved[key] = _unresolved(fars[key], *counts)
        else:
            out_table[key] = _entry(fars[key], key, entry, counts, version)
    for key, entry in listed.items():
        far = _far(key, "unresolved", seen)
        if not isinstance(entry, dict):
            raise _Damaged(f"unresolved.{_key(key)}", f"{brief(entry)} is not a mapping")
        if counts is None or _count(entry, "num_impostor", f"unresolved.{_key(key)}", low=0) != counts[0]:
            raise _Damaged(f"unresolved.{_key(key)}.num_impostor", "missing or not the split's count")
        unresolved[key] = _unresolved(far, *counts)
    if not out_table and not unresolved:
        raise _Damaged("thresholds", "empty")
    _check_monotone(out_table, fars)
    out: Dict[str, Any] = {"format_version": FORMAT_VERSION, "metric": METRIC}
    for field in ("rule", "source", "weights"):
        if isinstance(record.get(field), str):
            out[field] = record[field]
    out.update(num_impostor=n_imp, num_genuine=n_gen, confidence=CONFIDENCE, interval_method=INTERVAL_METHOD,
               resolution=RESOLUTION_RULE, thresholds=out_table, unresolved=unresolved)
    if identities is not None:
        out["num_identities"] = identities
    if extraction is not None:
        out["extraction"] = extraction
    if "eer" in record:
        out["eer"] = _number(record, "eer", "", 0.0, 1.0)
    return out


def load_thresholds(path: str) -> Dict[str, Any]:
    """The record in a thresholds file, checked as a whole before any of it is used
    (:func:`check_thresholds`): the format version and metric known, every number a finite
    number (``true`` is not one) in its range, similarity and distance of each threshold agreeing,
    thresholds monotone in FAR, the counts behind them consistent, ``weights`` a file name.
    Returns the version-2 form (a version-1 file's FARs that its split cannot resolve moved to
    ``unresolved``). A bad file is one ValueError naming it and the field."""
    check_file(path, "Thresholds file", "delete it and calibrate again (train with TEST.VAL_IDS > 0).")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.loads(f.read(1 << 20))
    except (OSError, UnicodeDecodeError) as e:
        raise _bad(path, type(e).__name__) from None
    except (ValueError, RecursionError):
        raise _bad(path, "not JSON") from None
    version = record.get("format_version") if isinstance(record, dict) else None
    if isinstance(version, int) and not isinstance(version, bool) and version > max(READABLE_VERSIONS):
        raise ValueError(f"Thresholds file {path!r} has format_version {version}, written by a newer circle-reid "
                         f"(this one reads {', '.join(map(str, READABLE_VERSIONS))}); update circle-reid, or "
                         "calibrate again with this one (train with TEST.VAL_IDS > 0).")
    try:
        return check_thresholds(record)
    except _Damaged as e:
        raise _bad(path, str(e)) from None


def find_thresholds(weights: str) -> Optional[str]:
    """The ``thresholds.json`` beside the weights file `weights` (a run's folder), if any (whatever
    it is: :func:`load_thresholds` names a FIFO or a folder for what it is, not as missing)."""
    path = os.path.join(os.path.dirname(os.path.abspath(weights)), THRESHOLDS_FILE)
    return path if os.path.lexists(path) else None


def calibrated_for(record: Dict[str, Any], weights: str) -> bool:
    """Whether a thresholds record was calibrated on the weights file `weights` (a run folder holds
    several checkpoints, and each has its own distances: another's thresholds would not hold)."""
    name = record.get("weights")
    return not name or name == os.path.basename(weights)


def resolution_known(record: Dict[str, Any]) -> bool:
    """Whether a (checked) record says how many pairs its thresholds rest on."""
    return record.get("num_impostor") is not None and record.get("num_genuine") is not None


def identities_to_resolve(num_impostor: int, num_identities: int, pairs_needed: int) -> Optional[int]:
    """About how many validation identities give `pairs_needed` impostor pairs, when
    `num_identities` gave `num_impostor`: impostor pairs join images of two different identities,
    so at a constant number of images per identity they grow as ``V (V - 1)``. None when
    `num_identities` < 2 (no rate to extrapolate)."""
    if num_identities < 2 or num_impostor < 1:
        return None
    per_pair = num_impostor / (num_identities * (num_identities - 1))
    v = max(num_identities, math.ceil((1 + math.sqrt(1 + 4 * pairs_needed / per_pair)) / 2))
    while v > num_identities and per_pair * (v - 1) * (v - 2) >= pairs_needed:
        v -= 1
    while per_pair * v * (v - 1) < pairs_needed:
        v += 1
    return v


def unresolved_reason(record: Dict[str, Any], key: str) -> str:
    """Why FAR `key` of a checked record's ``unresolved`` has no threshold, and how many more
    validation identities would give it one."""
    entry = record["unresolved"][key]
    n, needed = int(entry["num_impostor"]), int(entry["impostors_needed"])
    identities = record.get("num_identities")
    more = identities_to_resolve(n, identities, needed) if identities else None
    if more is not None:
        how = (f"about {more - identities} more validation identities would give them ({identities} now: "
               f"TEST.VAL_IDS {more}, at the same images per identity)")
    else:
        how = (f"{needed - n:,} more impostor pairs would (they grow with the square of the number of validation "
               "identities: raise TEST.VAL_IDS)")
    return (f"its validation split had {n:,} impostor pairs, and FAR {key} needs at least {needed:,} (with fewer, "
            f"no threshold can show that FAR at {CONFIDENCE:.0%} confidence); {how}")


def _far_list(keys: Sequence[str]) -> str:
    return ", ".join(sorted(keys, key=float)) or "none"


def similarity_at(record: Dict[str, Any], far: float, path: str = THRESHOLDS_FILE) -> float:
    """The calibrated similarity threshold for FAR `far` of a checked record (:func:`load_thresholds`).

    Refused (ValueError, one line) when the file has no threshold at `far`, when its split cannot
    resolve `far` (saying how many more validation identities would), or when the file does not
    record the pairs its thresholds rest on.
    """
    far = check_fars([far])[0]
    table, unresolved = record["thresholds"], record.get("unresolved", {})
    for key, entry in table.items():
        if math.isclose(float(key), far, rel_tol=1e-9):
            if not resolution_known(record):
                raise ValueError(
                    f"{path!r} does not record how many impostor pairs its thresholds rest on, so whether its split "
                    f"can resolve FAR {far:g} is unknown; calibrate again (train with TEST.VAL_IDS > 0), or pass a "
                    "similarity of your choosing with --threshold S.")
            return float(entry["similarity"])
    for key, entry in unresolved.items():
        if math.isclose(float(key), far, rel_tol=1e-9):
            other = (f"Use a resolved FAR ({_far_list(list(table))})" if table else
                     "Its split resolves no FAR: calibrate on more validation identities")
            raise ValueError(f"{path!r} cannot resolve FAR {far:g}: {unresolved_reason(record, key)}. {other}, or "
                             "pass --threshold S.")
    if not table:  # "has thresholds for FAR none" said nothing useful
        raise ValueError(f"{path!r} has no threshold at any FAR (its split resolves none), and none at {far:g}; "
                         "calibrate on more validation identities (TEST.VAL_IDS) at it (TEST.VERIFICATION.FARS), or "
                         "pass --threshold S.")
    raise ValueError(f"{path!r} has thresholds for FAR {_far_list(list(table))}, not {far:g}; pick one of those, or "
                     "calibrate at it (TEST.VERIFICATION.FARS) and train again.")


def describe_threshold(record: Dict[str, Any], far: float) -> str:
    """One line on how sure the threshold at `far` of a checked, resolved record is."""
    entry = next(e for k, e in record["thresholds"].items() if math.isclose(float(k), far, rel_tol=1e-9))
    lo, hi = entry["tar_interval"]
    return (f"FAR {far:g}: {entry['accepted_impostors']:,} of {entry['num_impostor']:,} validation impostor pairs "
            f"accepted, so the FAR is at most {entry['far_upper']:.3g} with {CONFIDENCE:.0%} confidence; TAR "
            f"{100 * entry['tar']:.1f}% ({CONFIDENCE:.0%} {INTERVAL_METHOD} interval {100 * lo:.1f}-{100 * hi:.1f}%, "
            f"{entry['num_genuine']:,} genuine pairs)")


__all__ = ["FORMAT_VERSION", "INTERVAL_METHOD", "METRIC", "READABLE_VERSIONS", "RESOLUTION_RULE", "THRESHOLDS_FILE",
           "calibrate", "calibrated_for", "check_thresholds", "describe_threshold", "extraction_difference",
           "extraction_settings", "find_thresholds",
           "identities_to_resolve", "load_thresholds", "resolution_known", "save_thresholds", "similarity_at",
           "unresolved_reason"]
