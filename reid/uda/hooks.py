"""The clustering loop of learning without labels, as two hooks on the ordinary trainer.

* :class:`ClusterEachEpoch` (``before_epoch``): extract the features of every training image
  with the current weights, cluster them (:mod:`reid.uda.clustering`), drop the outliers,
  point the P x K sampler at the new pseudo-labels and restart the cluster memory at the
  cluster centroids (or a camera-aware memory at its camera proxies). One line and one
  ``metrics.jsonl`` record per epoch say what it found, with its health figures
  (reid.uda.health), and warnings when they show a known failure.
* :class:`MemoryUpdate` (``after_step``): the memory's momentum update with the step's features.

Exact resume: a checkpoint holds the epoch's pseudo-labels (ClusterEachEpoch) and the memory as
the last step left it (MemoryUpdate). A run resumed mid-epoch continues with both, without
clustering again; one resumed at an epoch's start clusters with the same weights the
uninterrupted run had, so it gets the same labels. Clustering draws no random numbers from the
training streams: their states are put back afterwards.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np
import torch
from torch import nn

from reid.engine import HookBase, ResumableError
from reid.utils.process import get_rng_state, set_rng_state

from .camera_proxies import CameraProxyMemory
from .cluster_memory import ClusterMemory
from .clustering import ClusterSettings, Clusters, cluster_centroids, cluster_features
from .health import RunOptions, cluster_health, format_health, health_warnings

logger = logging.getLogger(__name__)

#: ``extract(model) -> features [N, D]`` (L2-normalised, CPU) of the training images, in order.
ExtractFn = Callable[[nn.Module], torch.Tensor]


class NoClustersError(ResumableError):
    """Clustering left too few pseudo-identities to train on; the message says what to change."""


def check_clusters(clusters: Clusters, num_images: int, per_batch: int, settings: ClusterSettings) -> None:
    """Refuse an epoch that could not train: fewer clusters than one batch's P identities."""
    if clusters.num_clusters >= per_batch:
        return
    found = ("no cluster: every image is an outlier" if clusters.num_clusters == 0 else
             f"{clusters.num_clusters} cluster(s) ({clusters.kept} images)")
    merges = 2 * clusters.kept > num_images  # most images kept in a few clusters: the radius merges people
    move = RunOptions(auto_eps=settings.auto_eps).eps_advice(*(("Lower", "first") if merges else ("Raise", "last")))
    why = "the radius merges different people" if merges else "most images are outliers at this radius"
    advice = f"{move} or {'raise' if merges else 'lower'} UDA.MIN_SAMPLES ({why}; 0.5-0.7 is usual)"
    at = f"auto ({clusters.eps:g})" if settings.auto_eps else f"{settings.eps:g}"
    raise NoClustersError(
        f"Clustering {num_images} images found {found} at UDA.EPS {at} and UDA.MIN_SAMPLES "
        f"{settings.min_samples}, but a batch needs {per_batch} pseudo-identities (SOLVER.IMS_PER_BATCH / "
        f"DATALOADER.NUM_INSTANCE). {advice}, or use smaller batches; a model that has not learned these images "
        "yet (e.g. random weights) also finds few clusters."
    )


