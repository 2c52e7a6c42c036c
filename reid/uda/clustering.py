"""Pseudo-identities for unlabelled images: DBSCAN on the sparse k-reciprocal Jaccard distance.

SpCL (Ge et al., NeurIPS 2020) and Cluster Contrast (Dai et al., ACCV 2022) cluster the
training images before every epoch: DBSCAN (Ester et al., KDD 1996) with radius eps on the
Jaccard distance of their k-reciprocal encodings. Images in no cluster (DBSCAN's noise) are
left out of that epoch. The distance comes from :func:`reid.evaluation.jaccard.jaccard_graph`,
which holds exactly the pairs within eps, so the clusters equal those of DBSCAN on the dense
N x N matrix at a fraction of its memory.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Optional, Tuple

import numpy as np
import scipy.sparse as sp
import torch

from reid.evaluation.jaccard import jaccard_graph
from reid.evaluation.neighbours import NeighbourSearch, neighbour_search

from .auto_eps import EpsChoice, check_eps_range, choose_eps, eps_grid
from .tracklet_split import TrackletSplit, split_tracklets


@dataclass(frozen=True)
class ClusterSettings:
    """UDA.K1, K2, EPS, MIN_SAMPLES, the base distance (TEST.METRIC), how the nearest
    neighbours are found (UDA.NEIGHBOURS, APPROX_MIN_SIZE, CAMERA_NEIGHBOURS) and, for
    UDA.EPS auto (`auto_eps`), the radii tried (EPS_RANGE; `eps` is then the range's end)."""

    k1: int = 30
    k2: int = 6
    eps: float = 0.6
    min_samples: int = 4
    metric: str = "cosine"
    neighbours: NeighbourSearch = field(default_factory=NeighbourSearch)
    auto_eps: bool = False
    eps_range: Tuple[float, float] = (0.3, 0.8)
    camera_neighbours: bool = False
    tracklet_split: float = 0.0

    @classmethod
    def from_cfg(cls, cfg) -> "ClusterSettings":
        u = cfg.UDA
        auto = isinstance(u.EPS, str)
        if auto and u.EPS != "auto":
            raise ValueError(f"UDA.EPS must be a number in (0, 1) or 'auto', got {u.EPS!r}.")
        eps_range = check_eps_range(list(u.EPS_RANGE)) if auto else (0.3, 0.8)  # read only when used
        settings = cls(int(u.K1), int(u.K2), eps_range[1] if auto else float(u.EPS), int(u.MIN_SAMPLES),
                       str(cfg.TEST.METRIC), neighbour_search(u, "UDA"), auto, eps_range,
                       u.CAMERA_NEIGHBOURS is True,  # "auto": decided on the data (reid.uda.build.camera_options)
                       float(u.TRACKLET_SPLIT))
        if not 0.0 < settings.eps < 1.0:
            raise ValueError(f"UDA.EPS must lie in (0, 1) (a Jaccard distance; 0.5-0.7 usually) or be 'auto', "
                             f"got {u.EPS}.")
        if settings.camera_neighbours and str(u.NEIGHBOURS).lower() == "ivf":
            raise ValueError("UDA.CAMERA_NEIGHBOURS finds its camera-balanced lists with the exact pass, so "
                             "UDA.NEIGHBOURS ivf (approximate) would not be used: set UDA.NEIGHBOURS auto or exact, "
                             "or UDA.CAMERA_NEIGHBOURS false.")
        if settings.min_samples < 1:
            raise ValueError(f"UDA.MIN_SAMPLES must be >= 1, got {u.MIN_SAMPLES}.")
        if settings.k1 < 1 or settings.k2 < 1:
            raise ValueError(f"UDA.K1 and UDA.K2 must be >= 1, got {u.K1} and {u.K2}.")
        return settings


@dataclass
class Clusters:
    """One clustering: ``labels`` int64 ``[N]`` (0..num_clusters-1, -1 = outlier), the seconds of
    each stage (neighbours and Jaccard graph, radius choice, tracklet cuts, the final DBSCAN), the
    radius used, with UDA.EPS auto how it was chosen, and with tracklets how many were cut."""

    labels: np.ndarray
    num_clusters: int
    seconds_distance: float
    seconds_dbscan: float
    eps: float
    eps_choice: Optional[EpsChoice] = None
    seconds_radius: float = 0.0
    seconds_split: float = 0.0
    split: Optional[TrackletSplit] = None

    @property
    def kept(self) -> int:
        """Images in a cluster."""
        return int((self.labels >= 0).sum())


def dbscan(graph: sp.csr_matrix, eps: float, min_samples: int) -> np.ndarray:
    """scikit-learn's DBSCAN on a precomputed sparse distance graph (absent pairs: not
    neighbours); labels int64, -1 for noise."""
    try:
        from sklearn.cluster import DBSCAN
        from sklearn.neighbors import sort_graph_by_row_values
    except ImportError as e:  # a dependency of the package; only a broken install lacks it
        raise ImportError("Learning without labels clusters with scikit-learn's DBSCAN, which is not installed: "
                          "pip install scikit-learn (or reinstall circle-reid, which requires it).") from e
    graph = sort_graph_by_row_values(graph.copy(), copy=False, warn_when_not_sorted=False)
    return DBSCAN(eps=eps, min_samples=min_samples, metric="precomputed").fit_predict(graph).astype(np.int64)


def tracklet_majority(labels: np.ndarray, tracklets: np.ndarray) -> np.ndarray:
    """`labels` with every tracklet in one cluster: the cluster most of its crops fell in (ties: the
    lower label); a tracklet whose crops are all outliers stays outliers. Clusters left empty are
    dropped and the rest renumbered 0..C-1 in order.

    A tracker's tracklet is one person far more reliably than a radius in feature space says, so
    its crops should never train as different pseudo-identities (nor a few as outliers).
    """
    labels, tracklets = np.asarray(labels, np.int64), np.asarray(tracklets, np.int64)
    inside = labels >= 0
    if not inside.any():
        return labels.copy()
    # votes per (tracklet, cluster) pair, sorted per tracklet by most votes, then lowest label
    pairs, counts = np.unique(np.stack([tracklets[inside], labels[inside]], 1), axis=0, return_counts=True)
    pairs = pairs[np.lexsort((pairs[:, 1], -counts, pairs[:, 0]))]
    first = np.r_[True, pairs[1:, 0] != pairs[:-1, 0]]
    winner = np.full(int(tracklets.max()) + 1, -1, np.int64)
    winner[pairs[first, 0]] = pairs[first, 1]
    voted = winner[tracklets]
    used = np.unique(voted[voted >= 0])
    renumber = np.full(int(labels.max()) + 1, -1, np.int64)
    renumber[used] = np.arange(len(used))
    return np.where(voted >= 0, renumber[np.maximum(voted, 0)], -1)


def cluster_features(feats: torch.Tensor, settings: ClusterSettings, tracklets: Optional[np.ndarray] = None,
                     cameras: Optional[np.ndarray] = None, positions: Optional[np.ndarray] = None) -> Clusters:
    """Cluster features ``[N, D]`` into pseudo-identities (see the module docstring); with `tracklets`
    (int ``[N]``, the tracklet of each image) each tracklet ends up in one cluster (:func:`tracklet_majority`),
    after cutting those whose crops disagree when ``settings.tracklet_split`` > 0 (reid.uda.tracklet_split;
    `positions` orders a tracklet's crops in time, None = their order here). `cameras` (int ``[N]``) are
    needed with ``settings.camera_neighbours`` (camera-balanced lists)."""
    if settings.camera_neighbours and cameras is None:
        raise ValueError("UDA.CAMERA_NEIGHBOURS needs the camera id of every image; none were given.")
    t0 = time.perf_counter()
    graph = jaccard_graph(feats, settings.k1, settings.k2, settings.eps, settings.metric,
                          neighbours=settings.neighbours, cameras=cameras if settings.camera_neighbours else None)
    t1 = time.perf_counter()
    split = None
    if tracklets is not None:
        split = split_tracklets(feats, tracklets, positions, settings.tracklet_split)
        tracklets = split.tracklets

    def labels_at(g: sp.csr_matrix, eps: float, min_samples: int) -> np.ndarray:
        labels = dbscan(g, eps, min_samples)
        return tracklet_majority(labels, tracklets) if tracklets is not None else labels

    t2 = time.perf_counter()
    # the chooser judges each radius by the labels the epoch would train on (tracklets kept whole)
    choice = choose_eps(graph, settings.min_samples, eps_grid(*settings.eps_range), labels_at) if settings.auto_eps else None
    t3 = time.perf_counter()
    eps = choice.eps if choice is not None else settings.eps
    labels = labels_at(graph, eps, settings.min_samples)
    t4 = time.perf_counter()
    return Clusters(labels, int(labels.max()) + 1 if labels.size else 0, t1 - t0, t4 - t3, eps, choice,
                    seconds_radius=t3 - t2, seconds_split=t2 - t1, split=split)


def cluster_centroids(feats: torch.Tensor, labels: np.ndarray, num_clusters: int) -> torch.Tensor:
    """Mean feature of every cluster, ``[num_clusters, D]`` (outliers ignored)."""
    keep = torch.from_numpy(np.flatnonzero(labels >= 0))
    y = torch.from_numpy(labels)[keep]
    sums = torch.zeros(num_clusters, feats.shape[1], dtype=torch.float64).index_add_(0, y, feats[keep].double())
    counts = torch.bincount(y, minlength=num_clusters).clamp_min(1)
    return (sums / counts[:, None]).float()


__all__ = ["ClusterSettings", "Clusters", "cluster_centroids", "cluster_features", "dbscan", "tracklet_majority"]
