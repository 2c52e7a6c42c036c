"""A gallery file or a saved index, opened as ``tools/search.py`` opens it: loaded (search parameters
changeable, build parameters refused), or built from the gallery (and saved)."""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, Optional, Sequence

from .gallery import load_gallery
from .index_base import SearchIndex
from .index_io import load_index, save_index
from .indexes import build_index
from .options import BUILD_PARAMS

logger = logging.getLogger(__name__)
Log = Callable[[str], None]


def _flags(names: Sequence[str]) -> str:
    return ", ".join("--" + n.replace("_", "-") for n in names)


def open_index(gallery_path: Optional[str] = None, index_path: Optional[str] = None, backend: Optional[str] = None,
               params: Optional[Dict[str, Any]] = None, save_index_path: Optional[str] = None,
               device: Any = None, check: Optional[Callable[[int, Dict[str, str], str], None]] = None,
               log: Log = logger.info, verify_recall: bool = False, need_paths: bool = True) -> SearchIndex:
    """The search index: loaded from `index_path`, or built from the gallery file (and saved).

    `params` are backend parameters (nlist, nprobe, ...). On a saved index only the search
    parameters (nprobe, ef_search) can change; `backend`, when given, must be the index's.
    `check(dim, meta, path)` runs on the gallery before any index is built. `verify_recall`
    measures a loaded approximate index's recall again (a warning when the recorded value is
    off by more than 0.05), before any search parameter is changed. A loaded index must hold
    its images' paths when `need_paths` (to show the matches).
    """
    params = {k: v for k, v in (params or {}).items() if v is not None}
    if (gallery_path is None) == (index_path is None):
        raise ValueError("Give either a gallery file (--gallery) or a saved index (--index).")
    if verify_recall and index_path is None:
        raise ValueError("--verify-recall checks the recall recorded in a saved index (--index); an index built from "
                         "--gallery measures its recall while it is built (--target-recall).")
    if index_path is not None:
        if save_index_path is not None:
            raise ValueError(f"--save-index builds an index from a gallery file (--gallery); {index_path!r} "
                             "is already a saved index.")
        index = load_index(index_path, device=device, verify_recall=verify_recall)
        if verify_recall and index.verified_recall is not None:
            log(f"recall@10 of {index_path} measured again: {index.verified_recall:.3f} (recorded: "
                f"{'none' if index.measured_recall is None else format(index.measured_recall, '.3f')})")
        elif verify_recall and not index.TUNABLE:
            log(f"{index_path} is an exact {index.backend!r} index: its recall is 1 by construction")
        if backend is not None and str(backend).lower() != index.backend:
            raise ValueError(f"Index {index_path!r} is a {index.backend!r} index, not {backend!r}: drop --backend, "
                             f"or build a {backend!r} index from the gallery (--gallery FILE --save-index).")
        fixed = [k for k in params if k in BUILD_PARAMS]
        if fixed:
            raise ValueError(f"{_flags(fixed)} only apply when building an index; {index_path!r} is already built "
                             f"({index!r}). Rebuild it from the gallery to change them.")
        index.set_search_params(**params)
        if check is not None:
            check(index.dim, index.meta, index_path)
        if need_paths and index.paths is None:
            raise ValueError(f"Index {index_path!r} holds no image paths; build it from a gallery file with "
                             "tools/search.py --gallery FILE --save-index INDEX.")
        log(f"loaded {index!r} from {index_path}")
        return index
    gallery = load_gallery(gallery_path)
    if check is not None:
        check(gallery.dim, gallery.meta, gallery_path)
    start = time.perf_counter()
    index = build_index(gallery, backend=backend or "exact", device=device, **params)
    if index.backend != "exact":
        log(f"built {index!r} in {time.perf_counter() - start:.1f} s")
    if save_index_path is not None:
        save_index(index, save_index_path)
        log(f"saved the {index.backend!r} index of {len(index)} gallery images with their paths to {save_index_path}")
    return index


__all__ = ["open_index"]
