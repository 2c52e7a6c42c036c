"""Galleries of features and the indexes that search them (no model here: features in, matches out).

    from reid.search import Gallery, build_index, load_gallery, load_index, save_index
    index = build_index(load_gallery("gallery.npz"), backend="hnsw")   # recall tuned to 0.95
    save_index(index, "gallery.index")
    result = load_index("gallery.index").search(query_feats, k=10)

- gallery.py: saved galleries (.npz / .safetensors: features, paths, labels, how they were made);
- indexes.py: the exact index, the backend registry, ``build_index`` and ``search``;
  faiss_indexes.py: faiss exact, IVF (also PQ) and HNSW; index_base.py: what every index shares;
- tuning.py: recall targets; index_io.py: index files; faiss_format.py: faiss bytes checked first;
- own_files.py: a query's own image is never its match; open.py: a gallery or a saved index, as
  ``tools/search.py`` opens it; options.py: the names a program lists before torch is loaded.

Nothing here imports a model; ``reid.inference`` makes the features (docs/inference.md).
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.search.gallery": ["Gallery", "load_gallery", "save_gallery"],
    "reid.search.index_base": ["SearchIndex", "SearchResult", "faiss_available"],
    "reid.search.indexes": ["ExactIndex", "build_index", "search"],
    "reid.search.faiss_indexes": ["FaissIndex", "HNSWIndex", "IVFIndex"],
    "reid.search.index_io": ["load_index", "save_index"],
    "reid.search.own_files": ["search_without_own_files"],
    "reid.search.options": ["INDEX_BACKENDS"],
})

__all__ = sorted(__dir__())
