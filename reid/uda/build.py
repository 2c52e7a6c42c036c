"""Learning without labels from a config: the pseudo-label loader, the cluster memory, the hooks."""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from reid.data import TrainData, build_pseudo_label_loader, build_test_loader
from reid.data.datasets.unlabelled import groups_in_names, one_group_pattern
from reid.engine import HookBase
from reid.evaluation.extract import extract_features
from reid.utils.process import get_world_size

from .auto_eps import check_auto_images
from .camera_proxies import CameraProxyMemory
from .cluster_memory import UPDATE_MODES, ClusterMemory
from .clustering import ClusterSettings
from .extract_runtime import ClusterExtractor, Runtimes
from .hooks import ClusterEachEpoch, MemoryUpdate
from .scores import pseudo_label_scores

logger = logging.getLogger(__name__)


def _pairwise_losses(cfg) -> List[str]:
    """The losses of MODEL.LOSSES.NAMES that compare pairs of images (wrong with camera proxies)."""
    return [n for n in ("triplet", "pair_circle") if n in [str(x).lower() for x in cfg.MODEL.LOSSES.NAMES]]


def check_uda_settings(cfg, num_images: int) -> None:
    """Refuse, naming the key, what cannot train without labels (before anything is built)."""
    if get_world_size() > 1:
        raise ValueError("UDA.ENABLED runs in one process: clustering and the cluster memory are not shared "
                         "between processes yet. Start tools/train.py without torchrun.")
    if "identity" not in [str(n).lower() for n in cfg.MODEL.LOSSES.NAMES]:
        raise ValueError(f"UDA.ENABLED trains through the cluster memory, which takes the identity loss's place, but "
                         f"MODEL.LOSSES.NAMES {list(cfg.MODEL.LOSSES.NAMES)} lacks 'identity': add it.")
    batch, k = int(cfg.SOLVER.IMS_PER_BATCH), int(cfg.DATALOADER.NUM_INSTANCE)
    if num_images < batch:
        raise ValueError(
            f"The training set has {num_images} images, fewer than one batch (SOLVER.IMS_PER_BATCH {batch}): "
            f"learning without labels needs at least a batch of P x K images. Add images or lower "
            f"SOLVER.IMS_PER_BATCH (a multiple of DATALOADER.NUM_INSTANCE {k})."
        )
    settings = ClusterSettings.from_cfg(cfg)  # EPS, MIN_SAMPLES, K1, K2
    if settings.auto_eps:
        check_auto_images(num_images)
    u = cfg.UDA
    if not float(u.TEMPERATURE) > 0:
        raise ValueError(f"UDA.TEMPERATURE must be > 0 (0.05 is usual), got {u.TEMPERATURE}.")
    if not 0 <= float(u.MOMENTUM) < 1:
        raise ValueError(f"UDA.MOMENTUM must lie in [0, 1) (0.1 is usual), got {u.MOMENTUM}.")
    if str(u.MEMORY_UPDATE) not in UPDATE_MODES:
        raise ValueError(f"UDA.MEMORY_UPDATE {u.MEMORY_UPDATE!r} is not one of: {', '.join(UPDATE_MODES)}.")
    if u.CAMERA_AWARE in (True, "auto"):
        if not 0 <= float(u.CAMERA_INTER_WEIGHT) < float("inf"):
            raise ValueError(f"UDA.CAMERA_INTER_WEIGHT must be a finite number >= 0 (CAP: 0.5), got "
                             f"{u.CAMERA_INTER_WEIGHT}.")
        if int(u.CAMERA_HARD_NEGATIVES) < 1:
            raise ValueError(f"UDA.CAMERA_HARD_NEGATIVES must be >= 1 (CAP: 50), got {u.CAMERA_HARD_NEGATIVES}.")
    if u.CAMERA_AWARE is True:  # "auto" is decided on the data (camera_options), where these turn it off
        pairwise = _pairwise_losses(cfg)
        if pairwise:
            raise ValueError(f"UDA.CAMERA_AWARE trains on camera proxies, so MODEL.LOSSES.NAMES {pairwise} would take "
                             "one person in two cameras for two people; remove them (the proxies' inter-camera loss "
                             "does their work) or set UDA.CAMERA_AWARE false or auto.")
        if float(cfg.MODEL.LOSSES.ID.LABEL_SMOOTH) > 0:
            raise ValueError(f"UDA.CAMERA_AWARE trains with CAP's own contrastive terms, which have no label smoothing, "
                             f"but MODEL.LOSSES.ID.LABEL_SMOOTH is {cfg.MODEL.LOSSES.ID.LABEL_SMOOTH}: set it to 0.")
    if not 0.0 <= float(u.TRACKLET_SPLIT) < 1.0:
        raise ValueError(f"UDA.TRACKLET_SPLIT must lie in [0, 1) (a cosine similarity; 0 = never split), got "
                         f"{u.TRACKLET_SPLIT}.")


