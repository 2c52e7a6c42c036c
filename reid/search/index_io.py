"""Saved search indexes: one file with the index and the gallery's paths, pids, camids, meta.

A saved index is a NumPy ``.npz`` container (zip, no pickle; any file name, we use
``.index``) holding:

* ``index_format`` = ``"circle-reid-index"`` and ``format_version`` (1), so that a foreign
  file or one from a newer toolkit is refused with a message naming it;
* ``backend`` ("exact", "faiss", "ivf", "hnsw") and ``params`` (JSON: nlist, nprobe, ...);
* ``feats`` float32 ``[N, D]`` (the "exact" backend: the normalised features) or
  ``faiss_index`` (faiss's own serialisation as uint8 bytes) and ``faiss_version``;
* optional ``paths`` (unicode), ``pids`` / ``camids`` (int64 ``[N]``) and ``meta`` (JSON
  strings about the model that made the features);
* for an approximate backend, the sample its recall was measured on
  (``reid.search.tuning.RecallSample``): ``recall_rows`` (int64 ``[S]``),
  ``recall_queries`` (float32 ``[S, D]``) and ``recall_truth`` (int64 ``[S, k]``), so that
  ``load_index(path, verify_recall=True)`` can measure the recorded recall again (an index
  written before these existed loads as before; older versions ignore them).

It is written atomically (temporary file, then rename). Saving and loading briefly hold a
second copy of the index in memory (faiss serialises to a byte array).
"""
from __future__ import annotations

import json
import logging
import os
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from reid.utils.file_io import atomic_write
from reid.utils.npz_files import NpzError, is_int_vector, json_object, npz_names, read_npz, string_list
from reid.utils.path_kinds import check_file
from reid.utils.text_files import brief
from reid.utils.value_checks import BadRowsError, unit_rows

from .faiss_format import FaissLayoutError, check_faiss_bytes
from .faiss_indexes import FaissBackedIndex
from .index_base import SearchIndex, require_faiss
from .indexes import INDEX_REGISTRY, ExactIndex
from .tuning import RecallSample, verify_recall as verify_index_recall

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]
INDEX_FORMAT = "circle-reid-index"
INDEX_FORMAT_VERSION = 1


def save_index(index: SearchIndex, path: PathLike) -> str:
    """Write `index` (any backend) with its gallery labels to `path` atomically; returns `path`."""
    path = os.fspath(path)
    arrays: Dict[str, np.ndarray] = dict(
        index_format=np.asarray(INDEX_FORMAT),
        format_version=np.asarray(INDEX_FORMAT_VERSION, dtype=np.int64),
        backend=np.asarray(index.backend),
        params=np.asarray(json.dumps(index.params(), sort_keys=True)),
        meta=np.asarray(json.dumps(index.meta, sort_keys=True)),
    )
    if isinstance(index, ExactIndex):
        arrays["feats"] = index.feats.cpu().numpy()
    elif isinstance(index, FaissBackedIndex):
        faiss = require_faiss(index.backend)
        arrays["faiss_index"] = faiss.serialize_index(index.index)
        arrays["faiss_version"] = np.asarray(faiss.__version__)
    else:
        raise TypeError(f"save_index cannot save a {type(index).__name__}; build indexes with build_index.")
    if index.paths is not None:
        arrays["paths"] = np.asarray(index.paths, dtype=np.str_)
    for name in ("pids", "camids"):
        if getattr(index, name) is not None:
            arrays[name] = getattr(index, name)
    sample = index.recall_sample
    if sample is not None:
        arrays.update(recall_rows=sample.rows, recall_queries=sample.queries, recall_truth=sample.truth)
    atomic_write(path, lambda f: np.savez(f, **arrays))
    return path


def _bad(path: str, what: str) -> ValueError:
    return ValueError(f"Index file {path!r} cannot be used: {what}.")


def _text(arrays: Dict[str, np.ndarray], key: str, default: Optional[str] = None) -> Optional[str]:
    return str(arrays[key]) if key in arrays else default


