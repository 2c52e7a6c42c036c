"""Download helper for the datasets that have a public mirror.

Only Market-1501 has one that can be checked: the Google Drive file the dataset's authors
link from their page (``Market-1501-v15.09.15.zip``). DukeMTMC-reID was withdrawn by its
authors in 2019 and MSMT17 is only given out after signing the authors' agreement, so for
those the helper explains the manual steps instead of downloading anything. Mirrors can
disappear; datasets/README.md has the manual steps for every dataset.

    python -m reid.data.download market1501 datasets
"""
from __future__ import annotations

import argparse
import os
import shutil
import zipfile
import zlib
from typing import Dict, Optional

from .datasets.base import README_HINT

#: name -> Google Drive file id, archive name, folder the archive unpacks to.
GDRIVE_MIRRORS: Dict[str, Dict[str, str]] = {
    "market1501": {
        "file_id": "0B8-rUzbwVRk0c054eEozWG9COHM",
        "archive": "Market-1501-v15.09.15.zip",
        "folder": "Market-1501-v15.09.15",
    },
}

#: name -> why there is no automatic download and what to do instead.
MANUAL_ONLY: Dict[str, str] = {
    "dukemtmc": (
        "DukeMTMC-reID was withdrawn by its authors in 2019 and has no sanctioned download. "
        "Do not use it for new work unless you already hold a copy under its original terms; "
        "if you do, unpack it so that <root>/DukeMTMC-reID/bounding_box_train exists."
    ),
    "msmt17": (
        "MSMT17 is distributed by its authors after you sign their release agreement (see the "
        "dataset page linked from datasets/README.md). Unpack the archive you receive so that "
        "<root>/MSMT17_V1/ (or MSMT17_V2/) holds the image folders and the list_*.txt files."
    ),
    "cuhk03": (
        "CUHK03 is distributed by its authors for research use (terms on its page, linked from "
        "datasets/README.md). Unzip cuhk03_release.zip so that <root>/cuhk03/cuhk03_release/cuhk-03.mat "
        "exists, and for the new 767/700 protocol put cuhk03_new_protocol_config_{labeled,detected}.mat "
        "in <root>/cuhk03/."
    ),
    "veri": (
        "VeRi-776 is distributed by its authors for research use on request (see the dataset page linked from "
        "datasets/README.md). Unpack VeRi.zip so that <root>/VeRi/ holds image_train/, image_query/ and image_test/."
    ),
    "vehicleid": (
        "VehicleID is distributed by Peking University for research use, not commercially, on request (see the "
        "dataset page linked from datasets/README.md). Unpack it so that <root>/VehicleID_V1.0/ holds image/ and "
        "train_test_split/."
    ),
    "veriwild": (
        "VERI-Wild is distributed by its authors for research use on request (see the dataset page linked from "
        "datasets/README.md). Unpack it so that <root>/VERI-Wild/ holds images/ and train_test_split/."
    ),
    "custom": "The custom dataset is your own images plus list files; nothing to download.",
    "synthetic": "The synthetic dataset is generated on first use; nothing to download.",
}


class DownloadUnavailableError(RuntimeError):
    """The dataset cannot be downloaded automatically; the message gives the manual steps."""


def download_dataset(name: str, root: str = "datasets", keep_archive: bool = False) -> str:
    """Fetch and unpack dataset `name` into `root` with gdown; returns the dataset folder.

    An archive already in `root` (e.g. downloaded by hand) is unpacked without gdown. Raises
    DownloadUnavailableError with manual steps for datasets without a public mirror, when
    gdown is missing or the mirror fails, and when the archive is damaged (it is then deleted).
    """
    key = name.lower()
    if key not in GDRIVE_MIRRORS:
        why = MANUAL_ONLY.get(key, f"No download mirror is known for {name!r}.")
        raise DownloadUnavailableError(f"{why} {README_HINT}")
    mirror = GDRIVE_MIRRORS[key]
    folder = os.path.join(root, mirror["folder"])
    if os.path.isdir(folder):
        return folder
    archive = os.path.join(root, mirror["archive"])
    by_hand = (
        f"Download {mirror['archive']} by hand from https://drive.google.com/file/d/{mirror['file_id']}/view "
        f"into {root}, then unzip it there or run this again (it unpacks an archive it finds there). {README_HINT}"
    )
    # An archive already in the root (e.g. downloaded by hand) needs no gdown.
    if not os.path.isfile(archive):
        _fetch(mirror, root, archive, by_hand)
    tmp = os.path.join(root, f".unpack-{mirror['folder']}")
    try:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
    except (zipfile.BadZipFile, EOFError, zlib.error) as e:
        # Keeping a damaged archive (often Drive's HTML quota page saved under the zip's name)
        # would make every later attempt fail the same way.
        shutil.rmtree(tmp, ignore_errors=True)
        os.remove(archive)
        raise DownloadUnavailableError(
            f"{archive} is not a valid zip archive ({type(e).__name__}: {e}); it was deleted. The mirror "
            f"may have sent an error page (e.g. Google Drive's download quota). {by_hand}"
        ) from None
    unpacked = os.path.join(tmp, mirror["folder"])
    if not os.path.isdir(unpacked):
        found = sorted(os.listdir(tmp))
        shutil.rmtree(tmp, ignore_errors=True)
        raise DownloadUnavailableError(
            f"{archive} does not contain the folder {mirror['folder']}/ (found: {found}); "
            f"the mirror may have changed. Unpack it by hand. {README_HINT}"
        )
    os.replace(unpacked, folder)  # the dataset folder appears only once fully unpacked
    shutil.rmtree(tmp)
    if not keep_archive:
        os.remove(archive)
    return folder


def _fetch(mirror: Dict[str, str], root: str, archive: str, by_hand: str) -> None:
    """Download `mirror`'s archive to `archive` with gdown; DownloadUnavailableError on failure."""
    try:
        import gdown
    except ImportError:
        raise DownloadUnavailableError(f"gdown is not installed (pip install gdown). {by_hand}") from None
    os.makedirs(root, exist_ok=True)
    part = archive + ".part"  # gdown writes here; renamed only when complete
    try:
        result: Optional[str] = gdown.download(id=mirror["file_id"], output=part, quiet=False)
    except Exception as e:  # gdown raises its own error types for quota, HTML pages, network
        result = None
        print(f"gdown: {type(e).__name__}: {e}")
    if not result or not os.path.isfile(part):
        raise DownloadUnavailableError(
            f"Downloading {mirror['archive']} from Google Drive failed (the mirror may be gone or over "
            f"its quota). {by_hand}"
        )
    os.replace(part, archive)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="Download a re-ID dataset where a public mirror exists.")
    ap.add_argument("name", help=f"one of: {', '.join(sorted(set(GDRIVE_MIRRORS) | set(MANUAL_ONLY)))}")
    ap.add_argument("root", nargs="?", default="datasets", help="dataset root (DATASETS.ROOT)")
    ap.add_argument("--keep-archive", action="store_true")
    args = ap.parse_args(argv)
    try:
        print(download_dataset(args.name, args.root, args.keep_archive))
    except DownloadUnavailableError as e:
        raise SystemExit(str(e))


if __name__ == "__main__":
    main()