def _warn_exact_camera_neighbours(settings: ClusterSettings, num_images: int) -> None:
    if settings.camera_neighbours and settings.neighbours.backend == "auto" and num_images >= settings.neighbours.approx_min_size:
        logger.warning("UDA.CAMERA_NEIGHBOURS finds its camera-balanced lists with the exact pass (every pair of the "
                       "%d training images, before every epoch; the approximate pass UDA.NEIGHBOURS auto would use "
                       "from UDA.APPROX_MIN_SIZE %d images on has no per-camera form): expect it to take long.",
                       num_images, settings.neighbours.approx_min_size)


_CAMERA_KEYS = ("CAMERA_AWARE", "CAMERA_NEIGHBOURS")


@dataclass(frozen=True)
class CameraOptions:
    """UDA.CAMERA_AWARE and UDA.CAMERA_NEIGHBOURS as this run uses them ("auto" decided on the data),
    and the camera id of every training image (None when the data has none)."""

    aware: bool
    neighbours: bool
    cameras: Optional[np.ndarray]


def _data_cameras(data: TrainData, cfg) -> Tuple[Optional[np.ndarray], str]:
    """The training images' camera ids, or None and why there are none to balance."""
    if len(data.datasets) > 1:  # each dataset numbers its own cameras from 0: the ids would collide
        return None, (f"DATASETS.NAMES {list(cfg.DATASETS.NAMES)} has {len(data.datasets)} training datasets, each "
                      "numbering its cameras from 0 (adapt to one dataset at a time)")
    unknown = [d.name for d in data.datasets if not getattr(d, "has_cameras", True)]
    if unknown:
        return None, (f"dataset {unknown[0]!r} has no camera ids (set DATASETS.UNLABELLED.CAMERA_REGEX, e.g. "
                      "'_c(\\d+)', or write 'path camid' lines in DATASETS.UNLABELLED.LIST)")
    cams = np.array([cam for _, _, cam in data.items], dtype=np.int64)
    if len(np.unique(cams)) < 2:
        return cams, (f"all {len(cams)} training images come from one camera ({int(cams[0]) if len(cams) else 0}; "
                      "give their camera ids through DATASETS.UNLABELLED.CAMERA_REGEX or a list with 'path camid')")
    return cams, ""