class ClusterEachEpoch(HookBase):
    """Before each epoch: features -> clusters -> pseudo-labels for the sampler and the memory.

    Args:
        extract: the features of all training images (see :data:`ExtractFn`).
        settings: clustering parameters.
        sampler: has ``set_labels(labels)`` (:class:`reid.data.PseudoLabelSampler`).
        memory: the cluster memory, restarted at the centroids.
        per_batch: pseudo-identities one batch needs (P).
        score: optional ``score(labels) -> dict`` of purity figures (only when the images happen
            to have ground truth, which training never sees).
        tracklets: optional tracklet of each image (int ``[N]``, UDA.TRACKLET_REGEX): each tracklet
            is kept in one cluster.
        cameras: optional camera id of each image (int ``[N]``): for camera-balanced neighbours,
            a camera-aware memory (``memory.assign``) and the health figures.
        num_images: the training images now (a checkpoint's labels must be one per image).
        positions: optional order of each image within its tracklet (int ``[N]``), for cutting
            tracklets at an identity switch (UDA.TRACKLET_SPLIT).
    """

    def __init__(self, extract: ExtractFn, settings: ClusterSettings, sampler: Any, memory: ClusterMemory,
                 per_batch: int, score: Optional[Callable[[np.ndarray], Dict[str, float]]] = None,
                 tracklets: Optional[np.ndarray] = None, cameras: Optional[np.ndarray] = None,
                 num_images: Optional[int] = None, positions: Optional[np.ndarray] = None) -> None:
        self.extract, self.settings, self.sampler, self.memory = extract, settings, sampler, memory
        self.per_batch, self.score, self.tracklets, self.cameras = int(per_batch), score, tracklets, cameras
        self.num_images, self.positions = num_images, positions
        self.labels: Optional[np.ndarray] = None  # this epoch's clusters (a camera-aware memory trains on proxies)
        self.epoch: Optional[int] = None  # the epoch self.labels belong to
        self.history: List[Dict[str, float]] = []  # every clustering's health figures, for the trend warnings
        self._restored = False
        self._saved_memory = "clusters"  # the memory kind a loaded checkpoint trained with

    def state_dict(self) -> Dict[str, Any]:
        if self.labels is None:
            return {}
        return {"epoch": int(self.epoch), "labels": torch.from_numpy(self.labels.copy()),
                "history": [dict(h) for h in self.history], "memory": self._memory_kind()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.epoch, self.labels = int(state["epoch"]), state["labels"].numpy().astype(np.int64)
        self.history = [dict(h) for h in state.get("history", [])]
        self._saved_memory = str(state.get("memory", "clusters"))
        self._restored = True

    def _memory_kind(self) -> str:
        return "camera proxies" if isinstance(self.memory, CameraProxyMemory) else "clusters"

    def _restored_labels_fit(self) -> bool:
        """Whether the checkpoint's pseudo-labels and memory still fit this run (a resume with
        UDA.CAMERA_AWARE switched, or with other training images, must not reuse them)."""
        saved = self._saved_memory
        if saved != self._memory_kind():
            logger.warning("The checkpoint's cluster memory holds %s but this run trains with %s (UDA.CAMERA_AWARE "
                           "changed): clustering again, so this epoch is not exactly the interrupted run's.",
                           saved, self._memory_kind())
            return False
        if self.num_images is not None and len(self.labels) != self.num_images:
            logger.warning("The checkpoint's pseudo-labels are for %d images but the training set now has %d (the "
                           "data changed): clustering again, so this epoch is not exactly the interrupted run's.",
                           len(self.labels), self.num_images)
            return False
        return True

    def before_epoch(self) -> None:
        t = self.trainer
        restored, self._restored = self._restored, False
        if t.start_batch > 0 and restored and self.epoch == t.epoch:
            if self._restored_labels_fit():  # (it says why when not)
                # mid-epoch resume: the memory's vectors come from MemoryUpdate
                self.sampler.set_labels(self.memory.assign(self.labels, self.cameras))
                logger.info("Epoch %d resumes with its pseudo-labels from the checkpoint (%d clusters).", t.epoch + 1,
                            int(self.labels.max()) + 1)
                return
        elif t.start_batch > 0:
            logger.warning("Resuming epoch %d mid-way without its pseudo-labels in the checkpoint: clustering "
                           "again, so this epoch is not exactly the uninterrupted run's.", t.epoch + 1)
        self._cluster()

    def _cluster(self) -> None:
        t = self.trainer
        start = time.perf_counter()
        rng = get_rng_state()  # extraction (loader seeds) must not shift the training streams
        try:
            feats = self.extract(t.model)
            extracted = time.perf_counter()
            clusters = cluster_features(feats, self.settings, self.tracklets, self.cameras, self.positions)
        finally:
            set_rng_state(rng)
        if clusters.eps_choice is not None:
            logger.info(clusters.eps_choice.reason())
        check_clusters(clusters, len(feats), self.per_batch, self.settings)
        memory_start = time.perf_counter()
        train_labels = self.memory.assign(clusters.labels, self.cameras)
        self.memory.reset(cluster_centroids(feats, train_labels, int(train_labels.max()) + 1))
        self.sampler.set_labels(train_labels)
        seconds_memory = time.perf_counter() - memory_start
        previous = self.labels
        self.labels, self.epoch = clusters.labels, t.epoch
        if previous is not None and len(previous) != len(clusters.labels):
            previous = None  # other images than the checkpoint's: nothing to compare
        record: Dict[str, Any] = {
            "type": "cluster", "epoch": t.epoch + 1, "iter": t.iter, "clusters": clusters.num_clusters,
            "images": int(len(feats)), "images_kept": clusters.kept, "eps": clusters.eps,
        }
        if isinstance(self.memory, CameraProxyMemory):
            record["proxies"] = self.memory.num_classes
        if clusters.split is not None and self.settings.tracklet_split > 0:
            record.update({"tracklets_cut": clusters.split.cut, "tracklet_parts": clusters.split.parts})
        record.update(cluster_health(clusters.labels, self.cameras, feats, previous))
        if clusters.eps_choice is not None:
            record.update(clusters.eps_choice.record())
        record.update({"seconds": time.perf_counter() - start, "seconds_extract": extracted - start,
                       "seconds_distance": clusters.seconds_distance, "seconds_split": clusters.seconds_split,
                       "seconds_radius": clusters.seconds_radius, "seconds_dbscan": clusters.seconds_dbscan,
                       "seconds_memory": seconds_memory})
        if self.score is not None:
            record.update(self.score(clusters.labels))
        t.log_records.append(record)
        logger.info(format_cluster_record(record))
        self.history.append({k: v for k, v in record.items()
                             if isinstance(v, (int, float)) and not k.startswith("seconds")})
        cams = len(np.unique(self.cameras)) if self.cameras is not None else 0
        options = RunOptions(self.settings.auto_eps, isinstance(self.memory, CameraProxyMemory),
                             self.settings.camera_neighbours)
        for warning in health_warnings(self.history, cams, options):
            logger.warning(warning)


#: The stages of a clustering step in its log line: (label, record key).
STAGES = (("extract", "seconds_extract"), ("neighbours", "seconds_distance"), ("cuts", "seconds_split"),
          ("radius", "seconds_radius"), ("DBSCAN", "seconds_dbscan"), ("memory", "seconds_memory"))


def format_cluster_record(record: Mapping[str, Any]) -> str:
    """The log line of a clustering record."""
    kept, n = record["images_kept"], record["images"]
    proxies = f" ({record['proxies']} camera proxies)" if "proxies" in record else ""
    parts = [f"Clustering before epoch {record['epoch']}: {record['clusters']} clusters{proxies}, {kept}/{n} images "
             f"kept ({100.0 * kept / max(n, 1):.1f}%) at eps {record.get('eps', float('nan')):.3g}"]
    health = format_health(record)
    if health:
        parts.append(health)
    shown = [("ARI", "ari"), ("pair precision", "pair_precision"), ("pair recall", "pair_recall"),
             ("true ids", "true_ids")]
    parts += [f"{label} {record[key]:.3f}" if isinstance(record[key], float) else f"{label} {record[key]}"
              for label, key in shown if key in record]
    if "tracklets_cut" in record:
        parts.append(f"{record['tracklets_cut']} tracklet(s) cut at an appearance jump into {record['tracklet_parts']} "
                     "parts")
    # stages that round to 0.0 s say nothing
    stages = ", ".join(f"{label} {record[key]:.1f}" for label, key in STAGES if record.get(key, 0.0) >= 0.05)
    parts.append(f"{record['seconds']:.1f} s" + (f" ({stages})" if stages else ""))
    return "; ".join(parts)


class MemoryUpdate(HookBase):
    """After each step: the cluster memory's momentum update. State: the memory's vectors."""

    def __init__(self, memory: ClusterMemory) -> None:
        self.memory = memory

    def after_step(self) -> None:
        self.memory.update()

    def state_dict(self) -> Dict[str, Any]:
        return {"memory": self.memory.weight.detach().cpu().clone()} if self.memory.num_classes else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.memory.load_vectors(state["memory"])


__all__ = ["STAGES", "ClusterEachEpoch", "ExtractFn", "MemoryUpdate", "NoClustersError", "check_clusters",
           "format_cluster_record"]
