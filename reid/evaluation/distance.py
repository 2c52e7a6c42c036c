"""Pairwise distances between feature sets: cosine (1 - cos) and Euclidean.

Everything that turns features into distances in ``reid.evaluation`` goes through the
helpers here (``compute_distance``, the rank evaluator working from features, re-ranking,
query expansion), so that the same pair of features always gets the same formula.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import numpy as np
import torch

ArrayLike = Union[np.ndarray, torch.Tensor]

METRICS = ("cosine", "euclidean")

# Rows of queries per block when the caller gives no chunk size: bounds the temporary
# block to about DEFAULT_BLOCK_ELEMENTS floats whatever the gallery size.
DEFAULT_BLOCK_ELEMENTS = 1 << 24


def check_metric(metric: str) -> str:
    """Return `metric` lower-cased, or raise a ValueError listing the valid metrics."""
    name = str(metric).lower()
    if name not in METRICS:
        raise ValueError(f"Unknown distance metric {metric!r}. Valid metrics: {', '.join(METRICS)}.")
    return name


def as_feature_tensor(x: ArrayLike, name: str) -> torch.Tensor:
    """Return `x` as a 2-D float32 torch tensor on its own device, checked for bad values.

    `name` is the argument name used in error messages (e.g. ``"q_feats"``).
    """
    if isinstance(x, np.ndarray):
        t = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, torch.Tensor):
        t = x.detach()
    else:
        raise TypeError(f"{name} must be a numpy array or torch tensor, got {type(x).__name__}.")
    if t.dim() != 2:
        raise ValueError(f"{name} must be 2-D [num_items, dim], got shape {tuple(t.shape)}.")
    if t.shape[0] == 0:
        raise ValueError(f"{name} is empty (0 rows): nothing to compare; check the query/gallery split.")
    if t.shape[1] == 0:
        raise ValueError(f"{name} has feature dimension 0.")
    if not (t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise TypeError(f"{name} must hold real numbers, got dtype {t.dtype}.")
    t = t.to(torch.float32)
    if not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).any(dim=1).nonzero()[0, 0])
        raise ValueError(
            f"{name} contains NaN or inf (first bad row: {bad}). Check the model output "
            "(e.g. a diverged checkpoint or fp16 overflow) before evaluating."
        )
    return t


def check_same_dim(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    """Raise a ValueError when two feature matrices have different widths."""
    if a.shape[1] != b.shape[1]:
        raise ValueError(
            f"{name_a} has dimension {a.shape[1]} but {name_b} has {b.shape[1]}; both must come "
            "from the same model."
        )


def prepare_features(
    x: torch.Tensor, metric: str, center: Optional[torch.Tensor] = None
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Put checked float32 features in the form `pairwise_block` expects.

    cosine: rows L2-normalised (a zero row stays zero, i.e. distance 1 to everything);
    euclidean: rows minus `center` and their squared norms. Subtracting a common centre
    leaves Euclidean distances unchanged but avoids the cancellation of the
    |a|^2 + |b|^2 - 2ab form when all features share a large offset (post-ReLU features do).
    Returns ``(features, squared_norms_or_None)``.
    """
    if metric == "cosine":
        return torch.nn.functional.normalize(x, p=2.0, dim=1), None
    if center is not None:
        x = x - center
    return x, (x * x).sum(dim=1)


def feature_center(*parts: torch.Tensor) -> torch.Tensor:
    """Mean feature over all rows of `parts` (accumulated in float64), as float32."""
    total = sum(p.to(torch.float64).sum(dim=0) for p in parts)
    count = sum(p.shape[0] for p in parts)
    return (total / count).to(torch.float32)


def pairwise_block(
    a: torch.Tensor,
    a_sq: Optional[torch.Tensor],
    b: torch.Tensor,
    b_sq: Optional[torch.Tensor],
    metric: str,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Distances between prepared rows `a` [A, D] and `b` [B, D] as a float32 [A, B] tensor.

    cosine: 1 - a.b clamped to [0, 2]; euclidean: sqrt(max(|a|^2 + |b|^2 - 2 a.b, 0)).
    Works in place on one [A, B] buffer (`out` if given) so a block costs no temporaries.
    """
    if metric == "cosine":
        d = torch.mm(a, b.t(), out=out) if out is not None else torch.mm(a, b.t())
        return d.neg_().add_(1.0).clamp_(0.0, 2.0)
    if out is not None:
        d = torch.addmm(b_sq.unsqueeze(0), a, b.t(), beta=1.0, alpha=-2.0, out=out)
    else:
        d = torch.addmm(b_sq.unsqueeze(0), a, b.t(), beta=1.0, alpha=-2.0)
    return d.add_(a_sq.unsqueeze(1)).clamp_min_(0.0).sqrt_()


def pair_distances(
    x: torch.Tensor, x_sq: Optional[torch.Tensor], i: torch.Tensor, j: torch.Tensor, metric: str
) -> torch.Tensor:
    """Distances d(x[i[p]], x[j[p]]) for index pairs p, same formula as `pairwise_block`."""
    dot = (x[i] * x[j]).sum(dim=1)
    if metric == "cosine":
        return (1.0 - dot).clamp_(0.0, 2.0)
    return (x_sq[i] + x_sq[j] - 2.0 * dot).clamp_min_(0.0).sqrt_()


def rows_per_block(num_cols: int, chunk_size: Optional[int]) -> int:
    """Rows per block: `chunk_size` when given (must be >= 1), else a bounded default."""
    if chunk_size is not None:
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
        return int(chunk_size)
    return max(1, DEFAULT_BLOCK_ELEMENTS // max(1, num_cols))


def compute_distance(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    metric: str = "cosine",
    chunk_size: Optional[int] = None,
) -> np.ndarray:
    """Query x gallery distance matrix as numpy float32 ``[Q, G]``.

    Args:
        q_feats: query features ``[Q, D]`` (numpy or torch; CUDA tensors are computed on the GPU).
        g_feats: gallery features ``[G, D]``.
        metric: ``"cosine"`` (1 - cosine similarity; features are L2-normalised here, so
            values lie in [0, 2]) or ``"euclidean"`` (plain, not squared; >= 0).
        chunk_size: query rows computed per block (default: about 16M entries per block).

    Raises:
        ValueError: unknown metric, empty inputs, mismatched dimensions, NaN/inf features.
    """
    metric = check_metric(metric)
    q = as_feature_tensor(q_feats, "q_feats")
    g = as_feature_tensor(g_feats, "g_feats").to(q.device)
    check_same_dim(q, g, "q_feats", "g_feats")
    center = feature_center(g) if metric == "euclidean" else None
    q, q_sq = prepare_features(q, metric, center)
    g, g_sq = prepare_features(g, metric, center)
    out = np.empty((q.shape[0], g.shape[0]), dtype=np.float32)
    out_t = torch.from_numpy(out)
    step = rows_per_block(g.shape[0], chunk_size)
    for r0 in range(0, q.shape[0], step):
        r1 = min(r0 + step, q.shape[0])
        qs = q_sq[r0:r1] if q_sq is not None else None
        if q.device.type == "cpu":
            # Write straight into the result rows (contiguous) so no block is copied.
            pairwise_block(q[r0:r1], qs, g, g_sq, metric, out=out_t[r0:r1])
        else:
            out_t[r0:r1] = pairwise_block(q[r0:r1], qs, g, g_sq, metric).cpu()
    return out
