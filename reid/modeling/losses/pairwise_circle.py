"""Pair-wise Circle loss over in-batch pairs (Circle paper Eq. 6 with pair-wise labels)."""
from __future__ import annotations

from torch import Tensor

from reid.modeling.heads.functional import circle_negative_logits, circle_positive_logits

from .distance import check_batch, cosine_similarity_matrix, label_masks
from .unified import softplus_pair_loss


def circle_loss_from_similarities(
    sim: Tensor, pos_mask: Tensor, neg_mask: Tensor, gamma: float = 80.0, margin: float = 0.4
) -> Tensor:
    """Per-row Eq. 6 for a similarity matrix ``[N, M]`` and boolean pair masks.

    Row r's loss is log(1 + sum_{j in neg} exp(gamma alpha_n (s_rj - m)) *
    sum_{i in pos} exp(-gamma alpha_p (s_ri - (1 - m)))), with detached alphas (same
    functions as the Circle head). Rows lacking positives or negatives give 0.
    """
    return softplus_pair_loss(
        circle_positive_logits(sim, gamma, margin),
        circle_negative_logits(sim, gamma, margin),
        pos_mask,
        neg_mask,
    )


def pairwise_circle_loss(
    features: Tensor, targets: Tensor, gamma: float = 80.0, margin: float = 0.4
) -> Tensor:
    """Pair-wise Circle loss, mean over anchors.

    Similarities are cosines of the L2-normalised features. For each anchor, positives
    are the other samples with its label (not itself) and negatives the samples with other
    labels; anchors lacking either are left out of the mean (0 with no valid anchor, still
    attached to the graph). Defaults gamma = 80, m = 0.4: the paper's pair-wise setting.
    Log-sum-exp keeps it finite for any gamma; computed in float32.
    """
    check_batch("pairwise_circle_loss", features, targets)
    if gamma <= 0 or margin < 0:
        raise ValueError(
            f"pairwise_circle_loss needs gamma > 0 and margin >= 0, got gamma={gamma}, margin={margin}."
        )
    features = features.float()
    sim = cosine_similarity_matrix(features, features)
    pos, neg = label_masks(targets)
    valid = (pos.any(1) & neg.any(1)).to(sim.dtype)
    # Invalid anchors give exactly 0 (see softplus_pair_loss); the mask drops them from
    # the mean without boolean indexing, which would sync with the GPU.
    per_anchor = circle_loss_from_similarities(sim, pos, neg, gamma, margin)
    return (per_anchor * valid).sum() / valid.sum().clamp_min(1.0)
