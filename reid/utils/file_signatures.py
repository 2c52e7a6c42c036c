"""What a file is, from its first bytes: so that a wrong file is named for what it is.

A JPEG given as weights, a config given as a gallery, a checkpoint given as an image: each
reader's own failure ("invalid load key", "not a zip file", "could not decode") says nothing
useful. :func:`content_kind` names the file's kind ("a JPEG image", "a torch checkpoint", "a
NumPy .npz archive", "a YAML/text file", ...) from a few kB at its start, for the one-line error
"it is a JPEG image, not a checkpoint".
"""
from __future__ import annotations

import re
import struct
from typing import Optional

#: Bytes read from the start of a file to recognise it.
HEAD_BYTES = 4096

_MAGIC = (
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    ((b"GIF87a", b"GIF89a"), "a GIF image"),
    ((b"II*\x00", b"MM\x00*"), "a TIFF image"),
    (b"\x1f\x8b", "a gzip archive"),
    (b"%PDF", "a PDF document"),
    (b"\x89HDF\r\n\x1a\n", "an HDF5 file (a MATLAB .mat?)"),
    (b"\x93NUMPY", "a NumPy .npy array"),
    (b"\x7fELF", "a program (ELF)"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"Rar!", "a RAR archive"),
)
_YAML_KEY = re.compile(r"^[A-Za-z_][\w.]*:", re.M)


def _zip_kind(head: bytes) -> str:
    """A zip archive named by its first member: torch.save writes ``<name>/data.pkl`` (or
    ``.format_version``, ``byteorder`` in newer versions) first; numpy ``.npz`` members are ``.npy``."""
    if len(head) < 30:
        return "a zip archive"
    name_len = struct.unpack_from("<H", head, 26)[0]
    name = head[30:30 + name_len].decode("utf-8", "replace")
    if name.endswith((".npy",)):
        return "a NumPy .npz archive"
    if "/" in name and name.rsplit("/", 1)[1] in ("data.pkl", ".format_version", "byteorder", "version"):
        return "a torch checkpoint"
    return "a zip archive"


def content_kind(head: bytes, name: str = "") -> str:
    """What a file that starts with `head` is, as a noun phrase ("a JPEG image", "a torch
    checkpoint", "a YAML/text file", "an empty file", "binary data", ...). `name` (the file's
    name) only tells YAML from other text."""
    if not head:
        return "an empty file"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(head)
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):  # pickle protocol 2-5
        return "a torch checkpoint (legacy format)"
    if head[:2] == b"BM" and len(head) >= 26:
        return "a BMP image"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "a WebP image"
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if b"\0" in head:
        return "binary data"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:  # not just a character cut at the end of the head
            return "binary data"
        text = head[:e.start].decode("utf-8")
    if name.lower().endswith((".yaml", ".yml")) or _YAML_KEY.search(text):
        return "a YAML/text file"
    if text.lstrip().startswith(("{", "[")):
        return "a JSON/text file"
    return "a text file"


def read_head(path: str, size: int = HEAD_BYTES) -> Optional[bytes]:
    """The first `size` bytes of regular file `path`; None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(size)
    except OSError:
        return None


def file_kind(path: str) -> str:
    """:func:`content_kind` of the file at `path` ("an unreadable file" when it cannot be read)."""
    head = read_head(path)
    return "an unreadable file" if head is None else content_kind(head, path)


__all__ = ["HEAD_BYTES", "content_kind", "file_kind", "read_head"]
