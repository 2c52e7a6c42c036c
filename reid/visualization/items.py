"""Normalise the many shapes "query/gallery info" arrives in into three aligned arrays.

Callers hold identities in different forms: dataset lists of ``(path, pid, camid)``, the
evaluator's ``Features`` (attributes ``paths``/``pids``/``camids``), or the arrays of a saved
features file. Everything below this module works on one form only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np


@dataclass(frozen=True)
class Items:
    """Image paths with their identities and cameras, index-aligned."""

    paths: np.ndarray  # str [N]
    pids: np.ndarray  # int64 [N]
    camids: np.ndarray  # int64 [N]

    def __len__(self) -> int:
        return len(self.paths)


def as_items(info: Any, what: str = "items") -> Items:
    """Turn `info` into :class:`Items`.

    Accepted: an :class:`Items`; an object with ``paths``, ``pids`` and ``camids`` attributes
    (e.g. ``reid.evaluation.Features``); a mapping with those keys; or a sequence of
    ``(path, pid, camid)`` tuples (a dataset's ``.query``/``.gallery`` list). `what` names the
    argument in error messages.
    """
    if isinstance(info, Items):
        return info
    if all(hasattr(info, k) for k in ("paths", "pids", "camids")):
        paths, pids, camids = info.paths, info.pids, info.camids
    elif isinstance(info, Mapping):
        missing = [k for k in ("paths", "pids", "camids") if k not in info]
        if missing:
            raise ValueError(f"{what}: the mapping lacks key(s) {missing}; give 'paths', 'pids' and 'camids'.")
        paths, pids, camids = info["paths"], info["pids"], info["camids"]
    elif isinstance(info, Sequence) and not isinstance(info, (str, bytes)):
        rows = list(info)
        bad = [i for i, r in enumerate(rows) if not (isinstance(r, (tuple, list)) and len(r) >= 3)]
        if bad:
            raise ValueError(
                f"{what}: entry {bad[0]} is {rows[bad[0]]!r}, not a (path, pid, camid) tuple; "
                "pass a dataset list such as dataset.query, or a Features object."
            )
        paths, pids, camids = ([r[i] for r in rows] for i in range(3))
    else:
        raise TypeError(
            f"{what}: expected a list of (path, pid, camid), a Features object or a mapping with "
            f"paths/pids/camids, got {type(info).__name__}."
        )
    paths_a = np.asarray([str(p) for p in paths], dtype=object)
    pids_a = _to_int_array(pids)
    camids_a = _to_int_array(camids)
    if not (len(paths_a) == len(pids_a) == len(camids_a)):
        raise ValueError(
            f"{what}: {len(paths_a)} paths, {len(pids_a)} pids and {len(camids_a)} camids; "
            "they must have the same length (one per image)."
        )
    return Items(paths_a, pids_a, camids_a)


def _to_int_array(values: Any) -> np.ndarray:
    """int64 numpy array from a list, numpy array or torch tensor."""
    if hasattr(values, "detach"):  # torch tensor: avoid importing torch here
        values = values.detach().cpu().numpy()
    return np.asarray(values).astype(np.int64).reshape(-1)


def to_numpy_2d(x: Any, what: str) -> np.ndarray:
    """A float32 2-D numpy array from a numpy array or torch tensor; errors name `what`."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().float().numpy()
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be a 2-D array [N, D], got shape {arr.shape}.")
    return arr