def camera_options(data: TrainData, cfg) -> CameraOptions:
    """Decide UDA.CAMERA_AWARE / UDA.CAMERA_NEIGHBOURS for `data`. ``true`` on data without camera ids
    from >= 2 cameras is a ValueError naming the key; ``auto`` is on when the data has them and off
    otherwise, with one line saying so (the shipped configs use auto, so they run on any data)."""
    cams, missing = _data_cameras(data, cfg)
    chosen = {}
    for key in _CAMERA_KEYS:
        value = cfg.UDA[key]
        why = missing
        if value == "auto" and not why and key == "CAMERA_AWARE" and float(cfg.MODEL.LOSSES.ID.LABEL_SMOOTH) > 0:
            why = (f"MODEL.LOSSES.ID.LABEL_SMOOTH is {cfg.MODEL.LOSSES.ID.LABEL_SMOOTH} and camera proxies have no "
                   "label smoothing (set it to 0 for camera-aware proxies)")
        pairwise = _pairwise_losses(cfg)
        if value == "auto" and not why and key == "CAMERA_AWARE" and pairwise:
            why = (f"MODEL.LOSSES.NAMES has {pairwise}, which would take one person in two cameras for two people "
                   "(remove them for camera-aware proxies)")
        if value == "auto" and not why and key == "CAMERA_NEIGHBOURS" and str(cfg.UDA.NEIGHBOURS).lower() == "ivf":
            why = "UDA.NEIGHBOURS is ivf and camera-balanced lists need the exact pass (set it to auto or exact)"
        if value == "auto" and not why and key == "CAMERA_NEIGHBOURS" and str(cfg.UDA.NEIGHBOURS).lower() == "auto" \
                and len(data.items) >= int(cfg.UDA.APPROX_MIN_SIZE):
            why = (f"{len(data.items)} training images reach UDA.APPROX_MIN_SIZE {cfg.UDA.APPROX_MIN_SIZE}, where the "
                   "approximate neighbour pass takes over and camera-balanced lists need the exact one (set "
                   "UDA.CAMERA_NEIGHBOURS true to keep them anyway)")
        if value == "auto":
            chosen[key] = not why
            if why:
                logger.warning("UDA.%s auto: off, because %s; clustering falls back to camera-agnostic %s.", key,
                               why, "memory" if key == "CAMERA_AWARE" else "neighbours")
        elif bool(value) and missing:
            raise ValueError(f"UDA.{key} needs the camera of every training image from at least two cameras, but "
                             f"{missing}; or set UDA.{key} auto (on when the data has camera ids) or false.")
        else:
            chosen[key] = bool(value)
    return CameraOptions(chosen["CAMERA_AWARE"], chosen["CAMERA_NEIGHBOURS"], cams)


def camera_ids(data: TrainData, cfg) -> Optional[np.ndarray]:
    """The camera id of every training image (None when the data has none); the checks of
    :func:`camera_options`."""
    return camera_options(data, cfg).cameras


_TRACKLET_KEY = "UDA.TRACKLET_REGEX"


def tracklets_from_names(paths: Sequence[str], regex: str) -> np.ndarray:
    """The tracklet of each of `paths` (int ``[N]``, numbered 0..T-1 in sorted order): the text that
    `regex`'s one group captures in the file name (searched within the bounds of reid/utils/safe_regex.py).
    A name it does not match is one line naming the file and the key."""
    pattern = one_group_pattern(regex, _TRACKLET_KEY, "the tracklet part", r"^(.+_t\d+)_f\d+")
    found = groups_in_names(paths, pattern, _TRACKLET_KEY, "; fix the expression, or set it to '' (no tracklets).",
                            ValueError)
    return np.unique(found, return_inverse=True)[1].reshape(-1).astype(np.int64)


#: The largest batch of the clustering's feature pass on a CPU. Measured on 2 cores (256x128 crops):
#: OSNet x0.25 extracts 225 crops/s in batches of 32, 119 in batches of 128 and 69 in batches of 256;
#: ResNet50 21/s at 16, 16/s at 128 (docs/benchmarks.md, "One clustering step"). Fixed rather than
#: measured per run, so that a resumed run extracts exactly as the interrupted one did.
CPU_EXTRACT_BATCH = 32


def extraction_batch(test_batch: int, device: torch.device) -> int:
    """The batch size of the clustering's feature pass: TEST.IMS_PER_BATCH, at most CPU_EXTRACT_BATCH on a CPU."""
    return min(test_batch, CPU_EXTRACT_BATCH) if device.type == "cpu" else test_batch


def _with_test_batch(cfg, batch: int):
    if int(cfg.TEST.IMS_PER_BATCH) == batch:
        return cfg
    cfg = cfg.clone()
    cfg.defrost()
    cfg.TEST.IMS_PER_BATCH = batch
    cfg.freeze()
    return cfg


def set_identity_head(model: nn.Module, head: nn.Module) -> None:
    """Give `model` the cluster memory as its identity head (an error for a model that cannot)."""
    setter = getattr(model, "set_identity_head", None)
    if not callable(setter):
        raise ValueError(f"UDA.ENABLED: the model {type(model).__name__} has no set_identity_head(), so it cannot "
                         "train with a cluster memory; use MODEL.META_ARCHITECTURE baseline or mgn.")
    setter(head)


