"""What every search index shares: the result type, the gallery labels it carries, input checks.

An index answers ``.search(queries, k)`` with a :class:`SearchResult`: for each query the
gallery rows of its best ``min(k, N)`` matches and their cosine similarities, best first.
Every backend works on L2-normalised features (whatever the input scale), so a score is
the inner product of unit vectors, 1 = identical, and scores of all backends are
comparable (IVF-PQ's are estimated from compressed vectors).

An index may also carry the gallery's image paths, pids, camids and metadata (the model
that made the features), so that a saved index is all a search needs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from reid.utils.value_checks import unit_rows

from .gallery import row_labels

FAISS_HINT = "pip install faiss-cpu (or pip install 'circle-reid[faiss]'), or use the 'exact' backend"

ArrayLike = Union[np.ndarray, torch.Tensor]


# Largest |score| a search may return: cosines of unit vectors lie in [-1, 1]; IVF-PQ's estimates
# stay within its reconstructions' lengths (reid.search.faiss_indexes.PQ_MAX_NORM).
SCORE_LIMIT = 1.5


@dataclass
class SearchResult:
    """For each query, the gallery rows of its top K matches and their cosine similarities.

    A score outside [-SCORE_LIMIT, SCORE_LIMIT] or NaN means the index's vectors are not unit
    length (a damaged or crafted file): it raises ValueError rather than rank by it.
    """

    indices: np.ndarray  # int64 [Q, K], best first
    scores: np.ndarray  # float32 [Q, K], descending

    def __post_init__(self) -> None:
        bad = ~(np.abs(self.scores) <= SCORE_LIMIT)  # NaN counts as bad too
        if bad.any():
            worst = self.scores[bad].flat[0]
            raise ValueError(f"The index returned a score of {worst:.4g}, but cosine scores lie in [-1, 1]: its stored "
                             "vectors are damaged or not normalised. Rebuild the index from the gallery.")


def as_unit_rows(x: ArrayLike, what: str) -> torch.Tensor:
    """`x` as a float32 ``[N, D]`` torch tensor with L2-normalised rows (a new tensor).

    Rows of any length are normalised exactly (``reid.utils.value_checks.unit_rows``); an
    all-zero or non-finite row raises ValueError naming `what` and the row.
    """
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x))
    if t.dim() == 1:
        t = t.unsqueeze(0)
    if t.dim() != 2:
        raise ValueError(f"{what} must be a 2-d array [N, D], got shape {tuple(t.shape)}.")
    return unit_rows(t, what)[0]


def check_k(k: int, n: int) -> int:
    """`k` capped at the gallery size `n`; k < 1 is an error."""
    if int(k) < 1:
        raise ValueError(f"k (number of matches per query) must be >= 1, got {k}.")
    return min(int(k), n)


def check_query_dims(queries: torch.Tensor, dim: int) -> None:
    """Queries and gallery must come from the same model: equal feature widths."""
    if queries.shape[1] != dim:
        raise ValueError(
            f"Query features are {queries.shape[1]}-d but the gallery's are {dim}-d: they come "
            "from different models. Extract the queries with the model that built the gallery, "
            "or rebuild the gallery with this model."
        )


def check_not_empty(n: int) -> None:
    if n == 0:
        raise ValueError("The gallery is empty: there is nothing to search.")


def gallery_rows(feats: ArrayLike) -> torch.Tensor:
    """Gallery features as L2-normalised float32 rows ``[N, D]``; an empty gallery is an error."""
    rows = as_unit_rows(feats, "Gallery features")
    check_not_empty(rows.shape[0])
    return rows


def faiss_available() -> bool:
    """Whether the optional faiss package can be imported."""
    try:
        import faiss  # noqa: F401
    except ImportError:
        return False
    return True


def require_faiss(backend: str):
    """The faiss module, or an ImportError naming the backend and how to install faiss."""
    try:
        import faiss
    except ImportError as e:
        raise ImportError(f"The {backend!r} search backend needs the faiss package: {FAISS_HINT}.") from e
    return faiss


class SearchIndex:
    """Base of every backend: size, width, search, parameters and the gallery's labels.

    `paths`, `pids`, `camids` (one entry per gallery row, or None) and `meta` (strings about
    the model that made the features) are kept with the index and saved with it.
    """

    backend = ""
    #: parameters that only matter at search time (changeable after building or loading).
    SEARCH_PARAMS: Tuple[str, ...] = ()
    #: the search parameter raised until a recall target is met ("" = exact, nothing to tune).
    TUNABLE = ""

    def __init__(self) -> None:
        self.paths: Optional[List[str]] = None
        self.pids: Optional[np.ndarray] = None
        self.camids: Optional[np.ndarray] = None
        self.meta: Dict[str, str] = {}
        #: recall@10 against exact search, measured when the index was built (1.0: exact backends)
        self.measured_recall: Optional[float] = None
        #: the recall the search parameter was tuned for (reid.search.tuning)
        self.target_recall: Optional[float] = None
        #: the queries and exact answers the recall was measured on (reid.search.tuning.RecallSample)
        self.recall_sample: Any = None
        #: recall@10 measured again when loaded with verify_recall=True (reid.search.index_io)
        self.verified_recall: Optional[float] = None

    def max_tunable(self) -> int:
        """The largest value tuning may give the TUNABLE parameter."""
        return 0

    def recall_hint(self) -> str:
        """What to do when tuning cannot reach the target (appended to the warning)."""
        return ""

    def __len__(self) -> int:
        raise NotImplementedError

    @property
    def dim(self) -> int:
        """Feature width D."""
        raise NotImplementedError

    def search(self, queries: ArrayLike, k: int = 10) -> SearchResult:
        """Top-`k` gallery rows for each query (k is capped at the gallery size)."""
        q = as_unit_rows(queries, "Query features")
        check_query_dims(q, self.dim)
        return self._search(q, check_k(k, len(self)))

    def _search(self, queries: torch.Tensor, k: int) -> SearchResult:
        """The backend's top-`k` of checked, L2-normalised queries (1 <= k <= the gallery size)."""
        raise NotImplementedError

    def params(self) -> Dict[str, Any]:
        """The backend's parameters (JSON-able), as saved with the index."""
        return {}

    def set_search_params(self, **params: Any) -> "SearchIndex":
        """Change search-time parameters (e.g. ``nprobe`` or ``ef_search``); returns self."""
        for name, value in params.items():
            if name not in self.SEARCH_PARAMS:
                allowed = ", ".join(self.SEARCH_PARAMS) or "none"
                raise ValueError(f"{name!r} is not a search parameter of the {self.backend!r} backend "
                                 f"(its search parameters: {allowed}).")
            setattr(self, name, value)
        return self

    def set_labels(self, paths: Optional[Sequence[str]] = None, pids: Optional[ArrayLike] = None,
                   camids: Optional[ArrayLike] = None, meta: Optional[Dict[str, Any]] = None) -> "SearchIndex":
        """Attach the gallery's paths / pids / camids (one per row) and metadata; returns self."""
        n = len(self)
        self.paths, self.pids, self.camids = row_labels(n, f"The index has {n} gallery rows", paths, pids, camids)
        self.meta = {str(k): str(v) for k, v in (meta or {}).items()}
        return self

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v}" for k, v in self.params().items())
        return f"{type(self).__name__}({len(self)} x {self.dim}{', ' + params if params else ''})"


__all__: Sequence[str] = [
    "FAISS_HINT",
    "SearchIndex",
    "SearchResult",
    "as_unit_rows",
    "check_k",
    "check_not_empty",
    "check_query_dims",
    "gallery_rows",
    "faiss_available",
    "require_faiss",
]
