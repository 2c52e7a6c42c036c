"""Saved galleries: features with their image paths (and optional identities and cameras).

Two file formats, chosen by extension:

* ``.npz`` (default, NumPy only): arrays ``feats`` float32 ``[N, D]``, ``paths`` (unicode),
  optional ``pids`` / ``camids`` int64 ``[N]``, ``format_version`` and ``meta`` (a JSON
  string). It loads without pickle, so opening a file from someone else runs no code.
* ``.safetensors`` (needs the ``safetensors`` package): the same arrays; safetensors holds
  only numeric tensors, so the paths are stored as UTF-8 bytes of a JSON list
  (``paths_json``), and the metadata in the file header.

Files are written atomically (temp file, then rename), and loading checks that every array
has the same number of rows, so a gallery and its paths can never silently disagree.
The evaluator's ``--save-features`` files (``gallery_feats``, ``gallery_paths``, ...) load too.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import numpy as np

from reid.utils.file_io import atomic_write

PathLike = Union[str, "os.PathLike[str]"]
FORMAT_VERSION = 1
FORMATS = ("npz", "safetensors")
SAFETENSORS_HINT = "pip install safetensors, or save as .npz"


@dataclass
class Gallery:
    """Features ``[N, D]`` and the image path of each row; pids/camids optional.

    `meta` holds free-form strings about how the features were made (model, weights, input
    size), so a search can tell when a query model differs from the gallery's.
    """

    feats: np.ndarray
    paths: List[str]
    pids: Optional[np.ndarray] = None
    camids: Optional[np.ndarray] = None
    meta: Dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.feats = np.asarray(self.feats, dtype=np.float32)
        self.paths = [str(p) for p in self.paths]
        if self.feats.ndim != 2:
            raise ValueError(f"Gallery features must be a 2-d array [N, D], got shape {self.feats.shape}.")
        n = self.feats.shape[0]
        if len(self.paths) != n:
            raise ValueError(f"Gallery has {n} feature rows but {len(self.paths)} paths; they must match.")
        for name in ("pids", "camids"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=np.int64).reshape(-1)
                if len(value) != n:
                    raise ValueError(f"Gallery has {n} feature rows but {len(value)} {name}; they must match.")
                setattr(self, name, value)
        self.meta = {str(k): str(v) for k, v in (self.meta or {}).items()}

    def __len__(self) -> int:
        return int(self.feats.shape[0])

    @property
    def dim(self) -> int:
        """Feature width D."""
        return int(self.feats.shape[1])


def gallery_format(path: PathLike) -> str:
    """"npz" or "safetensors" from the extension of `path`."""
    low = os.fspath(path).lower()
    if low.endswith(".npz"):
        return "npz"
    if low.endswith(".safetensors"):
        return "safetensors"
    raise ValueError(
        f"Unknown gallery file type {os.fspath(path)!r}: use a name ending in .npz (default) "
        "or .safetensors."
    )


def require_safetensors():
    """The safetensors module (with its numpy helpers), or an ImportError saying what to do."""
    try:
        import safetensors
        import safetensors.numpy  # noqa: F401  (makes safetensors.numpy available)
    except ImportError as e:
        raise ImportError(f"The .safetensors format needs the safetensors package: {SAFETENSORS_HINT}.") from e
    return safetensors


def save_gallery(gallery: Gallery, path: PathLike) -> str:
    """Write `gallery` to `path` (.npz or .safetensors) atomically; returns `path`."""
    path = os.fspath(path)
    fmt = gallery_format(path)
    optional = {k: v for k, v in (("pids", gallery.pids), ("camids", gallery.camids)) if v is not None}
    meta_json = json.dumps(gallery.meta, sort_keys=True)
    if fmt == "npz":
        arrays = dict(
            feats=gallery.feats,
            paths=np.asarray(gallery.paths, dtype=np.str_),
            format_version=np.asarray(FORMAT_VERSION, dtype=np.int64),
            meta=np.asarray(meta_json, dtype=np.str_),
            **optional,
        )
        atomic_write(path, lambda f: np.savez(f, **arrays))
    else:
        paths_json = np.frombuffer(json.dumps(gallery.paths).encode("utf-8"), dtype=np.uint8)
        tensors = dict(feats=np.ascontiguousarray(gallery.feats), paths_json=paths_json.copy(), **optional)
        header = {"format_version": str(FORMAT_VERSION), "meta": meta_json}
        data = require_safetensors().numpy.save(tensors, metadata=header)
        atomic_write(path, lambda f: f.write(data))
    return path


def _bad(path: str, what: str) -> ValueError:
    return ValueError(
        f"Gallery file {path!r} is not a valid gallery: {what}. Re-create it with tools/extract.py."
    )


def _read_npz(path: str) -> Gallery:
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except ValueError as e:  # pickled object arrays, damaged zip members
        raise _bad(path, f"it cannot be read without pickle ({e})") from e
    except Exception as e:  # zipfile.BadZipFile, EOFError, OSError for truncated files
        raise _bad(path, f"{type(e).__name__}: {e}") from e
    # The evaluator's --save-features files hold query_* and gallery_* arrays.
    prefix = "gallery_" if "feats" not in arrays and "gallery_feats" in arrays else ""
    for key in ("feats", "paths"):
        if prefix + key not in arrays:
            raise _bad(path, f"the array {prefix + key!r} is missing (found {sorted(arrays)})")
    meta: Dict[str, str] = {}
    if "meta" in arrays:
        meta = json.loads(str(arrays["meta"]))
    version = int(arrays["format_version"]) if "format_version" in arrays else FORMAT_VERSION
    if version > FORMAT_VERSION:
        raise _bad(path, f"format version {version} is newer than this toolkit's ({FORMAT_VERSION}); update it")
    return Gallery(
        feats=arrays[prefix + "feats"],
        paths=[str(p) for p in arrays[prefix + "paths"].reshape(-1)],
        pids=arrays.get(prefix + "pids"),
        camids=arrays.get(prefix + "camids"),
        meta=meta,
    )


def _read_safetensors(path: str) -> Gallery:
    safe_open = require_safetensors().safe_open
    try:
        with safe_open(path, framework="numpy") as f:
            header = f.metadata() or {}
            arrays = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for damaged headers
        raise _bad(path, f"{type(e).__name__}: {e}") from e
    for key in ("feats", "paths_json"):
        if key not in arrays:
            raise _bad(path, f"the tensor {key!r} is missing (found {sorted(arrays)})")
    version = int(header.get("format_version", FORMAT_VERSION))
    if version > FORMAT_VERSION:
        raise _bad(path, f"format version {version} is newer than this toolkit's ({FORMAT_VERSION}); update it")
    paths = json.loads(arrays["paths_json"].tobytes().decode("utf-8"))
    return Gallery(
        feats=arrays["feats"],
        paths=paths,
        pids=arrays.get("pids"),
        camids=arrays.get("camids"),
        meta=json.loads(header.get("meta", "{}")),
    )


def load_gallery(path: PathLike) -> Gallery:
    """Read a gallery written by :func:`save_gallery` and check it.

    Errors name the file: missing file, unknown extension, missing arrays, row counts that
    disagree, non-finite features.
    """
    path = os.fspath(path)
    fmt = gallery_format(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Gallery file {path!r} does not exist; build it with tools/extract.py "
            "(e.g. python tools/extract.py --run RUN_DIR --input IMAGES_DIR --output gallery.npz)."
        )
    try:
        gallery = _read_npz(path) if fmt == "npz" else _read_safetensors(path)
    except ValueError as e:
        if str(e).startswith(f"Gallery file {path!r}"):
            raise
        raise _bad(path, str(e)) from e
    if len(gallery) == 0:
        raise _bad(path, "it holds no images")
    if not np.isfinite(gallery.feats).all():
        raise _bad(path, "its features contain NaN or inf")
    return gallery


__all__: Sequence[str] = [
    "FORMATS", "FORMAT_VERSION", "Gallery", "gallery_format", "load_gallery", "require_safetensors", "save_gallery",
]
