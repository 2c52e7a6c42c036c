"""``--tracker-option KEY=VALUE`` checked against the settings BoxMOT documents for each tracker.

BoxMOT takes a tracker's settings as keyword arguments and checks none of their values: an
unknown name fails only when the tracker is built, after every crop has been embedded, and a
value of the wrong kind is used as it is (``use_cmc=maybe`` is a true string, ``track_buffer=-3``
keeps no lost track, ``match_thresh=5`` matches anything). Each tracker's settings, their kinds,
defaults and tuning ranges are in BoxMOT's own ``configs/trackers/<name>.yaml``, read here from the
tracker environment, so the check follows the BoxMOT version installed there. The settings carry
BoxMOT 25's names whatever the version (an older file's renamed settings are read under them:
reid/tracking/boxmot_compat.py).

The tuning ranges are where BoxMOT searches, not what is valid: the check takes the kind of a
value from them (a fraction when the range lies in [0, 1], a count when it is an integer range, a
yes/no, one of named options) and refuses only values outside that kind.
"""
from __future__ import annotations

import difflib
import json
import math
import os
import subprocess
from typing import Any, Dict, Optional, Tuple

from reid.utils.path_kinds import check_file

from .boxmot_compat import RENAMED, spec_to_ours

#: A settings file is a few hundred bytes; a larger one is not one (and is not read into memory).
MAX_SETTINGS_BYTES = 1 << 20

#: Where a BoxMOT package keeps each tracker's settings (``<name>.yaml``).
SPEC_FOLDER = os.path.join("configs", "trackers")
_FIND = "import importlib.util as u; print(u.find_spec('boxmot').submodule_search_locations[0])"


def spec_path(python: str, tracker: str) -> Optional[str]:
    """BoxMOT's settings file of `tracker` in the environment of `python` (None when that BoxMOT has none)."""
    done = subprocess.run([python, "-c", _FIND], capture_output=True, text=True, timeout=60)
    path = os.path.join(done.stdout.strip(), SPEC_FOLDER, f"{tracker}.yaml")
    return path if done.returncode == 0 and os.path.isfile(path) else None


def read_spec(path: str, tracker: Optional[str] = None) -> Dict[str, Dict[str, Any]]:
    """Each setting of a BoxMOT tracker file by name, the ones a setting activates included (at any depth),
    each with ``parent``: the setting that activates it (None for a setting of its own). Names are BoxMOT 25's
    (an older file's renamed settings under them) for `tracker`, by default the file's name."""
    import yaml

    with open(path, encoding="utf-8") as f:
        raw = yaml.safe_load(f) or {}
    settings: Dict[str, Dict[str, Any]] = {}

    def add(entries: Dict[str, Any], parent: Optional[str]) -> None:
        for name, entry in entries.items():  # a parent before the settings it activates, at any depth
            entry = dict(entry) if isinstance(entry, dict) else {"default": entry}
            settings[str(name)] = {**entry, "parent": parent}
            add(entry.get("activates") or {}, str(name))

    add(raw, None)
    return spec_to_ours(tracker or os.path.splitext(os.path.basename(path))[0], settings)


#: No tracker setting counts or weighs beyond this; 1e308 frames of track buffer is a typing error.
MAX_VALUE = 1e6


def _is_number(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and abs(value) <= MAX_VALUE)


