"""Saved features (``tools/test.py --save-features``): one ``.npz`` file per evaluation, so
metrics and re-ranking can be recomputed without running the model again."""
from __future__ import annotations

from typing import Tuple

import numpy as np
import torch

from ..utils.file_io import atomic_write
from ..utils.npz_files import NpzError, npz_names, read_npz, string_list
from ..utils.path_kinds import check_file
from .extract import Features

# Keys of the file (docs/architecture.md); every one must be present on load.
SPLITS = ("query", "gallery")
FIELDS = ("feats", "pids", "camids", "paths")
KEYS = tuple(f"{s}_{f}" for s in SPLITS for f in FIELDS)


def _arrays(split: str, f: Features) -> dict:
    feats = f.feats.detach().to("cpu", torch.float32).numpy()
    return {
        f"{split}_feats": feats,
        f"{split}_pids": np.asarray(f.pids, dtype=np.int64),
        f"{split}_camids": np.asarray(f.camids, dtype=np.int64),
        # Fixed-width unicode, so the file loads without pickle (allow_pickle=False).
        f"{split}_paths": np.asarray([str(p) for p in f.paths], dtype=np.str_),
    }


def save_features(path: str, query: Features, gallery: Features) -> None:
    """Write query and gallery features to `path` (exactly this name; ``.npz`` is not
    appended) atomically: a crash never leaves a half-written file."""
    arrays = {**_arrays("query", query), **_arrays("gallery", gallery)}
    atomic_write(path, lambda fobj: np.savez(fobj, **arrays))


def load_features(path: str) -> Tuple[Features, Features]:
    """Read a file written by `save_features`; returns ``(query, gallery)``.

    Raises:
        FileNotFoundError: no file at `path`.
        ValueError: not a readable ``.npz``, missing keys, arrays of the wrong kind, or fields
            of different lengths (the message names the file and what is wrong).
    """
    check_file(path, "Feature file", "name a .npz file written by tools/test.py --save-features.",
               missing_hint="write one with tools/test.py --save-features.")
    # Only the arrays named in KEYS are read, each after its declared size is checked.
    try:
        names = npz_names(path)
        missing = [k for k in KEYS if k not in names]
        if missing:
            raise ValueError(
                f"Feature file {path!r} lacks {', '.join(missing)}; it was not written by "
                "save_features (expected keys: " + ", ".join(KEYS) + ")."
            )
        arrays = read_npz(path, KEYS)
    except NpzError as e:
        raise ValueError(f"Feature file {path!r}: {e.reason}; write it again.") from None
    out = []
    for split in SPLITS:
        feats = arrays[f"{split}_feats"]
        if feats.ndim != 2 or feats.dtype.kind != "f":
            raise ValueError(f"Feature file {path!r}: {split}_feats must be a 2-D float array, got {feats.dtype} "
                             f"{feats.shape}.")
        n = feats.shape[0]
        for field in FIELDS[1:]:
            a = arrays[f"{split}_{field}"]
            if a.ndim != 1 or a.shape[0] != n:
                raise ValueError(
                    f"Feature file {path!r}: {split}_{field} has shape {a.shape} but {split}_feats "
                    f"has {n} rows; the file is inconsistent, write it again."
                )
            if (a.dtype.kind not in "iu") if field != "paths" else string_list(a) is None:
                raise ValueError(f"Feature file {path!r}: {split}_{field} holds {a.dtype} values; write it again.")
        out.append(
            Features(
                feats=torch.from_numpy(feats.astype(np.float32, copy=False)),
                pids=arrays[f"{split}_pids"].astype(np.int64, copy=False),
                camids=arrays[f"{split}_camids"].astype(np.int64, copy=False),
                paths=[str(p) for p in arrays[f"{split}_paths"]],
            )
        )
    if out[0].feats.shape[1] != out[1].feats.shape[1]:
        raise ValueError(
            f"Feature file {path!r}: query_feats has dimension {out[0].feats.shape[1]} but "
            f"gallery_feats has {out[1].feats.shape[1]}."
        )
    return out[0], out[1]
