"""The three kinds of source a catalogue entry lists, as URLs:

* ``https://...`` (or ``http://``): a direct download (GitHub releases, a project's server);
* ``gdrive://FILE_ID``: Google Drive. The first request asks Drive for the file; a large file
  answers with a confirmation page instead, which gdown's parser (the maintained one: Drive's page
  changes and gdown follows) turns into the address of the file. Drive's address can be moved with
  REID_GDRIVE_URL (a mirror; the tests' server on the loopback interface);
* ``hf://ORG/REPO/PATH``: a file of a Hugging Face model repository, fetched (and cached, in the
  Hub's own cache layout) by huggingface_hub; HF_HUB_OFFLINE=1 or REID_OFFLINE=1 read only that cache.
"""
from __future__ import annotations

import os
import urllib.parse
from typing import Optional, Tuple

from .download import DownloadError

DRIVE_ENV = "REID_GDRIVE_URL"
DRIVE_URL = "https://drive.google.com"
SCHEMES = ("https", "http", "gdrive", "hf")


def scheme(url: str) -> str:
    """The source kind of `url` (one of SCHEMES); ValueError otherwise."""
    kind = url.split("://", 1)[0].lower() if "://" in url else ""
    if kind not in SCHEMES:
        raise ValueError(f"{url!r} is not a source this toolkit fetches: use https://, gdrive://FILE_ID or "
                         "hf://ORG/REPO/PATH.")
    return kind


def drive_url(file_id: str) -> str:
    """Drive's download address of `file_id`."""
    base = os.environ.get(DRIVE_ENV, DRIVE_URL).rstrip("/")
    return f"{base}/uc?export=download&id={urllib.parse.quote(file_id, safe='')}"


def drive_confirmation(text: str, url: str) -> str:
    """Where Drive's confirmation page leads (DownloadError for a quota or error page)."""
    try:  # gdown >= 5.1 (setup.py): its parser reads the hidden fields of today's form
        from gdown.download import get_url_from_gdrive_confirmation
        from gdown.exceptions import FileURLRetrievalError
    except ImportError:  # a dependency of the package; only a broken install lacks it
        raise DownloadError("Google Drive asked to confirm the download, which needs gdown >= 5.1: pip install -U "
                            "gdown.") from None
    try:
        found = get_url_from_gdrive_confirmation(text)
    except FileURLRetrievalError as e:
        reason = " ".join(str(e).split())
        raise DownloadError(f"Google Drive did not give the file ({reason}); try later (Drive limits downloads of "
                            "popular files) or fetch it by hand.") from None
    return urllib.parse.urljoin(url, found)


def hf_parts(url: str) -> Tuple[str, str]:
    """``(repo_id, path in the repository)`` of ``hf://ORG/REPO/PATH``."""
    parts = url[len("hf://"):].strip("/").split("/")
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"{url!r} names no file: write hf://ORG/REPO/PATH (the file's path in the repository).")
    return "/".join(parts[:2]), "/".join(parts[2:])


def hf_download(url: str, local_only: bool) -> str:
    """The local path of an ``hf://`` file (downloaded by huggingface_hub into its cache, or found there
    with `local_only`)."""
    repo_id, filename = hf_parts(url)
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise DownloadError(f"{url} is on the Hugging Face Hub, which needs huggingface_hub: pip install "
                            "huggingface_hub.") from None
    try:
        return hf_hub_download(repo_id=repo_id, filename=filename, local_files_only=local_only)
    except LocalEntryNotFoundError:
        raise DownloadError(f"{url} is not in the Hugging Face cache and downloading is off (HF_HUB_OFFLINE or "
                            "REID_OFFLINE).") from None
    except Exception as e:  # huggingface_hub raises many types (HTTP, repository, revision, network)
        raise DownloadError(f"{url}: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None


def hf_snapshot(url: str, local_only: bool) -> str:
    """The local folder of a whole Hugging Face model repository ``hf://ORG/NAME`` (a model published
    by tools/publish.py), downloaded by huggingface_hub or found in its cache with `local_only`."""
    repo_id = url[len("hf://"):].strip("/")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        raise DownloadError(f"{url} is on the Hugging Face Hub, which needs huggingface_hub: pip install "
                            "huggingface_hub.") from None
    try:
        return snapshot_download(repo_id=repo_id, local_files_only=local_only)
    except LocalEntryNotFoundError:
        raise DownloadError(f"{url} is not in the Hugging Face cache and downloading is off (HF_HUB_OFFLINE or "
                            "REID_OFFLINE).") from None
    except Exception as e:  # huggingface_hub raises many types (HTTP, repository, revision, network)
        raise DownloadError(f"{url}: {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None


def by_hand(url: str) -> str:
    """An address a person can open in a browser for `url`."""
    kind = scheme(url)
    if kind == "gdrive":
        return f"{DRIVE_URL}/uc?export=download&id={url[len('gdrive://'):]}"
    if kind == "hf":
        repo_id, filename = hf_parts(url)
        return f"https://huggingface.co/{repo_id}/resolve/main/{filename}"
    return url


def first_source(urls: Tuple[str, ...]) -> Optional[str]:
    """The first source of `urls`, as an address for a browser (None when there is none)."""
    return by_hand(urls[0]) if urls else None


__all__ = ["DRIVE_ENV", "DRIVE_URL", "SCHEMES", "by_hand", "drive_confirmation", "drive_url", "first_source",
           "hf_download", "hf_parts", "hf_snapshot", "scheme"]
