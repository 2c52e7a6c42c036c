"""Learning without labels: pseudo-identities by clustering, a cluster memory, hooks on the trainer.

- clustering.py: DBSCAN on the sparse k-reciprocal Jaccard distance (reid.evaluation.jaccard);
- hooks.py: ClusterEachEpoch (features -> clusters -> sampler + memory) and MemoryUpdate;
- scores.py: purity of the pseudo-labels (ARI, pairwise precision/recall) when ground truth exists;
- cluster_memory.py, camera_proxies.py: the memories that take the identity head's place (a centroid
  per cluster; a proxy per cluster and camera, with CAP's intra- and inter-camera losses);
- build.py: build_uda_training(cfg, data, model) -> (train loader, hooks), used by tools/train.py.

This layer sits above evaluation (it extracts features and computes the Jaccard distance) and
below the programs; the engine runs its hooks like any other.
"""
from .build import build_uda_training, check_uda_settings, set_identity_head
from .clustering import ClusterSettings, Clusters, cluster_centroids, cluster_features, dbscan
from .hooks import ClusterEachEpoch, MemoryUpdate, NoClustersError
from .scores import pseudo_label_scores

__all__ = [
    "ClusterEachEpoch",
    "ClusterSettings",
    "Clusters",
    "MemoryUpdate",
    "NoClustersError",
    "build_uda_training",
    "check_uda_settings",
    "cluster_centroids",
    "cluster_features",
    "dbscan",
    "pseudo_label_scores",
    "set_identity_head",
]
