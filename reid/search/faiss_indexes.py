"""faiss search backends: exact inner product ("faiss"), inverted lists ("ivf") and HNSW ("hnsw").

All three index L2-normalised features by inner product (= cosine). The approximate ones
trade a little recall for speed on galleries of millions of crops:

* ``"ivf"``: k-means splits the gallery into `nlist` lists; a query scans the `nprobe` lists
  whose centroids are closest. The lists hold the vectors themselves (IVF-Flat, default) or,
  with `pq_m`, product-quantized codes of `pq_m` x `pq_nbits` bits (IVF-PQ: about
  ``pq_m * pq_nbits / 8`` bytes per image instead of ``4 * D``; its scores are estimates).
  The centroids are trained on `train_size` vectors sampled from the gallery.
* ``"hnsw"``: a navigable small-world graph with `hnsw_m` links per vector, built with a
  candidate list of `ef_construction` and searched with one of ``max(ef_search, k)``.

Defaults follow the gallery size (see :func:`default_nlist` and friends) and were chosen so
that recall@10 against exact search is at least 0.95 on clustered features shaped like a
re-ID gallery (docs/benchmarks.md, "Search at scale"). Every query gets ``min(k, N)``
results: when an IVF probe reaches fewer than k vectors, that query is searched again
over every list (HNSW: over its stored vectors).
"""
from __future__ import annotations

import collections
import logging
import math
import re
import sys
from typing import Any, Dict, Iterator, Optional, Sequence, Tuple

import numpy as np

from reid.utils.native_stderr import captured_stderr, collapse_repeats
from reid.utils.text_files import brief
from reid.utils.value_checks import UNIT_TOLERANCE

from .index_base import ArrayLike, SearchIndex, SearchResult, gallery_rows, require_faiss
from .options import HNSW_MAX_EF_SEARCH, HNSW_MAX_M
from .tuning import index_recall_fields

# Training vectors per IVF centroid: faiss's k-means warns below 39 per centroid.
TRAIN_PER_CENTROID = 40
MIN_TRAIN_SIZE = 10_000  # enough for IVF-PQ's 256-centroid codebooks too (39 x 256)
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 80
HNSW_EF_SEARCH = 128  # per HNSW_EF_SEARCH_PER images, at least this (default_ef_search)
HNSW_EF_SEARCH_PER = 500_000
# IVF-PQ reconstructions of unit vectors measured up to 1.27 long (docs/inference.md); longer
# ones in a loaded index mean damaged codes.
PQ_MAX_NORM = 1.5

logger = logging.getLogger(__name__)
# What faiss' k-means prints (to the C stderr) per run that has fewer than 39 points per centroid.
_KMEANS_WARNING = re.compile(r"WARNING clustering (\d+) points to (\d+) centroids: please provide at least (\d+)")


