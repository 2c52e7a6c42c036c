"""Visualisation: ranked-result pictures with an HTML/CSV index, and analysis plots.

The top library layer: it may use evaluation, data, modeling and utils, never engine.
``visualize_from_features`` is what ``tools/test.py --visualize K`` calls;
``tools/visualize.py`` and ``tools/plot.py`` are thin wrappers over this package.
"""
from .from_features import SavedFeatures, load_saved_features, visualize_from_features, visualize_from_npz
from .items import Items, as_items
from .ranked_list import draw_ranked_list, visualize_ranked_results
from .ranking import RankedRow, rank_gallery
from .results import QueryPicture, RankedVisualization, ShownRow
from .selection import QuerySelection, select_queries

__all__ = [
    "Items",
    "QueryPicture",
    "QuerySelection",
    "RankedRow",
    "RankedVisualization",
    "SavedFeatures",
    "ShownRow",
    "as_items",
    "draw_ranked_list",
    "load_saved_features",
    "rank_gallery",
    "select_queries",
    "visualize_from_features",
    "visualize_from_npz",
    "visualize_ranked_results",
]
