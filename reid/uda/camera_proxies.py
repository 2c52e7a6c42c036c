"""Camera-aware proxies: the cluster memory split by camera (CAP, Wang et al., AAAI 2021).

Images of one camera share its light, background and viewpoint, so a plain cluster memory
(:mod:`reid.uda.cluster_memory`) pulls every image towards a centroid dominated by
the camera its cluster mostly comes from, and the features keep grouping by camera. CAP splits
each cluster i into one proxy per camera c that holds some of its images (proxy (i, c): their
normalised mean, then a momentum update as in the cluster memory) and trains with two terms.
With q a batch feature (L2 normalised) of cluster i seen by camera c, p its proxy, tau the
temperature and s(x) = exp(q . x / tau):

* intra-camera (CAP's intra-camera contrastive loss): a softmax over the proxies of camera c
  only, so that within a camera the person is told from the others without the camera
  mattering at all:

      L_intra(q) = -log( s(p) / sum_{x in proxies of camera c} s(x) ),

  averaged over the batch images of each camera and summed over the cameras of the batch (the
  paper's sum over cameras of per-camera means);
* inter-camera (CAP's inter-camera contrastive loss): every proxy of cluster i, in any camera,
  is a positive; the negatives are the H proxies of other clusters most similar to q (the
  hardest; H = UDA.CAMERA_HARD_NEGATIVES, CAP: 50):

      L_inter(q) = -1/|P_i| sum_{x in P_i} log( s(x) / (sum_{y in P_i} s(y) + sum_{y in N_q} s(y)) ),

  averaged over the batch;
* L = L_intra + lambda L_inter (lambda = UDA.CAMERA_INTER_WEIGHT, CAP: 0.5).

The proxy of every training image is its training label: :meth:`CameraProxyMemory.assign`
turns the epoch's cluster labels and the images' cameras into proxy labels (and remembers each
proxy's cluster and camera), so the P x K sampler draws P proxies of K images (CAP's
proxy-balanced sampling) and the loss needs no camera ids at training time.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from .cluster_memory import ClusterMemory


def proxy_labels(labels: np.ndarray, cameras: np.ndarray):
    """``(proxy of every image, cluster of every proxy, camera of every proxy)``: one proxy per
    (cluster, camera) pair that holds images, numbered in (cluster, camera) order; outliers
    (label -1) get proxy -1."""
    labels, cameras = np.asarray(labels, np.int64), np.asarray(cameras, np.int64)
    if labels.shape != cameras.shape:
        raise ValueError(f"labels and cameras must have the same shape, got {labels.shape} and {cameras.shape}.")
    inside = labels >= 0
    pairs, inverse = np.unique(np.stack([labels[inside], cameras[inside]], 1), axis=0, return_inverse=True)
    proxies = np.full(labels.shape, -1, np.int64)
    proxies[inside] = inverse.reshape(-1)
    return proxies, pairs[:, 0].copy(), pairs[:, 1].copy()


class CameraProxyMemory(ClusterMemory):
    """A :class:`ClusterMemory` whose classes are camera proxies, with CAP's loss (:meth:`loss`).

    Args:
        in_features, temperature, momentum, update: as :class:`ClusterMemory`.
        inter_weight: lambda of the inter-camera term.
        hard_negatives: H, the negatives of the inter-camera term.
    """

    def __init__(self, in_features: int, temperature: float = 0.05, momentum: float = 0.1, update: str = "mean",
                 inter_weight: float = 0.5, hard_negatives: int = 50) -> None:
        super().__init__(in_features, temperature, momentum, update)
        if not 0 <= inter_weight < float("inf"):
            raise ValueError(f"The inter-camera weight (UDA.CAMERA_INTER_WEIGHT) must be a finite number >= 0 (CAP: "
                             f"0.5), got {inter_weight}.")
        if int(hard_negatives) < 1:
            raise ValueError(f"UDA.CAMERA_HARD_NEGATIVES must be >= 1, got {hard_negatives}.")
        self.inter_weight, self.hard_negatives = float(inter_weight), int(hard_negatives)
        self.register_buffer("proxy_cluster", torch.zeros(0, dtype=torch.long), persistent=False)
        self.register_buffer("proxy_camera", torch.zeros(0, dtype=torch.long), persistent=False)

    def assign(self, labels: np.ndarray, cameras: Optional[np.ndarray]) -> np.ndarray:
        """The proxy label of every image for this epoch's cluster `labels` and the images'
        `cameras`; remembers each proxy's cluster and camera for the loss."""
        if cameras is None:
            raise ValueError("Camera-aware proxies need the camera id of every training image.")
        proxies, cluster, camera = proxy_labels(labels, cameras)
        device = self.weight.device
        self.proxy_cluster = torch.from_numpy(cluster).to(device)
        self.proxy_camera = torch.from_numpy(camera).to(device)
        return proxies

    def loss(self, features: Tensor, targets: Tensor) -> Tensor:
        """L_intra + lambda L_inter of the module docstring for features ``[B, D]`` and their proxy
        labels ``[B]``; records the step's features for the momentum update like ``forward``."""
        if self.proxy_cluster.numel() != self.num_classes:
            raise RuntimeError(f"The camera proxy memory holds {self.num_classes} vectors but {self.proxy_cluster.numel()} "
                               "proxies were assigned: call assign() and then reset() with the proxy centroids.")
        logits = self(features, targets)  # q . x / tau for every proxy x
        cam = self.proxy_camera[targets]  # [B]
        same_cam = self.proxy_camera[None, :] == cam[:, None]
        intra = F.cross_entropy(logits.masked_fill(~same_cam, float("-inf")), targets, reduction="none")
        # per-camera means, summed over the cameras in the batch
        cams, which = torch.unique(cam, return_inverse=True)
        sums = torch.zeros(len(cams), device=intra.device, dtype=intra.dtype).index_add_(0, which, intra)
        counts = torch.bincount(which, minlength=len(cams)).to(intra.dtype)
        l_intra = (sums / counts).sum()
        positive = self.proxy_cluster[None, :] == self.proxy_cluster[targets][:, None]
        negatives = logits.masked_fill(positive, float("-inf"))
        h = min(self.hard_negatives, self.num_classes)
        hard = negatives.topk(h, dim=1).values  # -inf where fewer negatives exist: they add exp(-inf) = 0
        log_z = torch.logsumexp(torch.cat([logits.masked_fill(~positive, float("-inf")), hard], dim=1), dim=1)
        pos_logits = logits.masked_fill(~positive, 0.0).sum(dim=1) / positive.sum(dim=1)
        l_inter = (log_z - pos_logits).mean()
        return l_intra + self.inter_weight * l_inter


__all__ = ["CameraProxyMemory", "proxy_labels"]
