"""Turn head outputs and features into the weighted loss dict of ``MODEL.LOSSES``.

Written once and shared by every meta architecture: a model hands over its identity
heads with the features each one classifies, and the features the pair-wise losses see
("before" / "after" the neck); this module applies ``MODEL.LOSSES.NAMES`` and the weights.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Dict, Mapping, Sequence, Tuple

import torch
from torch import nn

from .losses import METRICS, cross_entropy_loss, pairwise_circle_loss, triplet_loss

LOSS_NAMES: Tuple[str, ...] = ("identity", "triplet", "pair_circle")
FEAT_CHOICES: Tuple[str, ...] = ("before", "after")


def check_feat(key: str, value: str) -> str:
    """`value` (lower-cased) checked to be "before" or "after"; a ValueError naming config `key`."""
    value = str(value).lower()
    if value not in FEAT_CHOICES:
        raise ValueError(f"{key} must be one of {', '.join(FEAT_CHOICES)}, got {value!r}.")
    return value


@dataclass(frozen=True)
class LossAssembly:
    """The configured losses and their weights; call it to get ``{"loss_*": tensor}``.

    Build it with :meth:`from_cfg`. Loss keys: ``loss_id`` (identity head cross entropy),
    ``loss_triplet``, ``loss_pair_circle``; each is already multiplied by its weight.
    """

    names: Tuple[str, ...]
    id_weight: float = 1.0
    label_smooth: float = 0.0
    triplet_weight: float = 1.0
    triplet_margin: float = 0.3
    triplet_soft_margin: bool = False
    triplet_metric: str = "euclidean"
    triplet_feat: str = "before"
    pair_circle_weight: float = 1.0
    pair_circle_gamma: float = 80.0
    pair_circle_margin: float = 0.4
    pair_circle_feat: str = "after"

    @classmethod
    def from_cfg(cls, cfg) -> "LossAssembly":
        """Read and validate ``cfg.MODEL.LOSSES``; unknown names raise a ValueError."""
        losses = cfg.MODEL.LOSSES
        names = []
        for raw in losses.NAMES:
            name = str(raw).lower()
            if name not in LOSS_NAMES:
                raise ValueError(
                    f"Unknown loss {raw!r} in MODEL.LOSSES.NAMES. Valid names: {', '.join(LOSS_NAMES)}."
                )
            if name not in names:  # listing a loss twice must not double its weight
                names.append(name)
        if not names:
            raise ValueError(
                f"MODEL.LOSSES.NAMES is empty; list at least one of {', '.join(LOSS_NAMES)}."
            )
        # Checked here so a typo fails when the model is built, not after data loading.
        metric = str(losses.TRIPLET.METRIC).lower()
        if metric not in METRICS:
            raise ValueError(
                f"MODEL.LOSSES.TRIPLET.METRIC must be one of {', '.join(METRICS)}, got {metric!r}."
            )
        return cls(
            names=tuple(names),
            id_weight=float(losses.ID.WEIGHT),
            label_smooth=float(losses.ID.LABEL_SMOOTH),
            triplet_weight=float(losses.TRIPLET.WEIGHT),
            triplet_margin=float(losses.TRIPLET.MARGIN),
            triplet_soft_margin=bool(losses.TRIPLET.SOFT_MARGIN),
            triplet_metric=metric,
            triplet_feat=check_feat("MODEL.LOSSES.TRIPLET.FEAT", losses.TRIPLET.FEAT),
            pair_circle_weight=float(losses.PAIR_CIRCLE.WEIGHT),
            pair_circle_gamma=float(losses.PAIR_CIRCLE.GAMMA),
            pair_circle_margin=float(losses.PAIR_CIRCLE.MARGIN),
            pair_circle_feat=check_feat("MODEL.LOSSES.PAIR_CIRCLE.FEAT", losses.PAIR_CIRCLE.FEAT),
        )

    @property
    def uses_after_features(self) -> bool:
        """Whether any loss sees the features after the neck (else the neck gets no gradient)."""
        return (
            self.uses_identity
            or ("triplet" in self.names and self.triplet_feat == "after")
            or ("pair_circle" in self.names and self.pair_circle_feat == "after")
        )

    @property
    def uses_identity(self) -> bool:
        """Whether an identity head is needed for training."""
        return "identity" in self.names

    def _identity_term(self, head: nn.Module, feat: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # A head whose loss is not a softmax cross-entropy over its logits (the camera-aware
        # proxy memory of learning without labels) brings its own.
        own = getattr(head, "loss", None)
        if callable(own):
            return own(feat, targets)
        return cross_entropy_loss(head(feat, targets), targets, label_smooth=self.label_smooth)

    def __call__(
        self,
        targets: torch.Tensor,
        heads: Sequence[nn.Module],
        id_features: Sequence[torch.Tensor],
        pair_features: Mapping[str, Sequence[torch.Tensor]],
    ) -> Tuple[Dict[str, torch.Tensor], Dict[str, torch.Tensor]]:
        """Compute the weighted losses.

        Args:
            targets: int64 labels ``[B]``.
            heads: identity heads; ``heads[i]`` classifies ``id_features[i]``. Several heads
                (MGN per-branch layout) are averaged, so the weight means the same thing
                whatever their number.
            id_features: the features the heads see, one per head.
            pair_features: ``{"before": [...], "after": [...]}``: the features (one or more,
                averaged) the triplet / pair-wise Circle losses see, per ``*.FEAT``.

        Returns:
            ``(losses, stats)``: losses keyed ``loss_*``; stats ``{"s_p", "s_n"}`` (detached
            0-d tensors on the features' device, mean positive / negative cosine of the first
            head; empty without a head). They stay tensors so that logging them needs no
            device-to-host copy in the middle of a GPU step.
        """
        losses: Dict[str, torch.Tensor] = {}
        stats: Dict[str, torch.Tensor] = {}
        if self.uses_identity:
            if not heads:
                raise RuntimeError(
                    "MODEL.LOSSES.NAMES includes 'identity' but the model has no identity head: "
                    "it was built with MODEL.HEADS.NUM_CLASSES=0 (inference only). Set "
                    "MODEL.HEADS.NUM_CLASSES to the number of training identities before "
                    "build_model (the trainer does this from the data), or drop 'identity'."
                )
            if len(heads) != len(id_features):
                raise ValueError(f"{len(heads)} heads but {len(id_features)} identity features.")
            terms = [self._identity_term(head, feat, targets) for head, feat in zip(heads, id_features)]
            losses["loss_id"] = self.id_weight * torch.stack(terms).mean()
            head_stats = getattr(heads[0], "last_stats", None) or {}
            stats = {k: v.detach().float().reshape(()) for k, v in head_stats.items() if k in ("s_p", "s_n")}
        pair_losses = (
            ("triplet", self.triplet_weight, self.triplet_feat, partial(
                triplet_loss, margin=self.triplet_margin, soft_margin=self.triplet_soft_margin,
                metric=self.triplet_metric)),
            ("pair_circle", self.pair_circle_weight, self.pair_circle_feat, partial(
                pairwise_circle_loss, gamma=self.pair_circle_gamma, margin=self.pair_circle_margin)),
        )
        for name, weight, feat, loss in pair_losses:
            if name in self.names:
                terms = [loss(f, targets) for f in pair_features[feat]]
                losses[f"loss_{name}"] = weight * torch.stack(terms).mean()
        return losses, stats


__all__ = ["FEAT_CHOICES", "LOSS_NAMES", "LossAssembly", "check_feat"]
