"""The cluster memory of learning without labels (Cluster Contrast: Dai et al., ACCV 2022).

One unit-length vector c_k per pseudo-identity (cluster) k. For a batch feature q (L2
normalised) with pseudo-label y, the logits are q . c_k / tau, so the identity loss's softmax
cross-entropy is the paper's ClusterNCE loss (Sec. 3, "cluster-level" contrastive loss):

    L_q = -log( exp(q . c_y / tau) / sum_k exp(q . c_k / tau) )

The memory is not learned by gradients: it starts at the normalised mean feature of every
cluster (:meth:`ClusterMemory.reset`, each epoch after clustering) and follows the network with
a momentum update after every step (:meth:`ClusterMemory.update`; the paper's momentum update):

    c_k <- normalise(m c_k + (1 - m) q_k)

where q_k is, per cluster k in the batch, the mean of its batch features ("mean"), or the one
least similar to c_k ("hard", the paper's hardest-instance variant). With m = 0 the memory is
the latest batch's features. The update uses the features of the step's forward pass (taken
before the optimizer step), as the published code does inside its backward pass.

Its vectors are a non-persistent buffer: they are not model weights (a checkpoint's ``model``
keeps no memory and loads into any model); the training hook carries them across a resume.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from reid.modeling.heads.base import batch_cosine_stats, check_head_inputs

UPDATE_MODES = ("mean", "hard")


class ClusterMemory(nn.Module):
    """Memory head: ``memory(features, targets)`` -> logits ``[B, C]`` = cos(q, c_k) / temperature.

    Args:
        in_features: feature width D.
        temperature: tau of the contrastive loss (Cluster Contrast: 0.05).
        momentum: m of the update (Cluster Contrast: 0.1; the memory mostly follows new features).
        update: "mean" or "hard" (see the module docstring).
    """

    def __init__(self, in_features: int, temperature: float = 0.05, momentum: float = 0.1,
                 update: str = "mean") -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"The cluster memory's temperature must be > 0, got {temperature}.")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"The cluster memory's momentum must lie in [0, 1), got {momentum}.")
        if update not in UPDATE_MODES:
            raise ValueError(f"Unknown cluster memory update {update!r}; valid: {', '.join(UPDATE_MODES)}.")
        self.in_features, self.temperature, self.momentum, self.mode = int(in_features), float(temperature), \
            float(momentum), update
        self.register_buffer("weight", torch.zeros(0, self.in_features), persistent=False)
        self.last_stats: Dict[str, Tensor] = {}
        self._pending: Optional[Tuple[Tensor, Tensor]] = None

    @property
    def num_classes(self) -> int:
        """Clusters in the memory."""
        return int(self.weight.shape[0])

    def assign(self, labels: np.ndarray, cameras: Optional[np.ndarray] = None) -> np.ndarray:
        """The label every image trains with for this epoch's cluster `labels`: the cluster itself
        (a camera-aware memory returns camera proxies instead)."""
        return np.asarray(labels, np.int64)

    @torch.no_grad()
    def reset(self, centroids: Tensor) -> None:
        """Start the memory at `centroids` ``[C, D]`` (normalised here); drops a pending update."""
        if centroids.dim() != 2 or centroids.shape[1] != self.in_features or centroids.shape[0] == 0:
            raise ValueError(f"Cluster memory: centroids must be [C >= 1, {self.in_features}], "
                             f"got {tuple(centroids.shape)}.")
        self.weight = F.normalize(centroids.detach().to(self.weight.device, torch.float32), dim=1)
        self._pending = None

    @torch.no_grad()
    def load_vectors(self, vectors: Tensor) -> None:
        """Put back vectors saved from :attr:`weight` as they are (a resume: no renormalising)."""
        if vectors.dim() != 2 or vectors.shape[1] != self.in_features:
            raise ValueError(f"Cluster memory: saved vectors must be [C, {self.in_features}], got {tuple(vectors.shape)}.")
        self.weight = vectors.detach().to(self.weight.device, torch.float32).clone()
        self._pending = None

    def forward(self, features: Tensor, targets: Optional[Tensor] = None) -> Tensor:
        check_head_inputs(features, targets, self.in_features, self.num_classes)
        if self.num_classes == 0:
            raise RuntimeError("The cluster memory is empty: reset() it with the cluster centroids first.")
        q = F.normalize(features.float(), dim=1)
        cos = q @ self.weight.t()
        if targets is not None:
            self.last_stats = batch_cosine_stats(cos, F.one_hot(targets, self.num_classes).bool())
            if self.training:
                self._pending = (q.detach(), targets.detach())
        return cos / self.temperature

    @torch.no_grad()
    def update(self) -> None:
        """Apply the momentum update with the last training forward's features (once)."""
        if self._pending is None:
            return
        q, y = self._pending
        self._pending = None
        c = self.weight
        if self.mode == "mean":
            sums = torch.zeros_like(c).index_add_(0, y, q)
            counts = torch.zeros(c.shape[0], device=c.device).index_add_(0, y, torch.ones_like(y, dtype=c.dtype))
            seen = counts > 0
            new = sums[seen] / counts[seen, None]
            classes = torch.nonzero(seen).flatten()
        else:
            # Per cluster, the batch feature least similar to its memory vector.
            sim = (q * c[y]).sum(dim=1)
            lowest = torch.full((c.shape[0],), float("inf"), device=c.device).scatter_reduce(0, y, sim, "amin")
            pick = torch.nonzero(sim == lowest[y]).flatten()
            # Ties: the first such feature of each cluster.
            first = torch.full((c.shape[0],), q.shape[0], device=c.device, dtype=torch.long)
            first = first.scatter_reduce(0, y[pick], pick, "amin")
            classes = torch.nonzero(first < q.shape[0]).flatten()
            new = q[first[classes]]
        c[classes] = F.normalize(self.momentum * c[classes] + (1.0 - self.momentum) * new, dim=1)


__all__ = ["ClusterMemory", "UPDATE_MODES"]
