"""The BoxMOT versions this toolkit drives, and what differs between them, in one place.

BoxMOT changes its tracker API between major versions. Supported are the releases from
:data:`OLDEST` to :data:`NEWEST` (CI tests both ends: ``make test`` the newest, ``make test-min``
the oldest); :data:`DEFAULT` is the one the tracker environment is made with unless
``$REID_BOXMOT_VERSION`` names another. 23.0.0 is the oldest: the first whose ``trackeval`` extra
pins TrackEval (which scores the runs), with BoT-SORT, DeepOCSORT, StrongSORT, BoostTrack and
Hybrid-SORT all taking features given by the caller (``precomputed_reid``).

What differs:

- the call: 25 takes a ``TrackerSpec`` and ``boxmot.structures.Detections`` and returns
  Detections; 23 takes ``create_tracker(name, tracker_kwargs=..., precomputed_reid=True)`` and
  ``update(dets N x 6, image, embs)``, returning an N x 8 array (``x1 y1 x2 y2 id conf cls det``);
  :func:`uses_structures` says which (``reid/tracking/boxmot_side.py`` does both);
- one setting's name: what 25 calls ``use_embeddings`` is ``with_reid`` in 23 (BoT-SORT, BoostTrack,
  Hybrid-SORT) and ``embedding_off``, the opposite, in DeepOCSORT. The toolkit speaks 25's names
  everywhere (``--tracker-option``, tuning, settings files); :func:`to_installed` turns them into
  the installed version's and :func:`spec_to_ours` turns an older tracker file's into ours.

This file imports nothing but the standard library: ``boxmot_side.py`` imports it by path in the
tracker environment, where ``reid`` is not importable as a package of its own.
"""
import os
import re

OLDEST = "23.0.0"
NEWEST = "25.0.0"
DEFAULT = NEWEST
#: The environment variable that picks the BoxMOT version of the tracker environment made on first use.
VERSION_VARIABLE = "REID_BOXMOT_VERSION"

#: Settings whose name changed, per tracker: our (BoxMOT 25) name -> (the name before 25, inverted).
#: ``inverted``: the older setting means the opposite (DeepOCSORT's ``embedding_off``).
RENAMED = {
    "botsort": {"use_embeddings": ("with_reid", False)},
    "boosttrack": {"use_embeddings": ("with_reid", False)},
    "hybridsort": {"use_embeddings": ("with_reid", False)},
    "deepocsort": {"use_embeddings": ("embedding_off", True)},
}
#: The first version with ``boxmot.structures`` and 25's setting names.
STRUCTURES_FROM = (25,)


def parse_version(text):
    """(major, minor, micro) of a version string such as ``25.0.0`` or ``23.0.1.dev2``; ValueError otherwise."""
    match = re.match(r"^\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", str(text))
    if not match:
        raise ValueError(f"{text!r} is not a BoxMOT version such as {NEWEST}")
    return tuple(int(part or 0) for part in match.groups())


def supported_range():
    """The supported versions, in words, e.g. ``23.0.0 to 25.0.0``."""
    return f"{OLDEST} to {NEWEST}"


def is_supported(version):
    """Whether BoxMOT `version` (a string) lies in the supported range, both ends included."""
    try:
        parsed = parse_version(version)
    except ValueError:
        return False
    return parse_version(OLDEST) <= parsed <= parse_version(NEWEST)


def check_version(version, where=""):
    """`version` when it is supported; a one-line ValueError naming it and the supported range otherwise
    (`where` starts the line, e.g. ``"--tracker-python X: "``)."""
    if not is_supported(version):
        raise ValueError(f"{where}BoxMOT {version} is not supported: this toolkit drives BoxMOT {supported_range()} "
                         "(the tracker API changes between versions).")
    return version


def chosen_version(environ=None):
    """The version the tracker environment is made with: ``$REID_BOXMOT_VERSION`` (checked; ``oldest`` and
    ``newest`` name the ends of the range), else :data:`DEFAULT`."""
    environ = os.environ if environ is None else environ
    given = (environ.get(VERSION_VARIABLE) or "").strip()
    given = {"oldest": OLDEST, "newest": NEWEST}.get(given.lower(), given)
    return check_version(given, f"{VERSION_VARIABLE}={given}: ") if given else DEFAULT


def uses_structures(version):
    """Whether BoxMOT `version` takes ``boxmot.structures`` (25 on) or arrays (before)."""
    return parse_version(version) >= STRUCTURES_FROM


def to_installed(tracker, options, version):
    """`options` (our names) in the names of BoxMOT `version`'s `tracker` (values inverted where its setting means
    the opposite)."""
    if uses_structures(version):
        return dict(options)
    renamed = RENAMED.get(tracker, {})
    out = {}
    for key, value in options.items():
        if key in renamed:
            old, inverted = renamed[key]
            key, value = old, (not value if inverted and isinstance(value, bool) else value)
        out[key] = value
    return out


def spec_to_ours(tracker, settings):
    """A BoxMOT tracker file's settings (``tracker_options.read_spec``: name -> entry with ``parent``) under our
    names: an older file's renamed setting (and the parent it is to the settings it activates) renamed, an
    inverted one's default and options inverted. A file with our names is returned as it is."""
    back = {old: (ours, inverted) for ours, (old, inverted) in RENAMED.get(tracker, {}).items()}
    out = {}
    for name, entry in settings.items():
        entry = dict(entry)
        if entry.get("parent") in back:
            entry["parent"] = back[entry["parent"]][0]
        if name in back:
            name, inverted = back[name]
            if inverted:
                if isinstance(entry.get("default"), bool):
                    entry["default"] = not entry["default"]
                if entry.get("options"):
                    entry["options"] = [not o if isinstance(o, bool) else o for o in entry["options"]]
        out[name] = entry
    return out


__all__ = ["DEFAULT", "NEWEST", "OLDEST", "RENAMED", "VERSION_VARIABLE", "check_version", "chosen_version",
           "is_supported", "parse_version", "spec_to_ours", "supported_range", "to_installed", "uses_structures"]
