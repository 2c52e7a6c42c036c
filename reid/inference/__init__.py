"""Features from a trained model: a checkpoint or an exported file, for folders, lists and arrays.

    from reid.inference import Predictor, Gallery, save_gallery, load_gallery, search
    predictor = Predictor.from_run("output/my_run")
    feats, paths = predictor.extract("gallery_images/")
    save_gallery(Gallery(feats, paths), "gallery.npz")
    result = search(predictor.extract_paths(["query.jpg"]), load_gallery("gallery.npz").feats, k=5)
    # millions of crops: an approximate index with the gallery's paths, saved once
    save_index(build_index(load_gallery("gallery.npz"), backend="hnsw"), "gallery.index")
    result = load_index("gallery.index").search(query_feats, k=10)

This package extracts (predictor, loading, backends, sharding, decision_thresholds). Galleries
and indexes live in :mod:`reid.search`, exported files in :mod:`reid.export`, image sources in
:mod:`reid.data.sources`; their names users call are handed on here too, each module loaded
when a name is first used. See docs/inference.md.
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.inference.loading": ["build_inference_model", "load_weights"],
    "reid.inference.predictor": ["Predictor", "load_predictor"],
    "reid.search.gallery": ["Gallery", "load_gallery", "save_gallery"],
    "reid.search.index_io": ["load_index", "save_index"],
    "reid.search.indexes": ["ExactIndex", "build_index", "search"],
    "reid.search.index_base": ["SearchIndex", "SearchResult", "faiss_available"],
    "reid.search.faiss_indexes": ["FaissIndex", "HNSWIndex", "IVFIndex"],
    "reid.export.writer": ["ExportCheck", "ExportMismatchError", "NormalizedFeatureModel", "compare_with_export",
                           "export_model", "export_onnx", "export_program", "export_pt2"],
    "reid.export.exported": ["ExportedModel", "load_exported", "run_exported"],
    "reid.data.sources": ["IMAGE_EXTENSIONS", "ImageEntries", "collect_entries", "collect_images"],
})

__all__ = sorted(__dir__())
