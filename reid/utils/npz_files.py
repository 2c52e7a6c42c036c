"""Reading named arrays from a NumPy ``.npz`` file without trusting what it declares.

An ``.npz`` is a zip of ``.npy`` members. ``np.load`` reads a member only when asked, but a
caller that asks for every member reads a 3 GB member it never uses, and a member's header
(its shape) and the zip directory (its size) are just numbers that a hostile file sets at
will. :func:`read_npz` therefore

* reads only the members it is asked for (``name`` or ``name.npy``),
* refuses object arrays (they would need pickle, which can run code),
* checks, before anything is allocated, that each member's declared shape fits the size the
  zip directory gives it, that a stored (uncompressed) member lies inside the file, and that a
  compressed one expands at most :data:`MAX_RATIO` times (or up to :data:`SMALL_MEMBER` bytes):
  deflate cannot do better than about 1000:1 on real data, and arrays of features or paths
  come nowhere near that.

Errors are ValueError with a message that names the file and the member. The helpers at the
end check what the arrays hold (strings, integer labels, a JSON object) without trusting it.
"""
from __future__ import annotations

import json
import os
import zipfile
from typing import Any, Dict, Iterable, List, Optional, Sequence

import numpy as np

#: Largest expansion accepted for a compressed member (uncompressed / compressed size).
MAX_RATIO = 200
#: A compressed member may always expand to this many bytes, whatever its ratio.
SMALL_MEMBER = 64 << 20


class NpzError(ValueError):
    """The file is not a readable ``.npz`` or one of its members cannot be trusted.

    ``reason`` is the message without the file's name, for callers that name it themselves.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path!r}: {reason}")
        self.path, self.reason = path, reason


def _member_names(zf: zipfile.ZipFile) -> Dict[str, zipfile.ZipInfo]:
    return {info.filename[:-4] if info.filename.endswith(".npy") else info.filename: info
            for info in zf.infolist()}


def npz_names(path: str) -> Sequence[str]:
    """The array names in ``.npz`` file `path` (nothing is read but the zip directory)."""
    try:
        with open(path, "rb") as f:
            if f.read(6) == b"\x93NUMPY":
                raise NpzError(path, "it is not a readable .npz file: it holds a single NumPy array (.npy)")
        with zipfile.ZipFile(path) as zf:
            return sorted(_member_names(zf))
    except NpzError:
        raise
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise NpzError(path, f"it is not a readable .npz file ({type(e).__name__}: {e})") from None


def _check_sizes(path: str, name: str, info: zipfile.ZipInfo, file_size: int) -> None:
    if info.compress_type == zipfile.ZIP_STORED:
        if info.compress_size != info.file_size or info.header_offset + info.compress_size > file_size:
            raise NpzError(path, f"array {name!r} claims {info.file_size} bytes, more than the file holds "
                           f"({file_size} bytes); the file is damaged or crafted")
    elif info.file_size > max(SMALL_MEMBER, MAX_RATIO * info.compress_size):
        raise NpzError(path, f"array {name!r} would expand from {info.compress_size} to {info.file_size} bytes "
                       f"(more than {MAX_RATIO}x); refusing to decompress it")


def _read_member(zf: zipfile.ZipFile, path: str, name: str, info: zipfile.ZipInfo) -> np.ndarray:
    with zf.open(info) as f:
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f"unsupported .npy version {version}")
        except ValueError as e:
            raise NpzError(path, f"array {name!r} has no valid .npy header ({e})") from None
        if dtype.hasobject:
            raise NpzError(path, f"array {name!r} holds Python objects, which would need pickle (it can run "
                           "code); it is refused")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        declared = count * dtype.itemsize
        if declared < 0 or declared > info.file_size:
            raise NpzError(path, f"array {name!r} declares shape {shape} ({declared} bytes) but its member holds "
                           f"{info.file_size} bytes; the file is damaged or crafted")
        # A bytearray: the array is writeable without a second copy (1 GB of features stays 1 GB).
        data = bytearray(declared)
        view, got = memoryview(data), 0
        while got < declared:
            n = f.readinto(view[got:])
            if not n:
                raise NpzError(path, f"array {name!r} is truncated ({got} of {declared} bytes)")
            got += n
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C")


def read_npz(path: str, names: Iterable[str], optional: Iterable[str] = ()) -> Dict[str, np.ndarray]:
    """The arrays `names` (required) and `optional` (when present) of ``.npz`` file `path`.

    Members not asked for are never read. Raises NpzError (a ValueError) naming the file for a
    damaged or foreign file, a missing required array, or a member that fails the checks in
    the module docstring.
    """
    names, optional = list(names), list(optional)
    try:
        file_size = os.path.getsize(path)
        with zipfile.ZipFile(path) as zf:
            members = _member_names(zf)
            missing = [n for n in names if n not in members]
            if missing:
                found = sorted(members)
                shown = ", ".join(found[:12]) + (", ..." if len(found) > 12 else "")
                raise NpzError(path, f"it has no array {missing[0]!r} (found: {shown or 'none'})")
            out = {}
            for name in names + [n for n in optional if n in members]:
                info = members[name]
                _check_sizes(path, name, info, file_size)
                out[name] = _read_member(zf, path, name, info)
            return out
    except NpzError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as e:
        raise NpzError(path, f"it is not a readable .npz file ({type(e).__name__}: {e})") from None


def string_list(value: Any) -> Optional[List[str]]:
    """`value` (a 0/1-d unicode array, or a list of str) as a list of str; None for anything else."""
    if isinstance(value, np.ndarray) and value.dtype.kind == "U" and value.ndim <= 1:
        return [str(p) for p in value.reshape(-1)]
    if isinstance(value, list) and all(isinstance(p, str) for p in value):
        return value
    return None


def is_int_vector(value: Any) -> bool:
    """Whether `value` is a 1-d integer array (pids, camids)."""
    return isinstance(value, np.ndarray) and value.dtype.kind in "iu" and value.ndim == 1


def json_object(text: Any, strings: bool = True) -> Optional[Dict[str, Any]]:
    """The JSON object in `text` (a str or a 0-d unicode array), its values as strings when
    `strings`; None when it is not one (invalid JSON, too deeply nested, a list, a number)."""
    if isinstance(text, np.ndarray):
        if text.dtype.kind != "U" or text.size != 1:
            return None
        text = str(text.reshape(-1)[0])
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    return {str(k): str(v) for k, v in data.items()} if strings else data


__all__ = ["MAX_RATIO", "NpzError", "SMALL_MEMBER", "is_int_vector", "json_object", "npz_names", "read_npz",
           "string_list"]
