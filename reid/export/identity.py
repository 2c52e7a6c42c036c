"""What identifies a model's weights across files and formats, and what an exported file records of them.

Features are comparable only when they come from the same weights. A file's name says little (a
run's ``model_final.pth`` is rewritten by every run in that folder, an exported ``model.onnx``
may come from any of them), so the weights are identified by a hash of the model's state:

``weights_sha256`` = SHA-256 over the model's ``state_dict()`` in sorted key order, each entry as
its key (UTF-8), its dtype, its shape and its tensor's bytes (CPU, C order). The same weights give
the same hash whatever file they were loaded from (our checkpoint, a fast-reid or torchreid file
converted on loading, a copy under another name) and on any device. BatchNorm's
``num_batches_tracked`` counters are left out: they never change a feature, and converted
foreign files do not carry them.

``tools/export.py`` stores the hash and the weights file's name in the exported file's metadata
(the ``circle_reid`` JSON: ONNX ``metadata_props``, the ``.pt2`` extra file; BoxMOT exports are
ONNX files and carry the same record): ``weights_sha256`` and ``weights_file``.
"""
from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

from reid.utils.npz_files import json_object

PathLike = Union[str, "os.PathLike[str]"]
HASH_PREFIX = "sha256:"
# Entries of a state dict that never change a feature (BatchNorm's step counter).
_IGNORED_SUFFIXES = ("num_batches_tracked",)
_CHUNK = 1 << 20


def state_hash(state: Dict[str, torch.Tensor]) -> str:
    """``"sha256:<hex>"`` of a state dict: sorted keys, each key, dtype, shape and tensor bytes."""
    digest = hashlib.sha256()
    for key in sorted(state):
        if key.endswith(_IGNORED_SUFFIXES):
            continue
        t = state[key].detach().to("cpu").contiguous()
        digest.update(f"{key}\0{str(t.dtype)}\0{list(t.shape)}\0".encode("utf-8"))
        if t.numel():
            digest.update(t.reshape(-1).view(torch.uint8).numpy().data)
    return HASH_PREFIX + digest.hexdigest()


def weights_hash(model: nn.Module) -> str:
    """:func:`state_hash` of `model`'s state dict (see the module docstring)."""
    return state_hash(model.state_dict())


def file_hash(path: PathLike) -> str:
    """``"sha256:<hex>"`` of a file's bytes (read in chunks)."""
    digest = hashlib.sha256()
    with open(os.fspath(path), "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            digest.update(chunk)
    return HASH_PREFIX + digest.hexdigest()


def weights_identity(model: nn.Module, weights_file: Optional[PathLike] = None) -> Dict[str, str]:
    """What an exported file records of its weights: ``weights_sha256`` and (when known) the name
    of the weights file it was exported from, ``weights_file``."""
    record = {"weights_sha256": weights_hash(model)}
    if weights_file:
        record["weights_file"] = os.path.basename(os.fspath(weights_file))
    return record


def _is_hash(value: Any) -> bool:
    hexpart = value[len(HASH_PREFIX):] if isinstance(value, str) and value.startswith(HASH_PREFIX) else ""
    return len(hexpart) == 64 and all(c in "0123456789abcdef" for c in hexpart)


def recorded_identity(text: Optional[str]) -> Optional[Dict[str, str]]:
    """The weights identity an exported file's ``circle_reid`` metadata text records, or None when
    it records none (a file exported before identities were written, or from elsewhere). A
    recorded hash that is not one (damaged or edited) raises ValueError."""
    record = json_object(text, strings=False) or {}
    if "weights_sha256" not in record:
        return None
    value, name = record["weights_sha256"], record.get("weights_file", "")
    if not _is_hash(value) or not isinstance(name, str):
        raise ValueError(f"its recorded weights identity is damaged (weights_sha256 {str(value)[:80]!r}); "
                         "export the model again with tools/export.py")
    return {"weights_sha256": value, "weights_file": os.path.basename(name)}


def short(digest: str) -> str:
    """The first 12 hex digits of a ``sha256:`` hash, for messages."""
    return digest[len(HASH_PREFIX):][:12] if digest.startswith(HASH_PREFIX) else digest[:12]


__all__ = ["HASH_PREFIX", "file_hash", "recorded_identity", "short", "state_hash", "weights_hash", "weights_identity"]