def _kind(entry: Dict[str, Any]):
    """(what the setting is, in words; the test a value must pass) of one setting's entry."""
    options = entry.get("options") or []
    bounds = entry.get("range") or []
    default = entry.get("default")
    if options and all(isinstance(o, bool) for o in options) or (not options and isinstance(default, bool)):
        return "true or false", lambda v: isinstance(v, bool)
    if options and all(isinstance(o, str) for o in options):
        return "one of " + ", ".join(options), lambda v: v in options
    if entry.get("type") == "uniform" and bounds and 0 <= min(bounds[:2]) and max(bounds[:2]) <= 1:
        return "a fraction in [0, 1]", lambda v: _is_number(v) and 0 <= v <= 1
    if entry.get("type") in ("randint", "qrandint") or (options and all(isinstance(o, int) for o in options)):
        low = 1 if bounds and bounds[0] >= 1 or options else 0
        return f"a whole number in [{low}, {MAX_VALUE:.0f}]", \
            lambda v: _is_number(v) and float(v).is_integer() and v >= low
    if entry.get("type") == "uniform" or options or _is_number(default):
        return f"a number in [0, {MAX_VALUE:.0f}]", lambda v: _is_number(v) and v >= 0
    return "", lambda v: True  # a setting without a kind (a default of null): BoxMOT takes anything


def check_tracker_options(options: Dict[str, Any], spec: Dict[str, Dict[str, Any]], tracker: str, path: str,
                          distance: Optional[str] = None) -> None:
    """One-line ValueError for the first of `options` that `tracker` has no setting of, or whose value is not of
    its setting's kind (`spec`: :func:`read_spec` of the file `path`). `distance` names the tracker's
    appearance gate, a cosine distance in (0, 2] whatever range BoxMOT tunes it in."""
    for key, value in options.items():
        if key not in spec:
            near = difflib.get_close_matches(key, list(spec), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            renamed = {old: ours for ours, (old, _) in RENAMED.get(tracker, {}).items()}
            if key in renamed:  # an older BoxMOT's name: ours is BoxMOT 25's, whatever the version
                hint = f" (name it {renamed[key]}, BoxMOT 25's name, which every supported BoxMOT takes)"
            raise ValueError(f"--tracker-option {key}={value}: {tracker} has no setting {key!r}{hint}; its settings "
                             f"are those of {path}.")
        words, test = (("a cosine distance in (0, 2]", lambda v: _is_number(v) and 0 < v <= 2) if key == distance
                       else _kind(spec[key]))
        if not test(value):
            entry = spec[key]
            tuned = f", tuned in {entry['range'][:2]}" if entry.get("range") else ""
            raise ValueError(f"--tracker-option {key}={value}: {tracker}'s {key} is {words} (BoxMOT's default "
                             f"{entry.get('default')!r}{tuned}); give such a value.")


def check_options_in_env(options: Dict[str, Any], python: str, tracker: str, distance: Optional[str] = None,
                         log=print) -> None:
    """:func:`check_tracker_options` against the BoxMOT of the tracker environment `python`; a BoxMOT
    without the settings file gets the options unchecked, with a note."""
    if not options:
        return
    path = spec_path(python, tracker)
    if path is None:
        log(f"note: the BoxMOT of {python} has no {SPEC_FOLDER}/{tracker}.yaml, so --tracker-option values are "
            "passed to it unchecked.")
        return
    check_tracker_options(options, read_spec(path), tracker, path, distance)


def read_settings_file(path: str) -> Tuple[str, Dict[str, Any]]:
    """The tracker and its settings that a settings file (``tools/tune_tracker.py``'s tracker_settings.json:
    ``{"tracker": NAME, "options": {...}}``) names; one line for anything else."""
    check_file(path, "--tracker-config", "name the tracker_settings.json that tools/tune_tracker.py wrote.",
               missing_hint="check the path.")
    what = 'a tracker settings file: {"tracker": NAME, "options": {...}}, as tools/tune_tracker.py writes'
    if os.path.getsize(path) > MAX_SETTINGS_BYTES:
        raise ValueError(f"{path}: {os.path.getsize(path)} bytes, too large for {what}.")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not JSON ({' '.join(str(e).split())[:200]}); give {what}.") from None
    if not (isinstance(record, dict) and isinstance(record.get("tracker"), str)
            and isinstance(record.get("options"), dict)):
        raise ValueError(f"{path}: not {what}.")
    return record["tracker"], record["options"]


__all__ = ["MAX_SETTINGS_BYTES", "check_options_in_env", "check_tracker_options", "read_settings_file", "read_spec",
           "spec_path"]
