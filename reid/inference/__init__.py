"""Using a trained model: features from images, saved galleries, search, export.

    from reid.inference import Predictor, Gallery, save_gallery, load_gallery, search
    predictor = Predictor.from_run("output/my_run")
    feats, paths = predictor.extract("gallery_images/")
    save_gallery(Gallery(feats, paths), "gallery.npz")
    result = search(predictor.extract_paths(["query.jpg"]), load_gallery("gallery.npz").feats, k=5)
    # millions of crops: an approximate index with the gallery's paths, saved once
    save_index(build_index(load_gallery("gallery.npz"), backend="hnsw"), "gallery.index")
    result = load_index("gallery.index").search(query_feats, k=10)

This package sits on top of the others (it uses config, data, modeling and evaluation);
nothing in the library imports it. See docs/inference.md.
"""
from .export import (
    ExportCheck,
    ExportedModel,
    ExportMismatchError,
    NormalizedFeatureModel,
    compare_with_export,
    export_model,
    export_onnx,
    export_program,
    export_pt2,
    load_exported,
    run_exported,
)
from .gallery import Gallery, load_gallery, save_gallery
from .loading import build_inference_model, load_weights
from .predictor import Predictor, load_predictor
from .index_io import load_index, save_index
from .search import (
    BACKENDS,
    ExactIndex,
    FaissIndex,
    HNSWIndex,
    IVFIndex,
    SearchIndex,
    SearchResult,
    build_index,
    faiss_available,
    search,
)
from .sources import IMAGE_EXTENSIONS, ImageEntries, collect_entries, collect_images

__all__ = [
    "BACKENDS",
    "ExactIndex",
    "ExportCheck",
    "ExportMismatchError",
    "ExportedModel",
    "FaissIndex",
    "Gallery",
    "HNSWIndex",
    "IVFIndex",
    "IMAGE_EXTENSIONS",
    "ImageEntries",
    "NormalizedFeatureModel",
    "Predictor",
    "SearchIndex",
    "SearchResult",
    "build_index",
    "build_inference_model",
    "collect_entries",
    "collect_images",
    "compare_with_export",
    "export_model",
    "export_onnx",
    "export_program",
    "export_pt2",
    "faiss_available",
    "load_exported",
    "load_gallery",
    "load_index",
    "load_predictor",
    "load_weights",
    "run_exported",
    "save_gallery",
    "save_index",
    "search",
]