# Every entry a saved index may hold; anything else in the file is never read.
_SAMPLE = ("recall_rows", "recall_queries", "recall_truth")
_HEADER = ("format_version", "backend")
_OPTIONAL = ("params", "meta", "feats", "faiss_index", "faiss_version", "paths", "pids", "camids") + _SAMPLE


def _read_arrays(path: str) -> Dict[str, np.ndarray]:
    try:
        names = npz_names(path)
    except NpzError as e:
        raise _bad(path, f"it is not a circle-reid index or it is damaged ({e.reason})") from None
    if "index_format" not in names:
        if "feats" in names or "gallery_feats" in names:
            raise _bad(path, "it is a gallery file (tools/extract.py), not a saved index; build an index "
                             "from it (tools/search.py --gallery FILE --save-index INDEX)")
        raise _bad(path, f"it is not a circle-reid index (no 'index_format' entry; found {brief(list(names))})")
    try:
        return read_npz(path, ["index_format"], optional=_HEADER + _OPTIONAL)
    except NpzError as e:
        raise _bad(path, f"it is damaged ({e.reason})") from None


def load_index(path: PathLike, device: Optional[Union[str, torch.device]] = None,
               verify_recall: bool = False) -> SearchIndex:
    """Read an index written by :func:`save_index` (any backend), with its gallery labels.

    With `verify_recall`, an approximate index's recall@10 is measured again on its recorded
    sample (an index saved without one: on a sample of its stored vectors) and a warning names
    the file when the recorded ``measured_recall`` is off by more than 0.05
    (``reid.search.tuning.verify_recall``; the result is ``index.verified_recall``). The
    measurement holds the sample and one block of scores, never more than a small fixed amount.

    `device` places an "exact" index's features (faiss indexes stay on the CPU). Only the
    entries an index has are read, each after its declared size is checked against the file,
    and a faiss index's own sizes are checked before faiss allocates them
    (``reid.search.faiss_format``). Stored vectors must be unit length: an "exact" index's
    rows are normalised with a warning, a faiss index with rows of another length is refused.
    Errors name the file: missing, damaged or foreign files, a newer format, an unknown
    backend, a faiss that cannot read the stored index, labels that do not match the rows.
    """
    path = os.fspath(path)
    check_file(path, "Index file", "name an index saved with tools/search.py --save-index.",
               missing_hint="save one with save_index (or tools/search.py --gallery FILE --save-index INDEX).")
    arrays = _read_arrays(path)
    if _text(arrays, "index_format") != INDEX_FORMAT:
        raise _bad(path, f"its index_format is {brief(_text(arrays, 'index_format'))}, not {INDEX_FORMAT!r}")
    try:
        version = int(np.asarray(arrays.get("format_version", -1)).item())
    except (TypeError, ValueError, OverflowError):
        raise _bad(path, "its header is damaged (format_version is not one integer)") from None
    params = json_object(arrays.get("params", np.asarray("{}")), strings=False)
    meta = json_object(arrays.get("meta", np.asarray("{}")))
    if params is None or meta is None:
        raise _bad(path, "its header is damaged ('params' and 'meta' must be JSON objects)")
    if version > INDEX_FORMAT_VERSION:
        raise _bad(path, f"it was written in index format version {version} by a newer circle-reid (this one "
                         f"reads version {INDEX_FORMAT_VERSION}); update circle-reid or rebuild the index")
    if version < 1:
        raise _bad(path, f"its format version {version} is invalid; rebuild the index")
    backend = _text(arrays, "backend", "")
    if backend not in INDEX_REGISTRY:
        raise _bad(path, f"its backend {brief(backend)} is not one of this version's ({', '.join(INDEX_REGISTRY)}); "
                         "rebuild the index with this version")
    index = _restore_index(path, arrays, backend, params, device)
    paths = None
    if "paths" in arrays:
        paths = string_list(arrays["paths"])
        if paths is None:
            raise _bad(path, "its paths are not a list of strings")
    for name in ("pids", "camids"):
        if name in arrays and not is_int_vector(arrays[name]):
            raise _bad(path, f"its {name} are not a 1-d integer array")
    try:
        index.set_labels(paths=paths, pids=arrays.get("pids"), camids=arrays.get("camids"), meta=meta)
    except ValueError as e:
        raise _bad(path, str(e).rstrip(".")) from e
    index.recall_sample = _recall_sample(path, arrays, index)
    if verify_recall:
        index.verified_recall = verify_index_recall(index, path)
    return index


