"""Download one file whole and verified, or not at all.

A model file comes from a direct URL, from Google Drive or from the Hugging Face Hub (reid.hub.sources
turns a source into requests). Everything that can go wrong on the way is one line
(:class:`DownloadError`) and leaves nothing that a later run could take for the file:

* the bytes go to ``<file>.part`` and are renamed into place only after the size and sha256 match
  (a part with a wrong hash is deleted: the host replaced or damaged the file);
* a cut connection resumes from the part's end (an HTTP Range request; a server that answers
  the whole file again starts over), up to :data:`RETRIES` times in one call; after that the part
  stays, and running the command again resumes it;
* an HTML page where a model file was expected (Google Drive's quota or virus-scan page, a login
  page, an error page) is never written to the part; a Drive confirmation page is followed to the
  file (gdown reads the page: its format changes and gdown keeps up with it);
* a zip archive (PyTorch's checkpoint format) whose members unpack to far more than the file's
  size (a zip bomb) is refused before anything reads it.

Only the standard library's HTTP client is used for the transfer itself (urllib: redirects,
Range requests, cookies for Drive); no request is made when REID_OFFLINE=1 (reid.hub.cache).
"""
from __future__ import annotations

import hashlib
import http.client
import http.cookiejar
import os
import stat
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from typing import Callable, Optional

#: Attempts to finish one transfer (the first and the resumed ones).
RETRIES = 3
#: Bytes per read.
CHUNK = 1 << 20
#: Seconds a connection may stay silent.
TIMEOUT = 30.0
#: A zip whose members unpack to more than this multiple of its size (and more than ZIP_MIN_BYTES) is refused.
ZIP_RATIO = 50
ZIP_MIN_BYTES = 1 << 30
#: Most bytes taken from a host when the catalogue gives no size (the largest published re-ID file is ~1 GB).
MAX_BYTES = 8 << 30
#: How the first bytes of an HTML page look (a model file never starts so).
_HTML_STARTS = (b"<!doctype html", b"<html", b"<head", b"<!--", b"<?xml")


class DownloadError(RuntimeError):
    """A file could not be fetched or verified; the message is one line saying what to do."""


@dataclass(frozen=True)
class Expected:
    """What the file must be: sha256 (hex) and size in bytes, each None when unknown."""

    sha256: Optional[str] = None
    size: Optional[int] = None


#: ``next_url(html_text, url) -> str``: where an HTML answer leads (Drive's confirmation page); raises
#: DownloadError when the page is not a way to the file.
HtmlHandler = Callable[[str, str], str]


def sha256_of(path: str) -> str:
    """The sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def check_zip(path: str, shown: str) -> None:
    """Refuse a zip archive whose members unpack to a disproportionate size (see ZIP_RATIO)."""
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise DownloadError(f"{shown} is a damaged zip archive ({e}); delete it and download again.") from None
    size = os.path.getsize(path)
    if unpacked > ZIP_MIN_BYTES and unpacked > ZIP_RATIO * max(size, 1):
        raise DownloadError(f"{shown} unpacks to {unpacked:,} bytes from {size:,} (a zip bomb, not a checkpoint); "
                            "it was not loaded.")


def verify(path: str, expected: Expected, shown: str) -> str:
    """The file's sha256 after checking its size and hash against `expected` (DownloadError otherwise)."""
    size = os.path.getsize(path)
    if expected.size is not None and size != expected.size:
        raise DownloadError(f"{shown} has {size:,} bytes where {expected.size:,} are expected: the file was cut or "
                            "replaced; delete it and download again.")
    digest = sha256_of(path)
    if expected.sha256 is not None and digest != expected.sha256.lower():
        raise DownloadError(f"{shown} has sha256 {digest}, not the expected {expected.sha256}: the file on the host "
                            "was replaced or damaged, so it is not used.")
    check_zip(path, shown)
    return digest


