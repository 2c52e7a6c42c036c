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
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from reid.utils.file_io import atomic_write
from reid.utils.npz_files import NpzError, is_int_vector, json_object, npz_names, read_npz, string_list
from reid.utils.path_kinds import check_file
from reid.utils.text_files import brief
from reid.utils.value_checks import BadRowsError, check_rows, unit_rows

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]
FORMAT_VERSION = 1
SAFETENSORS_HINT = "pip install safetensors, or save as .npz"


def row_labels(n: int, has: str, paths: Optional[Sequence[Any]], pids: Any,
               camids: Any) -> Tuple[Optional[List[str]], Optional[np.ndarray], Optional[np.ndarray]]:
    """`paths` as strings and `pids` / `camids` as int64 vectors (each None, or one per row of `n`);
    a ValueError "`has` but <count> <name>; they must match." otherwise (`has`: what holds the rows)."""
    out = []
    for name, value in (("paths", paths), ("pids", pids), ("camids", camids)):
        if value is not None:
            value = [str(p) for p in value] if name == "paths" else np.asarray(value, dtype=np.int64).reshape(-1)
            if len(value) != n:
                raise ValueError(f"{has} but {len(value)} {name}; they must match.")
        out.append(value)
    return out[0], out[1], out[2]


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
        self.paths, self.pids, self.camids = row_labels(n, f"Gallery has {n} feature rows", self.paths, self.pids,
                                                        self.camids)
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
    """Write `gallery` to `path` (.npz or .safetensors) atomically; returns `path`.

    A NaN/inf or all-zero feature row is refused (ValueError naming the row): such a gallery
    could only give wrong answers.
    """
    path = os.fspath(path)
    fmt = gallery_format(path)
    check_rows(gallery.feats, f"Gallery for {path}")
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


def _version(value: Any, path: str) -> int:
    try:
        version = int(np.asarray(value).item()) if not isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        raise _bad(path, f"its format_version is not one integer ({brief(value)})") from None
    if version > FORMAT_VERSION:
        raise _bad(path, f"format version {version} is newer than this toolkit's ({FORMAT_VERSION}); update it")
    return version


def _checked(path: str, feats: np.ndarray, paths: Any, pids: Optional[np.ndarray], camids: Optional[np.ndarray],
             meta: Any) -> Gallery:
    """The gallery of what a file holds (`meta`: its JSON text), each part checked; errors name the file."""
    if feats.dtype.kind != "f" or feats.ndim != 2 or feats.shape[1] == 0:
        raise _bad(path, f"its features are not a float array [N, D] with D >= 1 ({feats.dtype} {list(feats.shape)})")
    strings = string_list(paths)
    if strings is None:
        shown = paths.dtype if isinstance(paths, np.ndarray) else type(paths).__name__
        raise _bad(path, f"its paths are not a list of strings ({shown})")
    for what, value in (("pids", pids), ("camids", camids)):
        if value is not None and not is_int_vector(value):
            raise _bad(path, f"its {what} are not a 1-d integer array ({value.dtype} {list(value.shape)})")
    meta = json_object(meta)
    if meta is None:
        raise _bad(path, "its metadata is not a JSON object of strings")
    return Gallery(feats=feats, paths=strings, pids=pids, camids=camids, meta=meta)


def _read_npz(path: str) -> Gallery:
    # The evaluator's --save-features files hold query_* and gallery_* arrays.
    try:
        names = npz_names(path)
        prefix = "gallery_" if "feats" not in names and "gallery_feats" in names else ""
        arrays = read_npz(path, [prefix + "feats", prefix + "paths"],
                          optional=[prefix + "pids", prefix + "camids", "meta", "format_version"])
    except NpzError as e:
        raise _bad(path, e.reason) from None
    if "format_version" in arrays:
        _version(arrays["format_version"], path)
    return _checked(path, arrays[prefix + "feats"], arrays[prefix + "paths"], arrays.get(prefix + "pids"),
                    arrays.get(prefix + "camids"), arrays.get("meta", "{}"))


def _read_safetensors(path: str) -> Gallery:
    safe_open = require_safetensors().safe_open
    try:
        with safe_open(path, framework="numpy") as f:
            header = f.metadata() or {}
            keys = set(f.keys())
            for key in ("feats", "paths_json"):
                if key not in keys:
                    raise _bad(path, f"the tensor {key!r} is missing (found {sorted(keys)[:12]})")
            # Only the tensors a gallery has: an unused one is never read.
            arrays = {k: f.get_tensor(k) for k in ("feats", "paths_json", "pids", "camids") if k in keys}
    except Exception as e:  # safetensors raises its own error types for damaged headers
        if isinstance(e, ValueError) and str(e).startswith(f"Gallery file {path!r}"):
            raise
        raise _bad(path, f"{type(e).__name__}: {e}") from e
    _version(header.get("format_version", FORMAT_VERSION), path)
    try:
        paths = json.loads(arrays["paths_json"].tobytes().decode("utf-8"))
    except (ValueError, RecursionError) as e:
        raise _bad(path, f"its paths are not a JSON list ({type(e).__name__})") from None
    return _checked(path, arrays["feats"], paths, arrays.get("pids"), arrays.get("camids"), header.get("meta", "{}"))


def load_gallery(path: PathLike) -> Gallery:
    """Read a gallery written by :func:`save_gallery` and check it.

    Only the arrays a gallery has are read, each after its declared size is checked against
    the file (``reid.utils.npz_files``). Rows that are not unit length are normalised with a
    warning; an all-zero or non-finite row is refused. Errors name the file: missing file,
    unknown extension, missing arrays, damaged metadata, row counts that disagree.
    """
    path = os.fspath(path)
    fmt = gallery_format(path)
    check_file(path, "Gallery file", "name a gallery file written by tools/extract.py (.npz or .safetensors).",
               missing_hint="build it with tools/extract.py (e.g. python tools/extract.py --run RUN_DIR --input "
                            "IMAGES_DIR --output gallery.npz).")
    try:
        gallery = _read_npz(path) if fmt == "npz" else _read_safetensors(path)
    except ValueError as e:
        if str(e).startswith(f"Gallery file {path!r}"):
            raise
        raise _bad(path, str(e)) from e
    if len(gallery) == 0:
        raise _bad(path, "it holds no images")
    try:
        unit, changed = unit_rows(gallery.feats, "gallery")
    except BadRowsError as e:
        raise _bad(path, e.reason) from None
    if changed:
        # Features from another tool may come unnormalised; cosine search needs unit rows.
        logger.warning("Gallery file %s: %d of %d feature rows were not unit length; they were normalised "
                       "(cosine search compares directions only).", path, changed, len(gallery))
        gallery.feats = unit.numpy()
    return gallery


__all__: Sequence[str] = [
    "FORMAT_VERSION", "Gallery", "gallery_format", "load_gallery", "require_safetensors", "row_labels", "save_gallery",
]
