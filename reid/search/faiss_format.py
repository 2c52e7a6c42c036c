"""Checking a serialised faiss index before faiss reads it: every declared size must fit the bytes.

faiss reads a vector's length from the file and allocates it before reading its contents,
so a 9 kB file that declares 2**29 floats makes faiss allocate 2 GB and only then fail. A
saved index holds one of the four index types this toolkit builds (``IndexFlatIP``,
``IndexIVFFlat``, ``IndexIVFPQ``, ``IndexHNSWFlat``, inner-product metric); this module walks
that layout (faiss's ``impl/index_read.cpp``, stable since faiss 1.7) without allocating
anything, and checks that every vector, list and table it declares fits in the bytes that
remain and agrees with the index's other fields. Anything else is refused, so faiss is only
handed bytes whose allocations are bounded by their own length.
"""
from __future__ import annotations

import struct
from typing import Tuple

_FLAT = (b"IxFI", b"IxF2", b"IxFl")
METRIC_INNER_PRODUCT = 0


class FaissLayoutError(ValueError):
    """The bytes are not an index of the kinds this toolkit saves, or declare more than they hold."""


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = memoryview(data), 0

    @property
    def left(self) -> int:
        return len(self.data) - self.pos

    def take(self, n: int, what: str) -> memoryview:
        if n < 0 or n > self.left:
            raise FaissLayoutError(f"{what} needs {n} bytes but only {self.left} remain")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unpack(self, fmt: str, what: str) -> Tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def fourcc(self) -> bytes:
        return bytes(self.take(4, "an index type"))

    def vector(self, item: int, what: str, expected: int = -1) -> int:
        """Skip a length-prefixed vector of `item`-byte elements; its length, checked first."""
        (n,) = self.unpack("Q", f"the length of {what}")
        if n * item > self.left:
            raise FaissLayoutError(f"{what}: {n} elements declared ({n * item} bytes), but only {self.left} bytes remain")
        if expected >= 0 and n != expected:
            raise FaissLayoutError(f"{what}: {n} elements where the index needs {expected}")
        self.take(n * item, what)
        return n


def _header(r: _Reader) -> Tuple[int, int]:
    d, ntotal, _, _, _, metric = r.unpack("iqqq?i", "the index header")
    if metric > 1:
        r.unpack("f", "the metric argument")
    if d <= 0 or ntotal < 0:
        raise FaissLayoutError(f"its header declares d={d}, ntotal={ntotal}")
    if metric != METRIC_INNER_PRODUCT:
        raise FaissLayoutError(f"it uses metric {metric}; this toolkit's indexes use inner product (0)")
    return d, ntotal


def _flat(r: _Reader, h: bytes) -> Tuple[int, int]:
    if h not in _FLAT:
        raise FaissLayoutError(f"it holds a faiss {h.decode('latin-1')!r} where a flat index belongs")
    d, ntotal = _header(r)
    r.vector(4, "the flat index's vectors", expected=ntotal * d)  # counted in floats
    return d, ntotal


def _invlists(r: _Reader, nlist: int, code_size: int) -> int:
    if r.fourcc() != b"ilar":
        raise FaissLayoutError("its inverted lists are not stored with the index")
    n_lists, stored_code_size = r.unpack("QQ", "the inverted lists' header")
    if n_lists != nlist or stored_code_size != code_size:
        raise FaissLayoutError(f"its inverted lists declare {n_lists} lists of {stored_code_size}-byte codes where the "
                               f"index has {nlist} lists of {code_size}-byte codes")
    kind = r.fourcc()
    if kind == b"full":
        start = r.pos + 8
        r.vector(8, "the list sizes", expected=nlist)
        sizes = struct.unpack_from(f"<{nlist}Q", r.data, start)
    elif kind == b"sprs":
        start = r.pos + 8
        pairs = r.vector(8, "the sparse list sizes")
        flat = struct.unpack_from(f"<{pairs}Q", r.data, start)
        if pairs % 2 or any(i >= nlist for i in flat[0::2]):
            raise FaissLayoutError("its sparse list sizes name lists that do not exist")
        sizes = flat[1::2]
    else:
        raise FaissLayoutError(f"its inverted lists have the unknown layout {kind!r}")
    total = sum(sizes)
    need = total * (code_size + 8)  # codes, then 64-bit ids, for each entry
    if need > r.left:
        raise FaissLayoutError(f"its inverted lists declare {total} entries ({need} bytes) but only {r.left} bytes remain")
    r.take(need, "the inverted lists")
    return total


def _ivf_header(r: _Reader) -> Tuple[int, int, int]:
    d, ntotal = _header(r)
    nlist, _nprobe = r.unpack("QQ", "the IVF header")
    qd, qn = _flat(r, r.fourcc())
    if qd != d or qn != nlist:
        raise FaissLayoutError(f"its coarse quantizer holds {qn} centroids of width {qd}, not nlist={nlist} of width {d}")
    (map_type,) = r.unpack("b", "the direct map type")
    r.vector(8, "the direct map")
    if map_type == 2:
        r.vector(16, "the direct map's hash table")
    return d, ntotal, nlist


def _index(r: _Reader) -> int:
    h = r.fourcc()
    if h in _FLAT:
        return _flat(r, h)[1]
    if h == b"IwFl":
        d, ntotal, nlist = _ivf_header(r)
        entries = _invlists(r, nlist, 4 * d)
    elif h == b"IwPQ":
        d, ntotal, nlist = _ivf_header(r)
        _by_residual, code_size = r.unpack("?Q", "the IVF-PQ header")
        pq_d, m, nbits = r.unpack("QQQ", "the product quantizer header")
        if pq_d != d or m < 1 or d % m or not 1 <= nbits <= 16 or code_size != (m * nbits + 7) // 8:
            raise FaissLayoutError(f"its product quantizer (d={pq_d}, M={m}, nbits={nbits}, code size {code_size}) "
                                   f"does not fit the index (d={d})")
        r.vector(4, "the product quantizer's centroids", expected=d * (1 << nbits))
        entries = _invlists(r, nlist, code_size)
    elif h == b"IHNf":
        d, ntotal = _header(r)
        r.vector(8, "the HNSW level probabilities")
        levels_per = r.vector(4, "the HNSW neighbours per level")
        r.vector(4, "the HNSW levels", expected=ntotal)
        r.vector(8, "the HNSW offsets", expected=ntotal + 1)
        r.vector(4, "the HNSW links")
        r.unpack("iiiii", "the HNSW parameters")
        if levels_per < 1:
            raise FaissLayoutError("its HNSW graph has no levels")
        sd, entries = _flat(r, r.fourcc())
        if sd != d:
            raise FaissLayoutError(f"its HNSW storage has width {sd}, not {d}")
    else:
        raise FaissLayoutError(f"it holds a faiss {h.decode('latin-1')!r} index, not one of the kinds this toolkit "
                               "saves (flat, IVF-Flat, IVF-PQ, HNSW-Flat)")
    if entries != ntotal:
        raise FaissLayoutError(f"it declares {ntotal} vectors but stores {entries}")
    return ntotal


def check_faiss_bytes(data: bytes) -> int:
    """Raise FaissLayoutError unless `data` is a whole serialised index of a kind this toolkit
    saves, every size of which fits the bytes; returns its number of vectors."""
    r = _Reader(data)
    ntotal = _index(r)
    if r.left:
        raise FaissLayoutError(f"{r.left} bytes follow the end of the index")
    return ntotal


__all__ = ["FaissLayoutError", "check_faiss_bytes"]
