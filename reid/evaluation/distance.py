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
    # min and max propagate NaN, so both finite means every entry is; one reduction pass
    # (torch.isfinite(t).all() is an order of magnitude slower on CPU).
    lo, hi = torch.aminmax(t)
    if not (bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))):
        bad = int((~torch.isfinite(t)).any(dim=1).nonzero()[0, 0])
        raise ValueError(
            f"{name} contains NaN or inf (first bad row: {bad}). Check the model output "
            "(e.g. a diverged checkpoint or fp16 overflow) before evaluating."
        )
    return t


def as_query_gallery(q_feats: ArrayLike, g_feats: ArrayLike) -> Tuple[torch.Tensor, torch.Tensor]:
    """`q_feats` and `g_feats` as :func:`as_feature_tensor` makes them, the gallery on the queries'
    device; a ValueError when their widths differ."""
    q = as_feature_tensor(q_feats, "q_feats")
    g = as_feature_tensor(g_feats, "g_feats").to(q.device)
    if q.shape[1] != g.shape[1]:
        raise ValueError(
            f"q_feats has dimension {q.shape[1]} but g_feats has {g.shape[1]}; both must come from the same model."
        )
    return q, g


def prepare_features(
    x: torch.Tensor, metric: str, center: Optional[torch.Tensor] = None, inplace: bool = False
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Put checked float32 features in the form `pairwise_block` expects.

    cosine: rows L2-normalised (a zero row stays zero, i.e. distance 1 to everything);
    euclidean: rows minus `center` and their squared norms. Subtracting a common centre
    leaves Euclidean distances unchanged but avoids the cancellation of the
    |a|^2 + |b|^2 - 2ab form when all features share a large offset (post-ReLU features do).
    With ``inplace=True`` `x` (a private copy of the caller's) is overwritten instead of
    copied. Returns ``(features, squared_norms_or_None)``.
    """
    if not inplace:
        x = x.clone()
    if metric == "cosine":
        # Same as torch.nn.functional.normalize (norm clamped at 1e-12), without a new tensor.
        return x.div_(torch.linalg.vector_norm(x, dim=1, keepdim=True).clamp_min_(1e-12)), None
    if center is not None:
        x.sub_(center)
    return x, torch.linalg.vector_norm(x, dim=1).square_()


def feature_center(*parts: torch.Tensor) -> torch.Tensor:
    """Mean feature over all rows of `parts` (accumulated in float64), as float32."""
    total = sum(p.to(torch.float64).sum(dim=0) for p in parts)
    count = sum(p.shape[0] for p in parts)
    return (total / count).to(torch.float32)


# oneDNN's fp32 matrix product (reached through mkldnn-layout tensors) is up to ~1.8x faster
# than the default BLAS on CPUs where MKL takes a generic path (measured on AVX-512 AMD),
# with the same fp32 accuracy. Its setup cost only pays off on large products.
_ONEDNN_MIN_MACS = 1 << 26
_onednn_ok = torch.backends.mkldnn.is_available()


def _onednn_wanted(a_rows: int, b_rows: int, dim: int, device: torch.device) -> bool:
    return _onednn_ok and device.type == "cpu" and a_rows * b_rows * dim >= _ONEDNN_MIN_MACS


def matmul_operand(b: torch.Tensor, other_rows: int) -> Optional[torch.Tensor]:
    """A copy of `b` in oneDNN layout when products with `other_rows`-row blocks will use it
    (convert a reused operand once), else None."""
    if _onednn_wanted(other_rows, b.shape[0], b.shape[1], b.device):
        return b.contiguous().to_mkldnn()
    return None


def dot_nt(
    a: torch.Tensor, b: torch.Tensor, a_op: Optional[torch.Tensor] = None, b_op: Optional[torch.Tensor] = None,
    blas: bool = False,
) -> torch.Tensor:
    """``a @ b.T`` as a dense float32 tensor, through oneDNN for large CPU products;
    `a_op`, `b_op` are optional `matmul_operand` copies of reused operands. ``blas=True``
    keeps the default BLAS: for operands used once in small-by-large products, whose oneDNN
    conversion costs more than the product saves (measured: a 64 x 16,384 block at 512-d takes
    3x as long through oneDNN as through MKL on an AVX-512 Intel Xeon)."""
    global _onednn_ok
    if not blas and _onednn_wanted(a.shape[0], b.shape[0], a.shape[1], a.device):
        try:
            am = a_op if a_op is not None else a.contiguous().to_mkldnn()
            bm = b_op if b_op is not None else b.contiguous().to_mkldnn()
            return torch.nn.functional.linear(am, bm).to_dense()
        except RuntimeError:
            _onednn_ok = False  # this build cannot; use the default BLAS from now on
    return torch.mm(a, b.t())


def pairwise_block(
    a: torch.Tensor,
    a_sq: Optional[torch.Tensor],
    b: torch.Tensor,
    b_sq: Optional[torch.Tensor],
    metric: str,
    a_op: Optional[torch.Tensor] = None,
    b_op: Optional[torch.Tensor] = None,
    blas: bool = False,
) -> torch.Tensor:
    """Distances between prepared rows `a` [A, D] and `b` [B, D] as a float32 [A, B] tensor.

    cosine: 1 - a.b clamped to [0, 2]; euclidean: sqrt(max(|a|^2 + |b|^2 - 2 a.b, 0)).
    `a_op`, `b_op`: `matmul_operand` copies of operands the caller reuses; `blas`: see
    :func:`dot_nt`. The element-wise
    steps run in place on the product; on CPU through numpy, whose single-threaded passes
    avoid the thread start/stop cost of small parallel torch operations on a busy machine.
    """
    d = dot_nt(a, b, a_op, b_op, blas)
    if d.device.type == "cpu":
        dn = d.numpy()
        if metric == "cosine":
            np.subtract(1.0, dn, out=dn)
            np.clip(dn, 0.0, 2.0, out=dn)
        else:
            dn *= -2.0
            dn += b_sq.numpy()[None, :]
            dn += a_sq.numpy()[:, None]
            np.maximum(dn, 0.0, out=dn)
            np.sqrt(dn, out=dn)
        return d
    if metric == "cosine":
        return d.neg_().add_(1.0).clamp_(0.0, 2.0)
    return d.mul_(-2.0).add_(b_sq.unsqueeze(0)).add_(a_sq.unsqueeze(1)).clamp_min_(0.0).sqrt_()


# Feature rows gathered per slice in `pair_distances`: two 512 x D float32 buffers stay in
# cache, which makes the random row reads several times faster than large gathers.
_PAIR_SLICE = 512


def pair_distances(
    x: torch.Tensor, x_sq: Optional[torch.Tensor], i: np.ndarray, j: np.ndarray, metric: str
) -> np.ndarray:
    """Distances d(x[i[p]], x[j[p]]) for index pairs p (numpy float32), same formula as
    `pairwise_block`; `x`, `x_sq` as returned by `prepare_features`."""
    out = np.empty(len(i), dtype=np.float32)
    if x.device.type == "cpu":
        xn = x.numpy()
        a = np.empty((_PAIR_SLICE, x.shape[1]), dtype=np.float32)
        b = np.empty_like(a)
        for p0 in range(0, len(i), _PAIR_SLICE):
            m = min(_PAIR_SLICE, len(i) - p0)
            np.take(xn, i[p0 : p0 + m], axis=0, out=a[:m])
            np.take(xn, j[p0 : p0 + m], axis=0, out=b[:m])
            out[p0 : p0 + m] = np.einsum("ij,ij->i", a[:m], b[:m])
        dot = out
    else:
        it = torch.from_numpy(i).to(x.device)
        jt = torch.from_numpy(j).to(x.device)
        dot = torch.cat([(x[it[p : p + 65536]] * x[jt[p : p + 65536]]).sum(1) for p in range(0, len(i), 65536)])
        dot = dot.cpu().numpy()
    if metric == "cosine":
        return np.clip(1.0 - dot, 0.0, 2.0, out=out)
    sq = x_sq.cpu().numpy()
    return np.sqrt(np.maximum(sq[i] + sq[j] - 2.0 * dot, 0.0)).astype(np.float32)


def rows_per_block(num_cols: int, chunk_size: Optional[int], elements: int = DEFAULT_BLOCK_ELEMENTS) -> int:
    """Rows per block: `chunk_size` when given (must be >= 1), else about `elements` entries' worth."""
    if chunk_size is not None:
        if int(chunk_size) < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
        return int(chunk_size)
    return max(1, elements // max(1, num_cols))


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
    q, g = as_query_gallery(q_feats, g_feats)
    center = feature_center(g) if metric == "euclidean" else None
    q, q_sq = prepare_features(q, metric, center)
    g, g_sq = prepare_features(g, metric, center)
    out = np.empty((q.shape[0], g.shape[0]), dtype=np.float32)
    out_t = torch.from_numpy(out)
    step = rows_per_block(g.shape[0], chunk_size)
    g_op = matmul_operand(g, min(step, q.shape[0]))
    for r0 in range(0, q.shape[0], step):
        r1 = min(r0 + step, q.shape[0])
        qs = q_sq[r0:r1] if q_sq is not None else None
        out_t[r0:r1] = pairwise_block(q[r0:r1], qs, g, g_sq, metric, b_op=g_op)
    return out
