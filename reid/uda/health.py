"""Label-free health figures of each epoch's clustering, and warnings for its known failures.

Learning without labels has no ground truth to say that the pseudo-labels went wrong, and
the usual failures are silent: the loss keeps falling while the clusters group images by
camera, merge many people into one cluster, or the features collapse. Each of these leaves a
trace that needs no labels, so :func:`cluster_health` measures them every epoch (one flat,
JSON-ready dict for the ``metrics.jsonl`` record) and :func:`health_warnings` turns a history
of such records into one-line warnings that say what changed and which setting to change.

With N images, labels -1 (outlier) or a cluster, and K the images kept (in a cluster):

* sizes: images per cluster (min, median, 90th percentile by linear interpolation, max, mean)
  and ``largest_share`` = size_max / K;
* cameras: the share of clusters whose images come from more than one camera and the mean
  number of distinct cameras per cluster. One person usually walks past several cameras, so
  clusters that stay within one camera group by background and lighting, not by person;
* ``nmi_previous``: normalized mutual information (Strehl & Ghosh, JMLR 2002, with the
  arithmetic mean of the entropies: scikit-learn's ``normalized_mutual_info_score``) between
  last epoch's labels and this epoch's, over the images in a cluster in both epochs; 1 when
  both are one cluster. 1 means the same partition again (label values may differ); a sudden
  drop means the pseudo-identities were reshuffled;
* ``feature_spread`` = 1 - ||m||^2 for the unit features f_i with mean m. For unit vectors
  mean_i ||f_i - m||^2 = mean_i (1 - 2 f_i.m) + ||m||^2 = 1 - ||m||^2, and ||m||^2 =
  mean_ij cos(f_i, f_j) (i = j included): 1 for random directions in many dimensions, 0 when
  every feature is the same point (collapse);
* ``cluster_spread``: mean over kept images of 1 - cos(f_i, c) with c the centroid of f_i's
  cluster. With S_k the sum of cluster k's unit features, sum_{i in k} f_i.S_k/||S_k|| =
  ||S_k||, so it equals 1 - sum_k ||S_k|| / K: no per-image gather of centroids is needed.

Features are normalised again here, so unnormalised ones are measured by their directions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np
import torch
from sklearn.metrics import normalized_mutual_info_score

# Below this share of multi-camera clusters (with >= 2 cameras in the data) the clustering is
# grouping by camera: in a camera network most people are seen by several cameras (every
# Market-1501 identity by at least two), and healthy runs have most clusters span cameras. On
# the camera-view benchmark (docs/benchmarks.md) plain clustering, which lost accuracy, had
# 13-28% multi-camera clusters, and the runs with camera-balanced neighbours 68-98%.
SINGLE_CAMERA_SHARE = 0.5
# A cluster holding more than this share of the kept images, and GIANT_TO_MEDIAN times the
# median size, swallows people: DBSCAN chains neighbours through a too-large radius.
GIANT_SHARE = 0.25
GIANT_TO_MEDIAN = 8.0
# With fewer clusters the median says little and a small dataset may truly have one person
# photographed far more often than the others (3 people: no warning).
GIANT_MIN_CLUSTERS = 4
# Epoch-to-epoch steps in a row in which the clusters fell while their mean size rose: one or
# two such steps happen as features settle, a steady trend is the clusters merging.
MERGE_STEPS = 3
# The clusters must also fall by at least this fraction over those steps: a count jittering by a
# cluster or two (700, 699, 698, 697) is no trend, and adaptation that joins one person's
# per-camera clusters lowers the count too (the best camera-view benchmark run: 66 -> 58, 12%;
# the one that merged people: 65 -> 41, 37%; docs/benchmarks.md).
MERGE_MIN_DROP = 0.2
# More than this share of outliers: most images do not train this epoch.
MANY_OUTLIERS = 0.5
# Below this spread the mean cosine between two images is above 0.95: the features have all
# but lost their directions (trained re-id features sit far above; random ones near 1).
COLLAPSE_SPREAD = 0.05


def _check_shape(name: str, shape: tuple, labels: np.ndarray, ndim: int = 1) -> None:
    if len(shape) != ndim or shape[0] != labels.size:
        raise ValueError(f"{name} must hold one {'value' if ndim == 1 else 'row'} per image ({labels.size}), "
                         f"got shape {tuple(shape)}.")


def cluster_health(labels: np.ndarray, cameras: Optional[np.ndarray], feats: Optional[torch.Tensor] = None,
                   previous: Optional[np.ndarray] = None) -> Dict[str, float]:
    """Label-free figures of one clustering (see the module docstring for each formula).

    Args:
        labels: int ``[N]``, the cluster of each image (-1 = outlier).
        cameras: int ``[N]`` camera id of each image, or None when unknown.
        feats: ``[N, D]`` L2-normalised features (CPU), or None.
        previous: last epoch's labels ``[N]``, or None.

    Returns:
        A flat dict of python ints and floats (JSON-ready, never NaN); a key that does not apply
        is left out: ``outlier_share`` (absent only for N = 0); ``size_min``, ``size_median``,
        ``size_p90``, ``size_max``, ``size_mean``, ``largest_share`` (when there is a cluster);
        ``multi_camera_share``, ``cameras_per_cluster`` (cameras given, >= 2 distinct cameras
        among all images, and a cluster); ``nmi_previous`` (previous given, over the images in a
        cluster in both epochs, at least 2 of them: outliers are left out since they have no
        cluster to compare); ``feature_spread`` (feats given, N > 0) and ``cluster_spread``
        (feats given and a cluster).
    """
    labels = np.asarray(labels, dtype=np.int64)
    if labels.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {labels.shape}.")
    n = labels.size
    out: Dict[str, float] = {}
    if n == 0:
        return out
    kept = labels >= 0
    num_kept = int(kept.sum())
    out["outlier_share"] = float((n - num_kept) / n)
    # clusters numbered 0..C-1 whatever the label values (a caller may pass unrenumbered ones)
    _, cluster = np.unique(labels[kept], return_inverse=True)
    sizes = np.bincount(cluster)
    num_clusters = int(sizes.size)
    if num_clusters:
        out.update({
            "size_min": int(sizes.min()), "size_median": float(np.median(sizes)),
            "size_p90": float(np.percentile(sizes, 90)), "size_max": int(sizes.max()),
            "size_mean": float(num_kept / num_clusters), "largest_share": float(sizes.max() / num_kept),
        })

    if cameras is not None:
        cameras = np.asarray(cameras, dtype=np.int64)
        _check_shape("cameras", cameras.shape, labels)
        if num_clusters and np.unique(cameras).size >= 2:
            pairs = np.unique(np.stack([cluster, cameras[kept]]), axis=1)  # distinct (cluster, camera)
            per_cluster = np.bincount(pairs[0], minlength=num_clusters)
            out["multi_camera_share"] = float((per_cluster > 1).mean())
            out["cameras_per_cluster"] = float(per_cluster.mean())

    if previous is not None:
        previous = np.asarray(previous, dtype=np.int64)
        _check_shape("previous", previous.shape, labels)
        both = kept & (previous >= 0)
        if both.sum() >= 2:
            # rounding can put identical partitions a hair above 1
            out["nmi_previous"] = min(1.0, float(normalized_mutual_info_score(previous[both], labels[both])))

    if feats is not None:
        _check_shape("feats", tuple(feats.shape), labels, ndim=2)
        f = feats.detach().cpu().float()
        f = f / f.norm(dim=1, keepdim=True).clamp_min(1e-12)
        mean = f.sum(0, dtype=torch.float64) / n
        # ||m||^2 of unit vectors is at most 1; rounding must not make the spread negative
        out["feature_spread"] = float(max(0.0, 1.0 - float(mean.dot(mean))))
        if num_clusters:
            # outliers add into a dummy row C, so all N rows go in without copying the kept ones
            index = np.full(n, num_clusters, np.int64)
            index[kept] = cluster
            sums = torch.zeros(num_clusters + 1, f.shape[1], dtype=torch.float32)
            sums.index_add_(0, torch.from_numpy(index), f)
            along = float(sums[:num_clusters].double().norm(dim=1).sum())  # sum_k ||S_k||
            out["cluster_spread"] = float(min(1.0, max(0.0, 1.0 - along / num_kept)))
    return out


def _has(record: Mapping[str, Any], *keys: str) -> bool:
    return all(record.get(k) is not None for k in keys)


def _pct(share: float) -> str:
    return f"{100.0 * share:.0f}%"


@dataclass(frozen=True)
class RunOptions:
    """The options a run already uses, so that the advice names only what is left to change."""

    auto_eps: bool = False
    camera_aware: bool = False
    camera_neighbours: bool = False

    def eps_advice(self, direction: str, end: str) -> str:
        """How to move the radius `direction` ("Lower" or "Raise"); with UDA.EPS auto, which `end`
        ("first" or "last") of UDA.EPS_RANGE to move: the chooser already avoids radii whose own
        clusters warn, so a warning means the whole range is too high or too low."""
        if self.auto_eps:
            return f"{direction} UDA.EPS_RANGE's {end} radius, or set UDA.EPS to a number"
        return f"{direction} UDA.EPS (or set it to auto)"

    def camera_advice(self) -> str:
        """What to turn on against clusters that stay within one camera."""
        missing = [k for k, on in (("UDA.CAMERA_NEIGHBOURS", self.camera_neighbours),
                                   ("UDA.CAMERA_AWARE", self.camera_aware)) if not on]
        if not missing:
            return ("Both camera-aware options are on already: check that the camera ids are right, and lower "
                    "UDA.EPS or UDA.EPS_RANGE so fewer same-camera look-alikes chain together.")
        return (f"Set {' and '.join(f'{k} true' for k in missing)} (camera-balanced neighbours make clusters span "
                "cameras; camera-aware proxies stop the memory teaching the camera).")


def health_warnings(history: Sequence[Mapping[str, Any]], num_cameras: int,
                    options: RunOptions = RunOptions()) -> List[str]:
    """One-line warnings about the last record of `history` (one record per epoch, oldest first,
    each with ``clusters``, ``images``, ``images_kept`` and :func:`cluster_health`'s keys).

    Each warning says what it sees, with the numbers, and what to change: clusters within one
    camera (SINGLE_CAMERA_SHARE, when `num_cameras` >= 2), a giant cluster (GIANT_SHARE,
    GIANT_TO_MEDIAN, GIANT_MIN_CLUSTERS), clusters merging epoch after epoch (MERGE_STEPS,
    MERGE_MIN_DROP), most images outliers (MANY_OUTLIERS) and collapsed features
    (COLLAPSE_SPREAD). A rule whose keys are absent is skipped; a healthy history gives ``[]``.
    `options` (what the run already uses) shapes the advice.
    """
    if not history:
        return []
    last = history[-1]
    warnings: List[str] = []

    if num_cameras >= 2 and _has(last, "multi_camera_share", "clusters") \
            and last["multi_camera_share"] < SINGLE_CAMERA_SHARE:
        warnings.append(
            f"Only {_pct(last['multi_camera_share'])} of the {last['clusters']} clusters span more than one camera: "
            "the clusters group images by camera, not by person (the model learns the camera), unless most of your "
            f"people pass a single camera. {options.camera_advice()}")

    if _has(last, "largest_share", "size_max", "size_median", "clusters", "images_kept") \
            and last["clusters"] >= GIANT_MIN_CLUSTERS and last["largest_share"] > GIANT_SHARE \
            and last["size_max"] >= GIANT_TO_MEDIAN * last["size_median"]:
        warnings.append(
            f"The largest cluster holds {last['size_max']} of the {last['images_kept']} clustered images "
            f"({_pct(last['largest_share'])}), {last['size_max'] / last['size_median']:.0f} times the median cluster "
            f"size {last['size_median']:g}: it merges different people. {options.eps_advice('Lower', 'first')} or raise "
            "UDA.MIN_SAMPLES.")

    window = list(history[-(MERGE_STEPS + 1):])
    if len(window) == MERGE_STEPS + 1 and all(_has(r, "clusters", "size_mean") for r in window):
        counts = [r["clusters"] for r in window]
        means = [r["size_mean"] for r in window]
        falling = all(b < a for a, b in zip(counts, counts[1:]))
        growing = all(b > a for a, b in zip(means, means[1:]))
        if falling and growing and counts[-1] <= (1.0 - MERGE_MIN_DROP) * counts[0]:
            warnings.append(
                f"Clusters fell from {counts[0]} to {counts[-1]} over the last {MERGE_STEPS} epochs while their mean "
                f"size rose from {means[0]:.1f} to {means[-1]:.1f}: the pseudo-labels merge people more every epoch. "
                f"{options.eps_advice('Lower', 'last')} or raise UDA.MIN_SAMPLES, and compare the number of clusters with "
                "the number of people you expect.")

    if _has(last, "outlier_share") and last["outlier_share"] > MANY_OUTLIERS:
        left = (f" ({last['images'] - last['images_kept']} of {last['images']} left out of this epoch)"
                if _has(last, "images", "images_kept") else "")
        warnings.append(
            f"{_pct(last['outlier_share'])} of the images are outliers{left}: the clustering radius finds too few "
            f"dense groups, so most images do not train. {options.eps_advice('Raise', 'last')} or lower UDA.MIN_SAMPLES.")

    if _has(last, "feature_spread") and last["feature_spread"] < COLLAPSE_SPREAD:
        warnings.append(
            f"Feature spread is {last['feature_spread']:.3f} (mean cosine between two images "
            f"{1.0 - last['feature_spread']:.3f}): the features have collapsed towards one point, so the clusters "
            "say nothing about identity. Lower SOLVER.BASE_LR and check UDA.TEMPERATURE (0.05 is usual).")
    return warnings


def format_health(record: Mapping[str, Any]) -> str:
    """A short log fragment of the health keys present in `record`, e.g. ``sizes 2/6/31
    (min/median/max), 12% outliers, 64% of clusters multi-camera, NMI to last epoch 0.912, feature
    spread 0.41, cluster spread 0.12``; ``""`` when none is present."""
    parts: List[str] = []
    if _has(record, "size_min", "size_median", "size_max"):
        parts.append(f"sizes {record['size_min']}/{record['size_median']:g}/{record['size_max']} (min/median/max)")
    fragments = (("outlier_share", lambda v: f"{_pct(v)} outliers"),
                 ("multi_camera_share", lambda v: f"{_pct(v)} of clusters multi-camera"),
                 ("nmi_previous", lambda v: f"NMI to last epoch {v:.3f}"),
                 ("feature_spread", lambda v: f"feature spread {v:.2f}"),
                 ("cluster_spread", lambda v: f"cluster spread {v:.2f}"))
    parts += [show(record[key]) for key, show in fragments if _has(record, key)]
    return ", ".join(parts)


__all__ = ["COLLAPSE_SPREAD", "RunOptions", "GIANT_MIN_CLUSTERS", "GIANT_SHARE", "GIANT_TO_MEDIAN", "MANY_OUTLIERS",
           "MERGE_MIN_DROP", "MERGE_STEPS", "SINGLE_CAMERA_SHARE", "cluster_health", "format_health",
           "health_warnings"]
