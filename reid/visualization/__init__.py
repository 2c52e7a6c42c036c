"""Visualisation: ranked-result pictures with an HTML/CSV index, search pictures, and analysis plots.

It may use evaluation, data, modeling and utils, never engine. ``visualize_from_features`` is what
``tools/test.py --visualize K`` calls; ``tools/visualize.py`` and ``tools/plot.py`` are thin wrappers
over this package; ``search_results`` draws ``tools/search.py --draw``. Its modules load when a name
is first used, so ``options`` (bounds a program's ``--help`` shows) comes without OpenCV.
"""
from reid.utils.lazy import lazy_exports

__getattr__, __dir__ = lazy_exports(__name__, {
    "reid.visualization.from_features": ["SavedFeatures", "load_saved_features", "visualize_from_features",
                                         "visualize_from_npz"],
    "reid.visualization.items": ["Items", "as_items"],
    "reid.visualization.ranked_list": ["draw_ranked_list", "visualize_ranked_results"],
    "reid.visualization.ranking": ["RankedRow", "rank_gallery"],
    "reid.visualization.results": ["QueryPicture", "RankedVisualization", "ShownRow"],
    "reid.visualization.selection": ["QuerySelection", "select_queries"],
})

__all__ = sorted(__dir__())
