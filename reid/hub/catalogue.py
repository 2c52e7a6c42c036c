"""The catalogue of published re-ID weights: one :class:`HubEntry` per file.

An entry names a file the community published (torchreid's and fast-reid's model zoos, TransReID,
CLIP-ReID, PersonViT), where to get it (sources in order of preference), how to check it (sha256
and size where known), which config of this toolkit reproduces its features, and the numbers its
authors report. ``--weights NAME`` (reid.hub.resolve) looks names up here.

Sources are written as URLs: ``https://...`` (a direct download), ``gdrive://FILE_ID`` (Google
Drive, through gdown) and ``hf://ORG/REPO/PATH`` (a file of a Hugging Face model repository,
through huggingface_hub).
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Tuple

from .zoo_fastreid import FASTREID
from .zoo_torchreid import TORCHREID
from .zoo_transformers import TRANSFORMERS

#: The families an entry may belong to (what kind of model the file holds).
FAMILIES = ("osnet", "bot", "agw", "sbs", "mgn", "transreid", "clipreid", "personvit", "vehicle")


@dataclass(frozen=True)
class HubEntry:
    """One published file."""

    name: str  # "<publisher>/<model>", e.g. "torchreid/osnet_x0_25_msmt17"
    family: str  # one of FAMILIES
    format: str  # the checkpoint layout reid/modeling/formats reads: "torchreid", "fastreid", "transreid", "clipreid", ...
    config: str  # the config that reproduces the file's features, relative to the repository root
    filename: str  # the file's name in the cache
    urls: Tuple[str, ...]  # sources in order of preference (https://, gdrive://, hf://)
    dataset: str  # the training dataset, e.g. "MSMT17"
    sha256: Optional[str] = None  # None: the first download records one, later ones must match it
    size: Optional[int] = None  # bytes, when known
    reported: Mapping[str, float] = field(default_factory=dict)  # the authors' numbers, e.g. {"R-1": 61.4, "mAP": 29.5}
    source: str = ""  # the page that lists the file (model zoo, README)
    notes: str = ""  # anything a user should know (e.g. an extra override the config needs)


#: Every published file the toolkit knows, by name.
ENTRIES: Tuple[HubEntry, ...] = tuple(HubEntry(**fields) for fields in TORCHREID + FASTREID + TRANSFORMERS)


def by_name() -> Dict[str, HubEntry]:
    """Name -> entry."""
    return {e.name: e for e in ENTRIES}


def publishers() -> Tuple[str, ...]:
    """The publishers of the catalogue's names (the part before the slash), sorted."""
    return tuple(sorted({e.name.split("/", 1)[0] for e in ENTRIES}))


def suggest(name: str, limit: int = 3) -> List[str]:
    """The catalogue names nearest to `name` (difflib's ratio on the whole name, then on the part
    after the publisher: "osnet_x0_25_msmt" finds "torchreid/osnet_x0_25_msmt17"), best first."""
    names = list(by_name())
    near = difflib.get_close_matches(name, names, n=limit, cutoff=0.6)
    by_tail: Dict[str, List[str]] = {}
    for n in names:
        by_tail.setdefault(n.rsplit("/", 1)[-1], []).append(n)
    for tail in difflib.get_close_matches(name.rsplit("/", 1)[-1], list(by_tail), n=limit, cutoff=0.6):
        near += [n for n in by_tail[tail] if n not in near]
    return near[:limit]


class UnknownModelError(ValueError):
    """A name not in the catalogue; the message lists the nearest names."""


def entry(name: str) -> HubEntry:
    """The entry called `name`; UnknownModelError (one line, the nearest names) otherwise."""
    found = by_name().get(name)
    if found is None:
        near = suggest(name)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        raise UnknownModelError(f"{name!r} is not in the catalogue of published weights.{hint} "
                                "`python tools/hub.py list` shows every name.")
    return found


__all__ = ["ENTRIES", "FAMILIES", "HubEntry", "UnknownModelError", "by_name", "entry", "publishers", "suggest"]