def default_nlist(n: int) -> int:
    """About 4 sqrt(N) lists, at most N / 40 so each centroid trains on 40 vectors (>= 1)."""
    return int(max(1, min(round(4 * math.sqrt(n)), n // TRAIN_PER_CENTROID)))


def default_train_size(n: int, nlist: int) -> int:
    """40 vectors per centroid, at least 10,000, at most the gallery."""
    return int(min(n, max(TRAIN_PER_CENTROID * nlist, MIN_TRAIN_SIZE)))


def default_ef_search(n: int) -> int:
    """128 up to 500,000 images, then 128 more per 500,000 (1,000,000: 256).

    At a fixed candidate list, HNSW recall falls as the gallery grows: with 128, recall@10 is
    0.999 at 200,000 x 256 but 0.940 at 1,000,000 x 256, where 256 gives 0.966
    (docs/benchmarks.md, "Search at scale"). Search time grows about in proportion.
    """
    return int(HNSW_EF_SEARCH * max(1, math.ceil(n / HNSW_EF_SEARCH_PER)))


def default_nprobe(nlist: int) -> int:
    """1/64 of the lists (about 1.6% of the gallery is scanned), at least 16, at most nlist."""
    return int(min(nlist, max(16, nlist // 64)))


def max_candidates(n: int) -> int:
    """The longest HNSW candidate list (ef_search, ef_construction) for `n` vectors: a list longer
    than the gallery finds nothing more, and faiss allocates it per query (a list of 10^9 entries
    exhausts memory), so it is at most max(n, HNSW_MAX_EF_SEARCH)."""
    return max(int(n), HNSW_MAX_EF_SEARCH)


def _int_param(backend: str, name: str, value: Any, minimum: int = 1, maximum: Optional[int] = None) -> int:
    ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if ok and value >= minimum and (maximum is None or value <= maximum):
        return int(value)
    bound = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    raise ValueError(f"The {backend!r} backend's parameter {name} must be an integer {bound}, got {value!r}.")


def _saved_param(params: Dict[str, Any], name: str, minimum: int, maximum: int, default: int) -> int:
    """Search parameter `name` of a saved index's header: an integer in [minimum, maximum] (else a
    ValueError naming it; load_index adds the file), or `default` when the header has none."""
    value = params.get(name, default)
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool) and minimum <= value <= maximum:
        return int(value)
    raise ValueError(f"its saved parameter {name} is {brief(value)}, not an integer from {minimum} to {maximum}; "
                     "rebuild the index from the gallery")


def _report_faiss_output(lines: Sequence[str], nlist: int, gallery_size: int) -> None:
    """Say once what faiss printed while training: its k-means warnings as one line each kind
    (IVF-PQ repeats the same one for every sub-vector), anything else as it came, each once."""
    found = collections.Counter(m.groups() for m in map(_KMEANS_WARNING.search, lines) if m)
    for line in collapse_repeats([line for line in lines if not _KMEANS_WARNING.search(line)]):
        print(line, file=sys.stderr)
    for (points, centroids, wanted), times in found.items():
        coarse = int(centroids) == nlist
        what = "the coarse quantizer's lists" if coarse else "the IVF-PQ codebooks"
        fix = "a smaller --nlist" if coarse else "a smaller --pq-nbits"
        if int(points) < gallery_size:
            fix += f" or a larger --train-size (up to the gallery's {gallery_size})"
        logger.warning(
            "faiss trained %s (%s k-means run(s) of %s centroids) on %s vectors, fewer than the %s it asks for: "
            "the index works, but its %s are coarser than they could be (%s quiets this).",
            what, times, centroids, points, wanted, "lists" if coarse else "codes", fix,
        )


class FaissBackedIndex(SearchIndex):
    """A faiss index over unit-norm gallery rows; subclasses choose the structure."""

    #: faiss classes a saved index of this backend may hold.
    FAISS_TYPES: Tuple[str, ...] = ()
    def __init__(self) -> None:
        super().__init__()
        self.index: Any = None

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def _gallery(self, feats: ArrayLike) -> np.ndarray:
        return np.ascontiguousarray(gallery_rows(feats).cpu().numpy())

    def _search_parameters(self, k: int) -> Any:
        return None

    def _storage(self) -> Any:
        """The faiss index that holds the vectors as given (HNSW: the graph's flat storage)."""
        return self.index

    def _exhaustive_search(self, q: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        return self._storage().search(q, k)

    def _search(self, queries: torch.Tensor, k: int) -> SearchResult:
        q = np.ascontiguousarray(queries.cpu().numpy())
        params = self._search_parameters(k)
        scores, indices = self.index.search(q, k) if params is None else self.index.search(q, k, params=params)
        short = (indices < 0).any(axis=1)
        if short.any():
            scores[short], indices[short] = self._exhaustive_search(np.ascontiguousarray(q[short]), k)
        return SearchResult(indices.astype(np.int64), scores.astype(np.float32))

    def _restore(self, params: Dict[str, Any]) -> None:
        """Set the wrapper's parameters from a saved index's header."""

    def _restore_recall(self, params: Dict[str, Any]) -> None:
        for key in ("target_recall", "measured_recall"):
            value = params.get(key)
            if value is None:
                continue
            if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1):
                raise ValueError(f"its saved parameter {key} is {brief(value)}, not a recall in [0, 1]; rebuild the "
                                 "index from the gallery")
            setattr(self, key, float(value))

    #: whether the stored vectors are the gallery's (IVF-PQ keeps compressed codes)
    stores_exact_rows = True

    def stored_rows(self) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        """The stored vectors in chunks of ``(row ids, vectors)`` (IVF-PQ: reconstructions
        from the codes)."""
        flat = self._storage()
        n, chunk = int(flat.ntotal), 1 << 16
        for start in range(0, n, chunk):
            stop = min(chunk, n - start) + start
            yield np.arange(start, stop), flat.reconstruct_n(start, stop - start)

    def row_norm_problem(self) -> Optional[str]:
        """What is wrong with the stored vectors' lengths, or None when they are unit length.

        Exact storage must be unit length within ``UNIT_TOLERANCE``; IVF-PQ stores approximations
        (lengths from about 0.2 to 1.3 on hard data), so only lengths above
        ``PQ_MAX_NORM`` count there: such rows outscore every true match.
        """
        approximate = self.pq_m is not None if isinstance(self, IVFIndex) else False
        for _, rows in self.stored_rows():
            norms = np.linalg.norm(rows.astype(np.float64), axis=1)
            if not np.isfinite(norms).all():
                return "its stored vectors hold NaN or inf"
            if approximate:
                if (norms > PQ_MAX_NORM).any():
                    return f"its stored vectors reconstruct to lengths up to {norms.max():.3g} (unit length expected)"
            elif (np.abs(norms - 1) > UNIT_TOLERANCE).any():
                worst = norms[np.argmax(np.abs(norms - 1))]
                return f"its stored vectors are not unit length (one has length {worst:.3g})"
        return None

    @classmethod
    def from_faiss(cls, index: Any, params: Dict[str, Any]) -> "FaissBackedIndex":
        """Wrap a faiss index read from disk (its class must be one of `FAISS_TYPES`)."""
        if type(index).__name__ not in cls.FAISS_TYPES:
            raise ValueError(f"it holds a faiss {type(index).__name__}, not a {cls.backend!r} index "
                             f"({' or '.join(cls.FAISS_TYPES)})")
        obj = cls.__new__(cls)
        FaissBackedIndex.__init__(obj)
        obj.index = index
        obj._restore(params)
        obj._restore_recall(params)
        return obj


class FaissIndex(FaissBackedIndex):
    """faiss ``IndexFlatIP`` on L2-normalised features: exact, no parameters."""

    backend = "faiss"
    FAISS_TYPES = ("IndexFlatIP", "IndexFlat")

    def params(self) -> Dict[str, Any]:
        return index_recall_fields(self)

    def __init__(self, feats: ArrayLike) -> None:
        super().__init__()
        faiss = require_faiss(self.backend)
        g = self._gallery(feats)
        self.index = faiss.IndexFlatIP(g.shape[1])
        self.index.add(g)


class IVFIndex(FaissBackedIndex):
    """Inverted-file index: IVF-Flat, or IVF-PQ when `pq_m` is given.

    Args:
        nlist: number of k-means lists (default :func:`default_nlist`).
        nprobe: lists scanned per query (default :func:`default_nprobe`; above nlist means all).
        train_size: gallery vectors sampled (with `seed`) to train the centroids and codebooks
            (default :func:`default_train_size`; at most the gallery).
        pq_m: sub-vectors per product-quantized code (must divide D); None = IVF-Flat.
        pq_nbits: bits per sub-vector code (IVF-PQ only; 2**pq_nbits training vectors needed).
    """

    backend = "ivf"
    FAISS_TYPES = ("IndexIVFFlat", "IndexIVFPQ")
    SEARCH_PARAMS = ("nprobe",)
    TUNABLE = "nprobe"

    def __init__(self, feats: ArrayLike, nlist: Optional[int] = None, nprobe: Optional[int] = None,
                 train_size: Optional[int] = None, pq_m: Optional[int] = None, pq_nbits: int = 8,
                 seed: int = 0) -> None:
        super().__init__()
        faiss = require_faiss(self.backend)
        if nprobe is not None:  # a bad value fails now, not after minutes of k-means
            _int_param(self.backend, "nprobe", nprobe)
        g = self._gallery(feats)
        n, d = g.shape
        nlist = default_nlist(n) if nlist is None else _int_param(self.backend, "nlist", nlist)
        size = default_train_size(n, nlist) if train_size is None else _int_param(self.backend, "train_size", train_size)
        size = min(size, n)
        if size < nlist:
            raise ValueError(
                f"The 'ivf' backend cannot train nlist={nlist} centroids on {size} vectors: use nlist <= {size} "
                f"(the default for {n} vectors is {default_nlist(n)})" + (" or a larger train_size." if size < n else ".")
            )
        if pq_m is not None:
            pq_m = _int_param(self.backend, "pq_m", pq_m)
            pq_nbits = _int_param(self.backend, "pq_nbits", pq_nbits, 1, 16)
            if d % pq_m:
                raise ValueError(f"The 'ivf' backend's pq_m={pq_m} must divide the feature width {d} "
                                 f"(e.g. {', '.join(str(m) for m in (8, 16, 32, 64) if d % m == 0) or 1}).")
            if size < 2 ** pq_nbits:
                raise ValueError(f"The 'ivf' backend's pq_nbits={pq_nbits} needs at least {2 ** pq_nbits} training "
                                 f"vectors, got {size}: use a smaller pq_nbits or no pq_m (IVF-Flat).")
        quantizer = faiss.IndexFlatIP(d)
        if pq_m is None:
            index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexIVFPQ(quantizer, d, nlist, pq_m, pq_nbits, faiss.METRIC_INNER_PRODUCT)
        train = g if size >= n else np.ascontiguousarray(g[np.sort(np.random.default_rng(seed).choice(n, size, replace=False))])
        with captured_stderr() as native:  # IVF-PQ: one k-means (and one warning) per sub-vector
            index.train(train)
        _report_faiss_output(native.lines, nlist, n)
        index.add(g)
        self.index = index
        self.train_size = size
        self.nprobe = default_nprobe(nlist) if nprobe is None else nprobe

    @property
    def nlist(self) -> int:
        return int(self.index.nlist)

    @property
    def nprobe(self) -> int:
        return int(self.index.nprobe)

    @nprobe.setter
    def nprobe(self, value: int) -> None:
        self.index.nprobe = min(_int_param(self.backend, "nprobe", value), self.nlist)

    @property
    def pq_m(self) -> Optional[int]:
        return int(self.index.pq.M) if hasattr(self.index, "pq") else None

    @property
    def pq_nbits(self) -> Optional[int]:
        return int(self.index.pq.nbits) if hasattr(self.index, "pq") else None

    def params(self) -> Dict[str, Any]:
        p: Dict[str, Any] = {"nlist": self.nlist, "nprobe": self.nprobe, "train_size": self.train_size}
        if self.pq_m is not None:
            p.update(pq_m=self.pq_m, pq_nbits=self.pq_nbits)
        return {**p, **index_recall_fields(self)}

    def max_tunable(self) -> int:
        return self.nlist

    def recall_hint(self) -> str:
        if self.pq_m is not None:
            return ("; IVF-PQ ranks by compressed codes, so more lists cannot make up for the compression: use "
                    "IVF-Flat (no pq_m) or HNSW where recall matters")
        return ""

    def _exhaustive_search(self, q: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        import faiss

        return self.index.search(q, k, params=faiss.SearchParametersIVF(nprobe=self.nlist))

    @property
    def stores_exact_rows(self) -> bool:
        return self.pq_m is None

    def stored_rows(self) -> Iterator[Tuple[np.ndarray, np.ndarray]]:
        import faiss

        index, lists = self.index, self.index.invlists
        for i in range(self.nlist):
            n = int(lists.list_size(i))
            if not n:
                continue
            ids = faiss.rev_swig_ptr(lists.get_ids(i), n).copy()
            codes = faiss.rev_swig_ptr(lists.get_codes(i), n * index.code_size).reshape(n, index.code_size)
            if self.pq_m is None:
                yield ids, codes.view(np.float32)
            else:
                rows = index.pq.decode(np.ascontiguousarray(codes))
                yield ids, rows + index.quantizer.reconstruct(i) if index.by_residual else rows

    def _restore(self, params: Dict[str, Any]) -> None:
        self.train_size = _saved_param(params, "train_size", 0, int(self.index.ntotal), 0)
        self.nprobe = _saved_param(params, "nprobe", 1, self.nlist, min(int(self.index.nprobe), self.nlist))


class HNSWIndex(FaissBackedIndex):
    """Hierarchical navigable small-world graph (faiss ``IndexHNSWFlat``, inner product).

    Args:
        hnsw_m: links per vector (more: better recall, more memory: ~8 * hnsw_m bytes per image).
        ef_construction: candidate list while building (more: better graph, slower build).
        ef_search: candidate list while searching (more: better recall, slower); k if larger.
            Default: :func:`default_ef_search` of the gallery size.
    """

    backend = "hnsw"
    FAISS_TYPES = ("IndexHNSWFlat",)
    SEARCH_PARAMS = ("ef_search",)
    TUNABLE = "ef_search"

    def __init__(self, feats: ArrayLike, hnsw_m: int = HNSW_M, ef_construction: int = HNSW_EF_CONSTRUCTION,
                 ef_search: Optional[int] = None) -> None:
        super().__init__()
        faiss = require_faiss(self.backend)
        g = self._gallery(feats)
        # Bad values fail before the slow build.
        hnsw_m = _int_param(self.backend, "hnsw_m", hnsw_m, 2, HNSW_MAX_M)
        ef_construction = _int_param(self.backend, "ef_construction", ef_construction, 1, max_candidates(len(g)))
        if ef_search is not None:
            _int_param(self.backend, "ef_search", ef_search, 1, max_candidates(len(g)))
        self.index = faiss.IndexHNSWFlat(g.shape[1], hnsw_m, faiss.METRIC_INNER_PRODUCT)
        self.index.hnsw.efConstruction = ef_construction
        self.index.add(g)
        self.ef_search = default_ef_search(len(g)) if ef_search is None else ef_search

    @property
    def ef_search(self) -> int:
        return self._ef_search

    @ef_search.setter
    def ef_search(self, value: int) -> None:
        self._ef_search = _int_param(self.backend, "ef_search", value, 1, max_candidates(int(self.index.ntotal)))

    @property
    def hnsw_m(self) -> int:
        # Level 0 holds 2 * M links per vector, the upper levels M.
        return int(self.index.hnsw.nb_neighbors(1))

    def params(self) -> Dict[str, Any]:
        return {"hnsw_m": self.hnsw_m, "ef_construction": int(self.index.hnsw.efConstruction),
                "ef_search": self.ef_search, **index_recall_fields(self)}

    def max_tunable(self) -> int:
        return max(HNSW_MAX_EF_SEARCH, self.ef_search)

    def recall_hint(self) -> str:
        return "; a denser graph (larger hnsw_m or ef_construction) reaches more"

    def _search_parameters(self, k: int) -> Any:
        import faiss

        return faiss.SearchParametersHNSW(efSearch=max(self.ef_search, k))

    def _storage(self) -> Any:
        import faiss

        return faiss.downcast_index(self.index.storage)

    def _restore(self, params: Dict[str, Any]) -> None:
        n = int(self.index.ntotal)
        self.ef_search = _saved_param(params, "ef_search", 1, max_candidates(n), default_ef_search(n))


__all__: Sequence[str] = [
    "FaissBackedIndex",
    "FaissIndex",
    "HNSWIndex",
    "IVFIndex",
    "default_ef_search",
    "default_nlist",
    "default_nprobe",
    "default_train_size",
    "max_candidates",
]
