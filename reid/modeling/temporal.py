"""Temporal aggregation of frame features ``[B, T, D]`` into one vector per tracklet ``[B, D]``.

``TEMPORAL_REGISTRY`` is keyed by ``MODEL.VIDEO.TEMPORAL``:

* ``avg``: mean over the valid frames (temporal pooling).
* ``max``: element-wise maximum over the valid frames.
* ``attention``: a learned frame-quality score per frame, softmax-normalised over the valid
  frames, and the weighted sum of the frame features: the temporal attention of Gao & Nevatia,
  "Revisiting Temporal Modeling for Video-based Person ReID" (2018), Sec. 3.2 (there the scores
  come from convolutions over each frame's feature map; here a linear layer scores the pooled
  frame vector, so the module fits after any backbone).

Every module takes an optional bool ``mask [B, T]`` (True = a real frame) for padded batches;
padded frames never change the result, whatever they hold. A row without any valid frame gives a
zero vector (the frame samplers never produce an empty tracklet; zeros keep such a row from
poisoning a batch with NaN).

Long test tracklets are pooled in chunks (see :func:`reid.data.frame_sampling.test_chunks`):
``summarize`` reduces a chunk to a :class:`ChunkSummary`, and :func:`pool_chunks` merges the
summaries to exactly what pooling all frames at once gives. ``avg`` is softmax pooling with equal
scores, so ``avg`` and ``attention`` share one equation (:func:`_softmax_pool`) and one merge:
each chunk keeps its pooled vector and the log-sum-exp of its scores (for ``avg``, the log of its
frame count), and the merge is again softmax pooling, over chunks, with those log-sum-exps as
scores.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from reid.utils.registry import Registry

TEMPORAL_REGISTRY = Registry("MODEL.VIDEO.TEMPORAL")


@dataclass
class ChunkSummary:
    """What a chunk of frames contributes to a tracklet's pooled feature.

    Attributes:
        value: ``[B, D]`` the chunk pooled on its own.
        log_mass: ``[B]`` log-sum-exp of the chunk's frame scores over its valid frames
            (``log(count)`` for ``avg`` and ``max``); ``-inf`` where the chunk has no valid frame.
    """

    value: torch.Tensor
    log_mass: torch.Tensor


def _check_input(x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """Return a bool ``[B, T]`` mask (all True when `mask` is None) after checking shapes."""
    if x.dim() != 3:
        raise ValueError(f"temporal pooling expects frame features [B, T, D], got shape {tuple(x.shape)}.")
    if mask is None:
        return torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    if mask.dtype != torch.bool or tuple(mask.shape) != tuple(x.shape[:2]):
        raise ValueError(f"temporal pooling mask must be bool {tuple(x.shape[:2])}, "
                         f"got {mask.dtype} {tuple(mask.shape)}.")
    return mask


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Softmax of ``scores [B, T]`` over the valid frames: ``w_t = exp(s_t - L)`` with
    ``L = log sum_{valid t} exp(s_t)``; returns ``(w [B, T], L [B])``, ``w = 0`` on masked frames.

    Masked scores are set to -inf before the log-sum-exp so they get exactly zero weight. ``L``
    is replaced by 0 where it is -inf (no valid frame) so the weights there are exp(-inf) = 0
    rather than NaN, in the forward pass and the backward pass alike.
    """
    scores = scores.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(scores, dim=1)
    safe = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
    return torch.exp(scores - safe.unsqueeze(1)), lse


def _softmax_pool(scores: torch.Tensor, x: torch.Tensor, mask: torch.Tensor) -> ChunkSummary:
    """``sum_t w_t x_t`` with ``w`` from :func:`_masked_softmax` (Gao & Nevatia 2018, Sec. 3.2)."""
    weights, lse = _masked_softmax(scores, mask)
    # Zero the padded features too: a zero weight times an inf/NaN pad would still be NaN.
    x = x.masked_fill(~mask.unsqueeze(-1), 0.0)
    value = torch.bmm(weights.unsqueeze(1).to(x.dtype), x).squeeze(1)
    return ChunkSummary(value, lse)