def build_uda_training(cfg, data: TrainData, model: nn.Module,
                       extract_runtimes: Optional[Runtimes] = None) -> Tuple[DataLoader, List[HookBase]]:
    """The train loader and the hooks of a UDA run on ``data.items``; installs the memory in `model`.

    `extract_runtimes` are the runtimes beside PyTorch that UDA.EXTRACT_RUNTIME may run the clustering's
    feature pass in (reid/uda/extract_runtime.py; reid.training hands ONNX Runtime in).

    The images' own pids (ground truth, when the data happens to have it) never reach training:
    the loader's items carry pid -1 and its targets are the pseudo-labels. With ground truth,
    each epoch's clustering is scored against it (:func:`pseudo_label_scores`) for the log.
    """
    check_uda_settings(cfg, len(data.items))
    items = [(path, -1, cam) for path, _, cam in data.items]
    loader = build_pseudo_label_loader(cfg, items)
    u = cfg.UDA
    cams = camera_options(data, cfg)
    settings = replace(ClusterSettings.from_cfg(cfg), camera_neighbours=cams.neighbours)
    _warn_exact_camera_neighbours(settings, len(items))
    args = (int(model.feature_dim), float(u.TEMPERATURE), float(u.MOMENTUM), str(u.MEMORY_UPDATE))
    memory = (CameraProxyMemory(*args, float(u.CAMERA_INTER_WEIGHT), int(u.CAMERA_HARD_NEGATIVES))
              if cams.aware else ClusterMemory(*args))
    set_identity_head(model, memory)
    loaders = {}
    # UDA.EXTRACT_RUNTIME (checked now; chosen at the first extraction, with one line saying which and why)
    extractor = ClusterExtractor(str(u.EXTRACT_RUNTIME), bool(cfg.TEST.FLIP), str(cfg.TEST.AMP), cfg.INPUT.SIZE_TEST,
                                 len(items), extract_runtimes)

    def extract(m: nn.Module) -> torch.Tensor:
        # The memory's centroids must be the features its loss sees in training (after the neck),
        # whatever MODEL.HEADS.NECK_FEAT picks for testing.
        device, test_feat = next(m.parameters()).device, getattr(m, "neck_feat", None)
        batch = extraction_batch(int(cfg.TEST.IMS_PER_BATCH), device)
        if batch not in loaders:
            loaders[batch] = build_test_loader(_with_test_batch(cfg, batch), items, [])
            if batch != int(cfg.TEST.IMS_PER_BATCH):
                logger.info("Clustering extracts in batches of %d on the CPU (TEST.IMS_PER_BATCH %d: larger batches "
                            "outgrow the CPU's caches and run slower).", batch, int(cfg.TEST.IMS_PER_BATCH))
        if test_feat is not None:
            m.neck_feat = "after"
        try:
            return extractor(m, loaders[batch], device)
        finally:
            if test_feat is not None:
                m.neck_feat = test_feat

    score = None
    if data.labelled:  # e.g. a labelled dataset adapted to as if it had none: measure, never train on it
        truth = np.array([pid for _, pid, _ in data.items], dtype=np.int64)
        score = lambda labels: pseudo_label_scores(labels, truth)  # noqa: E731
    names = [p for p, _, _ in items]
    tracklets = tracklets_from_names(names, str(u.TRACKLET_REGEX)) if u.TRACKLET_REGEX else None
    # a tracklet's crops in the order of their names (tools/tracks_to_reid.py names end in the frame number)
    positions = np.argsort(np.argsort(np.asarray(names), kind="stable"), kind="stable") if tracklets is not None else None
    per_batch = int(cfg.SOLVER.IMS_PER_BATCH) // int(cfg.DATALOADER.NUM_INSTANCE)
    # ClusterEachEpoch must run before MemoryUpdate
    return loader, [ClusterEachEpoch(extract, settings, loader.sampler, memory, per_batch, score, tracklets, cams.cameras,
                                     len(items), positions), MemoryUpdate(memory)]


__all__ = ["CPU_EXTRACT_BATCH", "CameraOptions", "build_uda_training", "extraction_batch", "camera_ids", "camera_options", "check_uda_settings", "set_identity_head", "tracklets_from_names"]
