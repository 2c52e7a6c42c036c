"""Top-K cosine search of query features in a gallery: exact (default), or faiss exact/approximate.

Backends (``build_index(feats, backend=...)``):

* ``"exact"``: torch, brute force. A chunk of queries is multiplied with the whole gallery
  and ``torch.topk`` keeps the top K; the chunk size keeps one ``[chunk, N]`` score matrix
  within a memory budget, so a gallery of millions of crops needs memory for its features
  and a few hundred MB more, never ``[Q, N]`` at once.
* ``"faiss"``: faiss ``IndexFlatIP``, also exact; faster on large galleries.
* ``"ivf"``, ``"hnsw"``: faiss approximate indexes (reid/search/faiss_indexes.py) with
  their parameters as keyword arguments.

Scores are cosine similarities (features are L2-normalised here, whatever the input), in
descending order per query; every backend returns ``min(k, N)`` matches per query.
Indexes are saved and loaded with reid/search/index_io.py.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch

from reid.utils.registry import Registry

from .faiss_indexes import FaissIndex, HNSWIndex, IVFIndex
from .gallery import Gallery
from .options import INDEX_BACKENDS
from .index_base import ArrayLike, SearchIndex, SearchResult, check_not_empty, gallery_rows
from .tuning import DEFAULT_TARGET_RECALL, check_target_recall, draw_recall_sample, tune_recall

# Score-matrix elements per chunk: 2**26 float32 = 256 MiB.
DEFAULT_MAX_ELEMENTS = 1 << 26


class ExactIndex(SearchIndex):
    """Brute-force cosine search with torch, chunked over queries.

    `device` holds the gallery ("cpu" by default; a CUDA device speeds up large galleries).
    `max_elements` bounds the size of one chunk's ``[chunk, N]`` score matrix.
    """

    backend = "exact"

    def __init__(self, feats: ArrayLike, device: Optional[Union[str, torch.device]] = None,
                 max_elements: int = DEFAULT_MAX_ELEMENTS) -> None:
        super().__init__()
        self.device = torch.device(device or "cpu")
        self.feats = gallery_rows(feats).to(self.device)
        self.max_elements = int(max_elements)

    @classmethod
    def from_unit_rows(cls, feats: np.ndarray, device: Optional[Union[str, torch.device]] = None) -> "ExactIndex":
        """An index over rows that are already L2-normalised (a saved index), kept bit for bit."""
        obj = cls.__new__(cls)
        SearchIndex.__init__(obj)
        obj.device = torch.device(device or "cpu")
        obj.feats = torch.from_numpy(np.ascontiguousarray(feats, dtype=np.float32)).to(obj.device)
        check_not_empty(obj.feats.shape[0])
        obj.max_elements = DEFAULT_MAX_ELEMENTS
        return obj

    def __len__(self) -> int:
        return int(self.feats.shape[0])

    @property
    def dim(self) -> int:
        return int(self.feats.shape[1])

    @torch.inference_mode()
    def _search(self, q: torch.Tensor, k: int) -> SearchResult:
        chunk = max(1, self.max_elements // len(self))
        indices = np.empty((q.shape[0], k), dtype=np.int64)
        scores = np.empty((q.shape[0], k), dtype=np.float32)
        for start in range(0, q.shape[0], chunk):
            sims = q[start:start + chunk].to(self.device) @ self.feats.T
            top = torch.topk(sims, k, dim=1, largest=True, sorted=True)
            indices[start:start + chunk] = top.indices.cpu().numpy()
            scores[start:start + chunk] = top.values.cpu().numpy()
        return SearchResult(indices, scores)


INDEX_REGISTRY = Registry("search backend", declared=INDEX_BACKENDS)
for _cls in (ExactIndex, FaissIndex, IVFIndex, HNSWIndex):
    INDEX_REGISTRY.register(_cls.backend)(_cls)


def backend_params(backend: str) -> Sequence[str]:
    """The keyword parameters that :func:`build_index` accepts for `backend`."""
    names = list(inspect.signature(INDEX_REGISTRY.get(backend).__init__).parameters)[2:]  # after self, feats
    return [n for n in names if n != "device"]


def build_index(feats: Union[ArrayLike, Gallery], backend: str = "exact",
                device: Optional[Union[str, torch.device]] = None, *, paths: Optional[Sequence[str]] = None,
                pids: Optional[ArrayLike] = None, camids: Optional[ArrayLike] = None,
                meta: Optional[Dict[str, Any]] = None, target_recall: float = DEFAULT_TARGET_RECALL,
                **params: Any) -> SearchIndex:
    """A search index over gallery `feats` with `backend` "exact" (default), "faiss", "ivf" or "hnsw".

    Build it once and call ``.search(queries, k)`` for every batch of queries. `feats` may be
    a :class:`Gallery`, whose paths, pids, camids and meta then go with the index (and into
    :func:`save_index`); or give them as keywords. `device` is used by "exact" only (faiss
    runs on the CPU). Backend parameters are keywords, e.g. ``build_index(g, "ivf",
    nlist=4096, nprobe=64)``, ``build_index(g, "ivf", pq_m=32)``, ``build_index(g, "hnsw",
    hnsw_m=32, ef_search=256)``; unset ones follow the gallery size (see faiss_indexes.py).

    An approximate backend ("ivf", "hnsw") measures its recall@10 against exact search on a
    sample of the gallery's rows, each row's own match left out so that the figure holds for
    new queries, and, unless `nprobe` / `ef_search` is given, raises it until the recall reaches
    `target_recall` (reid/search/tuning.py); the result is the index's ``measured_recall``
    (1.0 for the exact backends), saved with it and with the sample (``recall_sample``), which
    ``load_index(..., verify_recall=True)`` measures again.
    """
    target_recall = check_target_recall(target_recall)
    cls = INDEX_REGISTRY.get(backend)
    allowed = backend_params(cls.backend)
    for name in params:
        if name not in allowed:
            raise ValueError(f"{name!r} is not a parameter of the {cls.backend!r} search backend "
                             f"(its parameters: {', '.join(allowed) or 'none'}).")
    if isinstance(feats, Gallery):
        paths = feats.paths if paths is None else paths
        pids = feats.pids if pids is None else pids
        camids = feats.camids if camids is None else camids
        meta = feats.meta if meta is None else meta
        feats = feats.feats
    index = cls(feats, device=device, **params) if cls is ExactIndex else cls(feats, **params)
    index.target_recall = target_recall
    if index.TUNABLE:
        index.recall_sample = draw_recall_sample(feats)
        index.measured_recall = tune_recall(index, index.recall_sample, target_recall, tune=index.TUNABLE not in params)
    else:
        index.measured_recall = 1.0
    return index.set_labels(paths=paths, pids=pids, camids=camids, meta=meta)


def search(query_feats: ArrayLike, gallery_feats: ArrayLike, k: int = 10, backend: str = "exact",
           device: Optional[Union[str, torch.device]] = None, **params: Any) -> SearchResult:
    """Top-`k` cosine matches of each query in the gallery (one-shot form of build_index)."""
    return build_index(gallery_feats, backend=backend, device=device, **params).search(query_feats, k)


__all__: Sequence[str] = [
    "ExactIndex",
    "INDEX_REGISTRY",
    "backend_params",
    "build_index",
    "search",
]
