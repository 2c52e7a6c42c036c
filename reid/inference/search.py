"""Top-K cosine search of query features in a gallery: exact (default) or faiss.

Exact search multiplies a chunk of queries with the whole gallery and keeps the top K with
``torch.topk``; the chunk size is chosen so one ``[chunk, N]`` score matrix stays within a
memory budget, so a gallery of millions of crops needs memory for its features and a few
hundred MB more, never ``[Q, N]`` at once. faiss (``IndexFlatIP``, also exact) is used only
when asked for; it is faster on large galleries and is the basis for approximate indexes.

Scores are cosine similarities (features are L2-normalised here, whatever the input), in
descending order per query.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F

BACKENDS = ("exact", "faiss")
# Score-matrix elements per chunk: 2**26 float32 = 256 MiB.
DEFAULT_MAX_ELEMENTS = 1 << 26
FAISS_HINT = "pip install faiss-cpu (or pip install 'circle-reid[faiss]'), or use the 'exact' backend"

ArrayLike = Union[np.ndarray, torch.Tensor]


@dataclass
class SearchResult:
    """For each query, the gallery rows of its top K matches and their cosine similarities."""

    indices: np.ndarray  # int64 [Q, K], best first
    scores: np.ndarray  # float32 [Q, K], descending


def _as_unit_rows(x: ArrayLike, what: str) -> torch.Tensor:
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.dim() != 2:
        raise ValueError(f"{what} must be a 2-d array [N, D], got shape {tuple(t.shape)}.")
    return F.normalize(t.to(torch.float32), dim=1)


def faiss_available() -> bool:
    """Whether the optional faiss package can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def _check_k(k: int, n: int) -> int:
    if int(k) < 1:
        raise ValueError(f"k (number of matches per query) must be >= 1, got {k}.")
    return min(int(k), n)


def _check_dims(queries: torch.Tensor, dim: int) -> None:
    if queries.shape[1] != dim:
        raise ValueError(
            f"Query features are {queries.shape[1]}-d but the gallery's are {dim}-d: they come "
            "from different models. Extract the queries with the model that built the gallery, "
            "or rebuild the gallery with this model."
        )


class ExactIndex:
    """Brute-force cosine search with torch, chunked over queries.

    `device` holds the gallery ("cpu" by default; a CUDA device speeds up large galleries).
    `max_elements` bounds the size of one chunk's ``[chunk, N]`` score matrix.
    """

    def __init__(self, feats: ArrayLike, device: Optional[Union[str, torch.device]] = None,
                 max_elements: int = DEFAULT_MAX_ELEMENTS) -> None:
        self.device = torch.device(device or "cpu")
        self.feats = _as_unit_rows(feats, "Gallery features").to(self.device)
        if self.feats.shape[0] == 0:
            raise ValueError("The gallery is empty: there is nothing to search.")
        self.max_elements = int(max_elements)

    def __len__(self) -> int:
        return int(self.feats.shape[0])

    @property
    def dim(self) -> int:
        return int(self.feats.shape[1])

    @torch.inference_mode()
    def search(self, queries: ArrayLike, k: int = 10) -> SearchResult:
        """Top-`k` gallery rows for each query (k is capped at the gallery size)."""
        q = _as_unit_rows(queries, "Query features")
        _check_dims(q, self.dim)
        n = len(self)
        k = _check_k(k, n)
        chunk = max(1, self.max_elements // n)
        indices = np.empty((q.shape[0], k), dtype=np.int64)
        scores = np.empty((q.shape[0], k), dtype=np.float32)
        for start in range(0, q.shape[0], chunk):
            sims = q[start:start + chunk].to(self.device) @ self.feats.T
            top = torch.topk(sims, k, dim=1, largest=True, sorted=True)
            indices[start:start + chunk] = top.indices.cpu().numpy()
            scores[start:start + chunk] = top.values.cpu().numpy()
        return SearchResult(indices, scores)


class FaissIndex:
    """faiss ``IndexFlatIP`` on L2-normalised features (inner product = cosine)."""

    def __init__(self, feats: ArrayLike) -> None:
        try:
            import faiss
        except ImportError as e:
            raise ImportError(f"The faiss search backend needs the faiss package: {FAISS_HINT}.") from e
        g = _as_unit_rows(feats, "Gallery features").cpu().numpy()
        if g.shape[0] == 0:
            raise ValueError("The gallery is empty: there is nothing to search.")
        self.index = faiss.IndexFlatIP(g.shape[1])
        self.index.add(np.ascontiguousarray(g))

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def search(self, queries: ArrayLike, k: int = 10) -> SearchResult:
        """Top-`k` gallery rows for each query (k is capped at the gallery size)."""
        q = _as_unit_rows(queries, "Query features")
        _check_dims(q, self.dim)
        k = _check_k(k, len(self))
        scores, indices = self.index.search(np.ascontiguousarray(q.cpu().numpy()), k)
        return SearchResult(indices.astype(np.int64), scores.astype(np.float32))


def build_index(feats: ArrayLike, backend: str = "exact",
                device: Optional[Union[str, torch.device]] = None) -> Union[ExactIndex, FaissIndex]:
    """A search index over gallery `feats` with `backend` "exact" (default) or "faiss".

    Build it once and call ``.search(queries, k)`` for every batch of queries.
    """
    name = str(backend).lower()
    if name == "exact":
        return ExactIndex(feats, device=device)
    if name == "faiss":
        return FaissIndex(feats)
    raise ValueError(f"Unknown search backend {backend!r}; use one of: {', '.join(BACKENDS)}.")


def search(query_feats: ArrayLike, gallery_feats: ArrayLike, k: int = 10, backend: str = "exact",
           device: Optional[Union[str, torch.device]] = None) -> SearchResult:
    """Top-`k` cosine matches of each query in the gallery (one-shot form of build_index)."""
    return build_index(gallery_feats, backend=backend, device=device).search(query_feats, k)


__all__: Sequence[str] = [
    "BACKENDS",
    "ExactIndex",
    "FaissIndex",
    "SearchResult",
    "build_index",
    "faiss_available",
    "search",
]