def _recall_sample(path: str, arrays: Dict[str, np.ndarray], index: SearchIndex) -> Optional[RecallSample]:
    """The recorded recall sample, checked against the index (None when the file has none)."""
    present = [name for name in _SAMPLE if name in arrays]
    if not present:
        return None
    if len(present) < len(_SAMPLE) or not index.TUNABLE:
        raise _bad(path, "its recall sample is incomplete or belongs to no approximate index; rebuild the index")
    rows, queries, truth = (arrays[name] for name in _SAMPLE)
    n = len(index)
    ok = (is_int_vector(rows) and queries.dtype == np.float32 and queries.ndim == 2 and truth.ndim == 2
          and np.issubdtype(truth.dtype, np.integer) and len(rows) == len(queries) == len(truth) > 0
          and queries.shape[1] == index.dim and truth.shape[1] >= 1)
    if ok:
        rows, truth = rows.astype(np.int64), truth.astype(np.int64)
        ok = bool(rows.min() >= 0 and rows.max() < n and truth.min() >= 0 and truth.max() < n
                  and np.isfinite(queries).all())
    if not ok:
        raise _bad(path, f"its recall sample does not fit its {n} x {index.dim} index; rebuild the index")
    return RecallSample(rows, queries, truth)


def _restore_index(path: str, arrays: Dict[str, np.ndarray], backend: str, params: Dict[str, Any],
                   device: Optional[Union[str, torch.device]]) -> SearchIndex:
    cls = INDEX_REGISTRY.get(backend)
    if cls is ExactIndex:
        feats = arrays.get("feats")
        if feats is None or feats.ndim != 2 or feats.dtype != np.float32 or not feats.shape[0] or not feats.shape[1]:
            raise _bad(path, "its 'feats' array is missing or not float32 [N, D]")
        try:
            unit, changed = unit_rows(feats, "index")
        except BadRowsError as e:
            raise _bad(path, f"{e.reason}; rebuild the index from the gallery") from None
        if changed:
            logger.warning("Index file %s: %d of %d rows were not unit length; they were normalised (cosine search "
                           "compares directions only).", path, changed, len(feats))
            feats = unit.numpy()
        return ExactIndex.from_unit_rows(feats, device=device)
    if "faiss_index" not in arrays:
        raise _bad(path, f"its {backend!r} index data ('faiss_index') is missing")
    try:
        faiss = require_faiss(backend)
    except ImportError as e:
        raise ImportError(f"Index file {path!r}: {e}") from e
    blob = arrays["faiss_index"]
    if blob.dtype != np.uint8 or blob.ndim != 1:
        raise _bad(path, "its faiss index data is not a byte array")
    written_with = _text(arrays, "faiss_version", "an unknown version")
    try:
        check_faiss_bytes(blob.tobytes())
    except FaissLayoutError as e:
        raise _bad(path, f"its faiss index (written with faiss {written_with[:40]}) is damaged or foreign ({e}); "
                         "rebuild the index") from None
    try:
        raw = faiss.deserialize_index(np.ascontiguousarray(blob))
    except Exception as e:  # faiss raises RuntimeError with its C++ message
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise _bad(path, f"faiss {faiss.__version__} cannot read its index (written with faiss "
                         f"{brief(written_with)}): {brief(first)}; rebuild the index") from e
    try:
        index = cls.from_faiss(raw, params)
    except ValueError as e:
        raise _bad(path, str(e).rstrip(".")) from e
    bad = index.row_norm_problem()
    if bad:
        raise _bad(path, f"{bad}; its scores would be wrong: rebuild the index from the gallery")
    return index


__all__: Sequence[str] = ["INDEX_FORMAT", "INDEX_FORMAT_VERSION", "load_index", "save_index"]
