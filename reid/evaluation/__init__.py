"""Evaluation: distances, CMC/mAP/mINP (also over gallery draws), k-reciprocal re-ranking, query expansion,
feature files."""
from .distance import compute_distance
from .evaluator import (
    EvalResult, evaluate_draws, evaluate_features, evaluate_model, format_draws, format_table, format_verification,
)
from .extract import Features, extract_features
from .feature_io import load_features, save_features
from .gallery_draws import draw_galleries
from .open_set import holdout_gallery, open_set_metrics, open_set_metrics_from_features
from .query_expansion import aqe
from .rank import cross_camera_matches, evaluate_rank, evaluate_rank_from_features
from .rerank import re_ranking
from .verification import verification_metrics, verification_metrics_from_features

__all__ = [
    "EvalResult",
    "Features",
    "draw_galleries",
    "evaluate_draws",
    "evaluate_features",
    "evaluate_model",
    "extract_features",
    "format_draws",
    "format_table",
    "format_verification",
    "holdout_gallery",
    "open_set_metrics",
    "open_set_metrics_from_features",
    "aqe",
    "compute_distance",
    "cross_camera_matches",
    "evaluate_rank",
    "evaluate_rank_from_features",
    "load_features",
    "re_ranking",
    "save_features",
    "verification_metrics",
    "verification_metrics_from_features",
]
