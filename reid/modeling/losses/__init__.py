"""Losses: cross-entropy over head logits, batch-hard triplet, pair-wise Circle, supervised contrastive.

Also the unified loss (Circle paper Eq. 1) and (s_p, s_n) versions of the losses for
analysis and plots. docs/losses.md gives the formulas.
"""
from .cross_entropy import cross_entropy_loss
from .distance import METRICS, cosine_similarity_matrix, pairwise_distance
from .pairwise_circle import circle_loss_from_similarities, pairwise_circle_loss
from .supcon import supervised_contrastive_loss
from .similarity_losses import amsoftmax_loss_sp_sn, circle_loss_sp_sn, triplet_loss_sp_sn
from .triplet import triplet_hinge, triplet_loss
from .unified import masked_logsumexp, softplus_pair_loss, unified_loss

__all__ = [
    "METRICS",
    "amsoftmax_loss_sp_sn",
    "circle_loss_from_similarities",
    "circle_loss_sp_sn",
    "cosine_similarity_matrix",
    "cross_entropy_loss",
    "masked_logsumexp",
    "pairwise_circle_loss",
    "pairwise_distance",
    "softplus_pair_loss",
    "supervised_contrastive_loss",
    "triplet_hinge",
    "triplet_loss",
    "triplet_loss_sp_sn",
    "unified_loss",
]
