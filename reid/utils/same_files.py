"""Finding one image under several names: the same file, or a byte-identical copy.

A query found in its own gallery is a perfect match that means nothing, and a crop listed twice
in an unlabelled set weighs twice in its clustering. Path strings cannot tell: a hard link, a
symbolic link, ``./a.jpg`` and ``q/../a.jpg`` all name one file, and ``cp`` makes a second file
with the same bytes. So

* two paths are **the same file** when ``stat`` gives both the same device and inode
  (``st_dev``, ``st_ino``; links are followed);
* two files are **byte-identical copies** when their contents hash alike (BLAKE2b, 128 bits,
  read in 1 MB blocks: memory stays bounded whatever the file size). Only files whose size equals
  that of a file they are compared with are hashed, so that a folder of crops with few copies
  costs little more than the ``stat`` calls.

A path that cannot be ``stat``-ed (missing here, unreadable) is never a copy of anything.
"""
from __future__ import annotations

import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

#: How a path is the same image as another (the words of the one-line reports).
SAME_FILE = "same file"
SAME_BYTES = "identical bytes"

#: How a path relates to the one it repeats, as words between the two paths in a report.
RELATION = {SAME_FILE: "is the same file as", SAME_BYTES: "is a byte-identical copy of"}

#: ``(index of the image it repeats, SAME_FILE or SAME_BYTES)``, or None for a path that repeats nothing.
Copy = Optional[Tuple[int, str]]

_BLOCK = 1 << 20
_Key = Tuple[int, int]  # (st_dev, st_ino)


def _stat(path: str) -> Optional[Tuple[_Key, int]]:
    """((device, inode), size) of the regular file `path` (links followed); a folder (a tracklet of
    frames) has size -1, so it is the same item only as the same folder, never by content; None
    for anything else."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if stat.S_ISDIR(st.st_mode):
        return (st.st_dev, st.st_ino), -1
    return ((st.st_dev, st.st_ino), st.st_size) if stat.S_ISREG(st.st_mode) else None


def content_digest(path: str) -> Optional[bytes]:
    """BLAKE2b-128 digest of the file at `path`, read in blocks of 1 MB; None when it cannot be read."""
    digest = hashlib.blake2b(digest_size=16)
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(_BLOCK), b""):
                digest.update(block)  # hashlib releases the GIL: files hash in parallel below
    except OSError:
        return None
    return digest.digest()


def _digests(paths: Iterable[str]) -> Dict[str, Optional[bytes]]:
    unique = sorted(set(paths))
    if len(unique) < 2:
        return {p: content_digest(p) for p in unique}
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return dict(zip(unique, pool.map(content_digest, unique)))


def first_copies(paths: Sequence[str]) -> List[Copy]:
    """For each path, the earlier path (its index) that is the same image, and how; None for the
    first path of every image. The index is always that of the image's first path."""
    stats = [_stat(p) for p in paths]
    result: List[Copy] = [None] * len(paths)
    first_of_file: Dict[_Key, int] = {}
    by_size: Dict[int, List[int]] = {}
    for i, st in enumerate(stats):
        if st is None:
            continue
        if st[0] in first_of_file:
            result[i] = (first_of_file[st[0]], SAME_FILE)
            continue
        first_of_file[st[0]] = i
        if st[1] >= 0:  # folders are compared by identity only
            by_size.setdefault(st[1], []).append(i)
    shared = [i for members in by_size.values() if len(members) > 1 for i in members]
    digests = _digests(paths[i] for i in shared)
    first_of_content: Dict[Tuple[int, bytes], int] = {}
    for i in sorted(shared):
        d = digests[paths[i]]
        if d is not None:
            first = first_of_content.setdefault((stats[i][1], d), i)
            if first != i:
                result[i] = (first, SAME_BYTES)
    for i, copy in enumerate(result):  # a link to a copy repeats the copy's original, by content
        if copy is not None and copy[1] == SAME_FILE and result[copy[0]] is not None:
            result[i] = result[copy[0]]
    return result


def copies_of(references: Sequence[str], candidates: Sequence[str]) -> List[Copy]:
    """For each candidate, the first reference (its index) that is the same image, and how; None
    for a candidate that is none of them. Only candidates and references of equal sizes are hashed."""
    ref_stats = [_stat(p) for p in references]
    ref_file: Dict[_Key, int] = {}
    ref_sizes: Dict[int, List[int]] = {}
    for i, st in enumerate(ref_stats):
        if st is not None and st[0] not in ref_file:
            ref_file[st[0]] = i
            if st[1] >= 0:  # folders are compared by identity only
                ref_sizes.setdefault(st[1], []).append(i)
    result: List[Copy] = [None] * len(candidates)
    pending: List[Tuple[int, int]] = []  # (candidate, size) to compare by content
    for j, path in enumerate(candidates):
        st = _stat(path)
        if st is None:
            continue
        if st[0] in ref_file:
            result[j] = (ref_file[st[0]], SAME_FILE)
        elif st[1] in ref_sizes:
            pending.append((j, st[1]))
    if not pending:
        return result
    sizes = {size for _, size in pending}
    refs = [i for size in sizes for i in ref_sizes[size]]
    digests = _digests([candidates[j] for j, _ in pending] + [references[i] for i in refs])
    ref_content: Dict[Tuple[int, bytes], int] = {}
    for i in sorted(refs):
        d = digests[references[i]]
        if d is not None:
            ref_content.setdefault((ref_stats[i][1], d), i)
    for j, size in pending:
        d = digests[candidates[j]]
        if d is not None and (size, d) in ref_content:
            result[j] = (ref_content[(size, d)], SAME_BYTES)
    return result


__all__ = ["RELATION", "SAME_BYTES", "SAME_FILE", "Copy", "content_digest", "copies_of", "first_copies"]
