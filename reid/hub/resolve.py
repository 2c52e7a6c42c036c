"""``--weights NAME``: a catalogue name or an ``hf://`` file, turned into a verified local file.

:func:`resolve_weights` is what every tool calls on its ``--weights`` value: a path that exists is
left alone; ``publisher/model`` (a catalogue name, reid.hub.catalogue) is fetched into the cache
once (reid.hub.cache) and verified (size and sha256) every time before it is used; ``hf://ORG/REPO/PATH``
is fetched through huggingface_hub. The catalogue's config comes with the file, for the tools to use
unless the user gives one.
"""
from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import Callable, List, Optional

from .cache import cache_path, download_lock, offline, record_hash, recorded_hash, writable_folder
from .catalogue import HubEntry, by_name, entry, publishers
from .download import DownloadError, Expected, download, verify
from .sources import by_hand, drive_confirmation, drive_url, hf_download, hf_snapshot, scheme

#: A catalogue name: publisher/model, lowercase words (no file extension, no further slashes).
_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*/[a-z0-9][a-z0-9_.-]*")
#: The root of the source tree, where the catalogue's configs live.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

Log = Callable[[str], None]


@dataclass(frozen=True)
class Resolved:
    """A local model file; with a catalogue name, its entry and the config that goes with it."""

    path: str
    entry: Optional[HubEntry] = None
    config_path: Optional[str] = None  # a published folder's own config.yaml

    @property
    def config(self) -> Optional[str]:
        """The config that goes with the file: a published folder's, else the catalogue's (absolute), or None."""
        if self.config_path:
            return self.config_path
        return os.path.join(ROOT, self.entry.config) if self.entry is not None and self.entry.config else None


def looks_like_name(text: str) -> bool:
    """True for ``hf://...`` and for ``publisher/model`` text that is no existing path and whose
    publisher is in the catalogue (or that the catalogue has): such text is never read as a file."""
    if text.startswith("hf://"):
        return True
    if os.path.exists(text) or not _NAME.fullmatch(text) or os.path.splitext(text)[1] in (".pth", ".pt", ".onnx", ".pt2"):
        return False
    return text in by_name() or text.split("/", 1)[0] in publishers()


def _progress(shown: str) -> Callable[[int, Optional[int]], None]:
    """A tqdm bar on stderr for one transfer (nothing when stderr is not a terminal)."""
    if not sys.stderr.isatty():
        return lambda done, total: None
    from tqdm import tqdm

    bar: List[object] = []

    def update(done: int, total: Optional[int]) -> None:
        if not bar:
            bar.append(tqdm(total=total, unit="B", unit_scale=True, desc=shown, leave=False))
        b = bar[0]
        b.update(done - b.n)  # type: ignore[attr-defined]

    return update


def _fetch_from(url: str, path: str, expected: Expected, shown: str) -> str:
    """Fetch `url` (any source kind) so that `path` holds the verified file; its sha256."""
    kind = scheme(url)
    if kind == "hf":
        local = hf_download(url, local_only=False)
        digest = verify(local, expected, shown)
        # keep one copy under the cache's name (a link where the file system allows it)
        tmp = path + ".part"
        if os.path.lexists(tmp):
            os.remove(tmp)
        try:
            os.link(os.path.realpath(local), tmp)
        except OSError:
            import shutil

            shutil.copyfile(local, tmp)
        os.replace(tmp, path)
        return digest
    if kind == "gdrive":
        return download(drive_url(url[len("gdrive://"):]), path, expected, shown, html=drive_confirmation,
                        progress=_progress(shown))
    return download(url, path, expected, shown, progress=_progress(shown))


def fetch_entry(item: HubEntry, log: Log = print) -> str:
    """The verified local file of catalogue entry `item`, downloaded on first use (sources in order;
    a source that fails, or gives other bytes, passes to the next). DownloadError (one line) when no
    source gives it, or when REID_OFFLINE=1 and the cache lacks it."""
    path = cache_path(item.name, item.filename)
    known = item.sha256 or recorded_hash(path)
    expected = Expected(known, item.size)
    if os.path.lexists(path) and not (os.path.isfile(path) and not os.path.islink(path)):
        raise DownloadError(f"{item.name}: the cache holds {path} as a link, a folder or a special file, not the "
                            "downloaded file; remove it (tools/hub.py download fetches it again).")
    if os.path.isfile(path):
        digest = verify(path, expected, f"{item.name} ({path})")
        if known is None:
            record_hash(path, digest)
        return path
    hand = by_hand(item.urls[0]) if item.urls else "its publisher's page"
    if offline():
        raise DownloadError(f"{item.name} is not in the cache ({path}) and REID_OFFLINE=1 forbids downloading: fetch "
                            f"{hand} by hand and put it there.")
    writable_folder(os.path.dirname(path))
    failures: List[str] = []
    with download_lock(path):
        if os.path.isfile(path):  # another process fetched it while this one waited
            return fetch_entry(item, log)
        for url in item.urls:
            log(f"Downloading {item.name} from {by_hand(url)} into {path}")
            try:
                digest = _fetch_from(url, path, expected, item.name)
            except DownloadError as e:
                failures.append(str(e))
                continue
            if known is None:
                record_hash(path, digest)
                log(f"{item.name}: no published sha256; recorded {digest} (later downloads must match it)")
            return path
    raise DownloadError(f"Could not fetch {item.name}: {' | '.join(failures) or 'the catalogue lists no source'}. "
                        f"Fetch {hand} by hand and put it at {path}.")


def resolve_weights(text: str, log: Log = print) -> Resolved:
    """The local file `text` names (see the module docstring); UnknownModelError for a name the
    catalogue lacks (with the nearest names), DownloadError when fetching fails."""
    if text.startswith("hf://") and text[len("hf://"):].strip("/").count("/") == 1:
        return Resolved(hf_snapshot(text, local_only=offline()))  # a whole repository: a published model
    if text.startswith("hf://"):
        local = hf_download(text, local_only=offline())
        verify(local, Expected(), text)  # no published hash to compare: still no zip bomb
        return Resolved(local)
    if not looks_like_name(text):
        return Resolved(text)
    item = entry(text)
    return Resolved(fetch_entry(item, log), item)


__all__ = ["ROOT", "Resolved", "fetch_entry", "looks_like_name", "resolve_weights"]
