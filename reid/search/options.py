"""What a user chooses when an index is built or searched: names and bounds only, so that a program's
``--help`` and argument checks answer without loading torch or faiss."""
from typing import Tuple

#: ``build_index(backend=...)``: torch brute force, faiss exact, faiss HNSW, faiss inverted lists.
INDEX_BACKENDS: Tuple[str, ...] = ("exact", "faiss", "hnsw", "ivf")
#: Backend parameters by when they act: building, or searching (changeable on a saved index).
BUILD_PARAMS: Tuple[str, ...] = ("nlist", "train_size", "pq_m", "pq_nbits", "hnsw_m", "ef_construction",
                                 "target_recall")
SEARCH_PARAMS: Tuple[str, ...] = ("nprobe", "ef_search")
HNSW_MAX_EF_SEARCH = 8192  # the largest ef_search that recall tuning tries
# Links per vector: memory grows by ~8 * hnsw_m bytes per image (faiss suggests 4 to 64).
HNSW_MAX_M = 256

__all__ = ["BUILD_PARAMS", "HNSW_MAX_EF_SEARCH", "HNSW_MAX_M", "INDEX_BACKENDS", "SEARCH_PARAMS"]
