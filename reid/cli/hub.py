"""The catalogue of published re-ID weights and the local cache (docs/model_zoo.md, "Published weights by name").

    python tools/hub.py list                      # every name, its dataset and reported numbers, cached or not
    python tools/hub.py list --family osnet       # one family
    python tools/hub.py show torchreid/osnet_x0_25_msmt17
    python tools/hub.py download torchreid/osnet_x0_25_msmt17 fastreid/market_bot_r50
    python tools/hub.py verify                    # every cached file against its sha256

Files go to $REID_HOME/hub (default ~/.cache/circle-reid/hub); REID_OFFLINE=1 forbids downloads. Any tool
takes a name where it takes weights: `python tools/test.py --weights torchreid/osnet_x0_25_msmt17 ...`.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .args import tool_parser
from .errors import run_main


def build_parser() -> argparse.ArgumentParser:
    """The parser (argparse only; nothing is fetched before the arguments are right)."""
    p = tool_parser("Published re-ID weights by name: list, show, download, verify.", __doc__.split("\n\n", 1)[1])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    listing = sub.add_parser("list", help="every catalogue name (cached files marked)")
    listing.add_argument("--family", default=None, help="only this family (osnet, bot, agw, sbs, mgn, ...)")
    show = sub.add_parser("show", help="everything the catalogue knows about one name, and its cache state")
    show.add_argument("name")
    down = sub.add_parser("download", help="fetch names into the cache (verified; a cut download resumes)")
    down.add_argument("names", nargs="+", metavar="NAME")
    check = sub.add_parser("verify", help="check cached files against their sha256 (all cached ones by default)")
    check.add_argument("names", nargs="*", metavar="NAME")
    return p


def _numbers(reported) -> str:
    return " / ".join(f"{k} {v:g}" for k, v in reported.items()) or "-"


def _list(family: Optional[str]) -> int:
    from reid.hub.cache import cache_path
    from reid.hub.catalogue import ENTRIES, FAMILIES

    if family is not None and family not in FAMILIES:
        raise ValueError(f"--family {family!r} is not one of: {', '.join(FAMILIES)}.")
    rows = [e for e in ENTRIES if family is None or e.family == family]
    width = max((len(e.name) for e in rows), default=4)
    print(f"{'name':<{width}}  {'family':<9}  {'dataset':<14}  cached  reported")
    for e in rows:
        cached = "yes" if os.path.isfile(cache_path(e.name, e.filename)) else "-"
        print(f"{e.name:<{width}}  {e.family:<9}  {e.dataset:<14}  {cached:<6}  {_numbers(e.reported)}")
    print(f"{len(rows)} model(s); cache: {os.path.dirname(os.path.dirname(cache_path('x/y', 'f')))}")
    return 0


def _show(name: str) -> int:
    from reid.hub.cache import cache_path, recorded_hash
    from reid.hub.catalogue import entry
    from reid.hub.sources import by_hand

    e = entry(name)
    path = cache_path(e.name, e.filename)
    fields = [("name", e.name), ("family", e.family), ("format", e.format), ("config", e.config),
              ("dataset", e.dataset), ("reported", _numbers(e.reported)), ("source page", e.source or "-"),
              ("sha256", e.sha256 or f"not published (recorded on first download: {recorded_hash(path) or 'none yet'})"),
              ("size", f"{e.size:,} bytes" if e.size else "-"),
              ("cache", f"{path} ({'present' if os.path.isfile(path) else 'not downloaded'})")]
    fields += [(f"source {i + 1}", by_hand(u)) for i, u in enumerate(e.urls)]
    if e.notes:
        fields.append(("notes", e.notes))
    for label, value in fields:
        print(f"{label:>12}: {value}")
    return 0


def _download(names: List[str]) -> int:
    from reid.hub.catalogue import entry
    from reid.hub.resolve import fetch_entry

    items = [entry(n) for n in names]  # every name checked before anything is fetched
    for item in items:
        print(f"{item.name}: {fetch_entry(item)}")
    return 0


def _verify(names: List[str]) -> int:
    from reid.hub.cache import cache_path, recorded_hash
    from reid.hub.catalogue import ENTRIES, entry
    from reid.hub.download import DownloadError, Expected, verify

    items = [entry(n) for n in names] if names else [e for e in ENTRIES if os.path.isfile(cache_path(e.name, e.filename))]
    bad = 0
    for item in items:
        path = cache_path(item.name, item.filename)
        if not os.path.isfile(path):
            print(f"{item.name}: not in the cache ({path})")
            bad += 1
            continue
        try:
            digest = verify(path, Expected(item.sha256 or recorded_hash(path), item.size), f"{item.name} ({path})")
        except DownloadError as e:
            print(f"{item.name}: FAILED: {e}")
            bad += 1
            continue
        print(f"{item.name}: ok, sha256 {digest}" + ("" if item.sha256 else " (recorded on first download)"))
    if not items:
        print("No file in the cache yet.")
    return 1 if bad else 0


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of tools/hub.py."""
    args = build_parser().parse_args(argv)

    def work() -> int:
        if args.command == "list":
            return _list(args.family)
        if args.command == "show":
            return _show(args.name)
        if args.command == "download":
            return _download(args.names)
        return _verify(args.names)

    return run_main(work)


if __name__ == "__main__":
    sys.exit(main())