def _opener() -> urllib.request.OpenerDirector:
    # cookies: Drive's older confirmation flow sets one that the second request must send back
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def _looks_like_html(head: bytes, content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml") or \
        head.lstrip()[:32].lower().startswith(_HTML_STARTS)


def _total_size(response: http.client.HTTPResponse, offset: int) -> Optional[int]:
    """The whole file's size from Content-Range (a resumed answer) or Content-Length."""
    content_range = response.headers.get("Content-Range", "")
    if "/" in content_range and content_range.rsplit("/", 1)[1].strip().isdigit():
        return int(content_range.rsplit("/", 1)[1])
    length = response.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


class _Cut(Exception):
    """The connection ended before the whole file came (resumable)."""


def _regular_or_absent(path: str, shown: str) -> int:
    """The size of `path`, 0 when absent; DownloadError when it is a link or not a regular file (a part file
    is only ever written by this module: anything else there is someone else's, and is never written through)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        raise DownloadError(f"{shown}: {path} is not a plain file of the download (a link, a folder or a special "
                            "file); remove it and run the command again.")
    return st.st_size


def _open_part(path: str, append: bool):
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC) | getattr(os, "O_NOFOLLOW", 0)
    return os.fdopen(os.open(path, flags, 0o644), "ab" if append else "wb")


def _transfer(opener: urllib.request.OpenerDirector, url: str, part: str, shown: str,
              html: Optional[HtmlHandler], progress: Optional[Callable[[int, Optional[int]], None]],
              limit: int = MAX_BYTES) -> None:
    """One attempt: append the rest of `url` to `part` (from its current size); _Cut when the
    connection ends early, DownloadError when it cannot work or sends more than `limit` bytes."""
    offset = _regular_or_absent(part, shown)
    for _ in range(4):  # an HTML page may lead on (Drive: confirmation page -> file)
        request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
        try:
            response = opener.open(request, timeout=TIMEOUT)
        except urllib.error.HTTPError as e:
            if e.code == 416 and offset:  # the part already holds everything
                return
            raise DownloadError(f"{shown}: {url} answered HTTP {e.code} {e.reason}.") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            raise _Cut(f"{url}: {reason}") from None
        with response:
            head = response.read(512)
            if _looks_like_html(head, response.headers.get("Content-Type", "")):
                text = (head + response.read(1 << 20)).decode("utf-8", "replace")
                if html is None:
                    raise DownloadError(f"{shown}: {url} served an HTML page instead of the file (a login, quota or "
                                        "error page); nothing was kept. Open the address in a browser to see why.")
                url = html(text, url)
                continue
            resumed = offset > 0 and response.status == 206
            total = _total_size(response, offset if resumed else 0)
            done = offset if resumed else 0
            with _open_part(part, append=resumed) as out:
                block = head
                while block:
                    if done + len(block) > limit:
                        out.close()
                        os.remove(part)
                        raise DownloadError(f"{shown}: {url} sent more than {limit:,} bytes, more than the file can "
                                            "be; nothing was kept.")
                    try:
                        out.write(block)
                    except OSError as e:  # a full disk or a read-only cache: no retry helps
                        raise DownloadError(f"{shown}: cannot write {part}: {e.strerror}; free space or set "
                                            "REID_HOME to another folder.") from None
                    done += len(block)
                    if progress is not None:
                        progress(done, total)
                    try:
                        block = response.read(CHUNK)
                    except (OSError, http.client.HTTPException):
                        raise _Cut(f"{url}: the connection broke after {done:,} bytes") from None
                out.flush()
                os.fsync(out.fileno())
            if total is not None and done < total:
                raise _Cut(f"{url}: the connection ended after {done:,} of {total:,} bytes")
            return
    raise DownloadError(f"{shown}: {url} led to HTML pages four times without reaching the file.")


def download(url: str, dest: str, expected: Expected, shown: str, html: Optional[HtmlHandler] = None,
             progress: Optional[Callable[[int, Optional[int]], None]] = None, retries: int = RETRIES) -> str:
    """Fetch `url` into `dest` through ``dest + '.part'``; returns the file's sha256.

    A part left by an earlier call is resumed. The part becomes `dest` (one rename) only when it
    matches `expected`; a mismatch deletes it. `shown` names the file in messages (its catalogue
    name); `html` handles HTML answers (Drive), else they are refused."""
    part = dest + ".part"
    opener = _opener()
    last = ""
    for _ in range(max(1, retries)):
        try:
            _transfer(opener, url, part, shown, html, progress, expected.size or MAX_BYTES)
            break
        except _Cut as cut:
            last = str(cut)
    else:
        kept = os.path.getsize(part) if os.path.exists(part) else 0
        raise DownloadError(f"{shown}: {last}; {kept:,} bytes are kept in {part} and the next try resumes from "
                            "there.")
    try:
        digest = verify(part, expected, shown)
    except DownloadError:
        os.remove(part)
        raise
    os.replace(part, dest)
    return digest


__all__ = ["CHUNK", "DownloadError", "MAX_BYTES", "Expected", "HtmlHandler", "RETRIES", "ZIP_MIN_BYTES", "ZIP_RATIO", "check_zip",
           "download", "sha256_of", "verify"]
