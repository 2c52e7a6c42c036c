"""Plots (matplotlib, Agg): each writes a PNG plus the numbers behind it (.json, and .csv)."""
from ._figure import PlotFiles
from .cmc import cmc_curves_from_features, plot_cmc, read_cmc_json
from .decision_boundary import (
    head_from_config,
    decision_boundary,
    load_pairs_npz,
    past_boundary,
    plot_decision_boundary,
    resolve_margin,
    similarity_pairs,
)
from .dynamics import plot_dynamics, read_train_dynamics
from .roc import plot_roc, read_roc_json
from .gradients import GradientField, default_loss_params, gradient_grid, loss_gradients, plot_gradients
from .similarity import (
    PairSimilarities,
    overlap_stats,
    pair_similarities,
    plot_similarity_distributions,
    similarity_from_features,
)

__all__ = [
    "GradientField",
    "PairSimilarities",
    "PlotFiles",
    "cmc_curves_from_features",
    "decision_boundary",
    "default_loss_params",
    "gradient_grid",
    "head_from_config",
    "load_pairs_npz",
    "loss_gradients",
    "overlap_stats",
    "pair_similarities",
    "past_boundary",
    "plot_cmc",
    "plot_decision_boundary",
    "plot_dynamics",
    "plot_gradients",
    "plot_similarity_distributions",
    "read_cmc_json",
    "plot_roc",
    "read_roc_json",
    "read_train_dynamics",
    "resolve_margin",
    "similarity_from_features",
    "similarity_pairs",
]