def _masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over the valid frames of ``x [B, T, D]``; zeros for empty rows."""
    value = x.masked_fill(~mask.unsqueeze(-1), float("-inf")).amax(dim=1)
    return torch.where(mask.any(dim=1, keepdim=True), value, torch.zeros_like(value))


def _stack(summaries: Sequence[ChunkSummary]) -> Tuple[torch.Tensor, torch.Tensor]:
    if len(summaries) == 0:
        raise ValueError("pool_chunks needs at least one chunk summary.")
    values = torch.stack([s.value for s in summaries], dim=1)  # [B, K, D]
    masses = torch.stack([s.log_mass for s in summaries], dim=1)  # [B, K]
    return values, masses


class TemporalPooling(nn.Module):
    """Base of the temporal poolings: ``forward(x [B, T, D], mask [B, T] | None) -> [B, D]``.

    Subclasses define :meth:`summarize` (a chunk's pooled value and log-mass) and :meth:`merge`
    (summaries of consecutive chunks -> the tracklet's pooled feature).
    """

    def summarize(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> ChunkSummary:
        raise NotImplementedError

    @staticmethod
    def merge(summaries: Sequence[ChunkSummary]) -> torch.Tensor:
        """Softmax pooling over chunks with their log-masses as scores: chunk ``k`` weighs
        ``exp(L_k - L)``, its share of the whole tracklet's softmax mass."""
        values, masses = _stack(summaries)
        return _softmax_pool(masses, values, torch.isfinite(masses)).value

    @staticmethod
    def merge_grouped(chunks: ChunkSummary, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
        """:meth:`merge` for many tracklets at once: row ``k`` of `chunks` (``value [K, D]``,
        ``log_mass [K]``) is a chunk of tracklet ``groups[k]``; returns ``[num_groups, D]``, zeros
        for a tracklet without any valid chunk. Softmax pooling over each tracklet's chunks, the
        shift by each tracklet's largest log-mass keeping ``exp`` in range."""
        valid = torch.isfinite(chunks.log_mass)
        shift = torch.full((num_groups,), float("-inf"), dtype=chunks.log_mass.dtype, device=groups.device)
        shift = shift.scatter_reduce(0, groups, chunks.log_mass, "amax")
        weight = torch.where(valid, torch.exp(chunks.log_mass - shift[groups].masked_fill(~valid, 0.0)),
                             torch.zeros_like(chunks.log_mass))
        total = torch.zeros(num_groups, dtype=weight.dtype, device=groups.device).index_add(0, groups, weight)
        value = chunks.value.masked_fill(~valid.unsqueeze(1), 0.0) * weight.unsqueeze(1).to(chunks.value.dtype)
        summed = torch.zeros((num_groups, chunks.value.shape[1]), dtype=chunks.value.dtype,
                             device=groups.device).index_add(0, groups, value)
        return summed / total.clamp_min(torch.finfo(total.dtype).tiny).unsqueeze(1).to(summed.dtype)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.summarize(x, mask).value


class TemporalAvgPool(TemporalPooling):
    """Mean of the valid frames (softmax pooling with equal scores); `dim` is unused, taken so
    every registry entry builds from ``(dim)``."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()

    def summarize(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> ChunkSummary:
        mask = _check_input(x, mask)
        return _softmax_pool(torch.zeros(mask.shape, dtype=x.dtype, device=x.device), x, mask)


class TemporalMaxPool(TemporalPooling):
    """Element-wise maximum of the valid frames; `dim` is unused (see :class:`TemporalAvgPool`)."""

    def __init__(self, dim: Optional[int] = None) -> None:
        super().__init__()

    def summarize(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> ChunkSummary:
        mask = _check_input(x, mask)
        count = mask.sum(dim=1).to(x.dtype)
        return ChunkSummary(_masked_max(x, mask), torch.log(count))

    @staticmethod
    def merge(summaries: Sequence[ChunkSummary]) -> torch.Tensor:
        """Maximum over the chunks that have a valid frame (max is associative)."""
        values, masses = _stack(summaries)
        return _masked_max(values, torch.isfinite(masses))

    @staticmethod
    def merge_grouped(chunks: ChunkSummary, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
        """Maximum over each tracklet's valid chunks (see :meth:`TemporalPooling.merge_grouped`)."""
        valid = torch.isfinite(chunks.log_mass).unsqueeze(1)
        value = chunks.value.masked_fill(~valid, float("-inf"))
        out = torch.full((num_groups, value.shape[1]), float("-inf"), dtype=value.dtype, device=groups.device)
        out = out.scatter_reduce(0, groups.unsqueeze(1).expand_as(value), value, "amax")
        return torch.where(torch.isfinite(out), out, torch.zeros_like(out))


class TemporalAttention(TemporalPooling):
    """Learned frame-quality weights: ``s_t = w . x_t``, softmax over valid frames, weighted sum
    (Gao & Nevatia 2018, Sec. 3.2, temporal attention with softmax normalisation).

    Args:
        dim: the frame feature size D.

    The scoring layer starts at zero, so an untrained module is exactly ``avg`` (the paper's
    strong baseline) and training moves away from it only as far as the loss asks. It has no
    bias: softmax is unchanged by adding one constant to every score.
    """

    def __init__(self, dim: int) -> None:
        super().__init__()
        if not isinstance(dim, int) or isinstance(dim, bool) or dim < 1:
            raise ValueError(f"temporal attention needs the feature size dim >= 1, got {dim!r}.")
        self.score = nn.Linear(dim, 1, bias=False)
        nn.init.zeros_(self.score.weight)

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """Frame scores ``[B, T]`` (before the softmax) of frame features ``[B, T, D]``."""
        return self.score(x).squeeze(-1)

    def weights(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Attention weights ``[B, T]``: sum to 1 over each row's valid frames, 0 on masked ones."""
        mask = _check_input(x, mask)
        return _masked_softmax(self.scores(x.masked_fill(~mask.unsqueeze(-1), 0.0)), mask)[0]

    def summarize(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> ChunkSummary:
        mask = _check_input(x, mask)
        # Score zeroed pads: an inf/NaN pad would otherwise reach the scores' gradient.
        return _softmax_pool(self.scores(x.masked_fill(~mask.unsqueeze(-1), 0.0)), x, mask)


TEMPORAL_REGISTRY.register("avg")(TemporalAvgPool)
TEMPORAL_REGISTRY.register("max")(TemporalMaxPool)
TEMPORAL_REGISTRY.register("attention")(TemporalAttention)

TEMPORAL_POOLINGS = tuple(TEMPORAL_REGISTRY.names())


def build_temporal(name: str, dim: int) -> TemporalPooling:
    """Return the temporal pooling `name` for `dim`-sized frame features; an unknown name raises
    an :class:`~reid.utils.registry.UnknownNameError` listing :data:`TEMPORAL_POOLINGS`."""
    return TEMPORAL_REGISTRY.get(name)(dim)


def pool_chunks(summaries: Sequence[ChunkSummary], method: str) -> torch.Tensor:
    """Merge the :class:`ChunkSummary` of each chunk of a tracklet (from the same module's
    ``summarize``) into ``[B, D]``: equal to pooling all frames at once with `method`."""
    return TEMPORAL_REGISTRY.get(method).merge(summaries)


def pool_grouped(chunks: ChunkSummary, groups: torch.Tensor, num_groups: int, method: str) -> torch.Tensor:
    """Merge chunks of many tracklets at once (``chunks.value [K, D]``, chunk ``k`` of tracklet
    ``groups[k]``) into ``[num_groups, D]``: for each tracklet, what :func:`pool_chunks` of its chunks gives."""
    return TEMPORAL_REGISTRY.get(method).merge_grouped(chunks, groups, num_groups)


__all__ = ["TEMPORAL_REGISTRY", "TEMPORAL_POOLINGS", "ChunkSummary", "TemporalPooling", "TemporalAvgPool",
           "TemporalMaxPool", "TemporalAttention", "build_temporal", "pool_chunks", "pool_grouped"]
