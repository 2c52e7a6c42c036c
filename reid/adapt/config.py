"""The training config of the adaptation: the model's own config plus learning without labels.

The model's config (its run's config.yaml, the one its checkpoint stores, or --config-file) keeps
what makes it that model (backbone, input size, head, neck); :func:`adaptation_opts` adds what
training on the site's crops without labels needs (docs/training.md, "No labels?"), and the
user's ``--opts KEY VALUE ...`` come last, so they win over both.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

from reid.uda.auto_eps import MIN_IMAGES

#: UDA.EPS below auto_eps.MIN_IMAGES crops, where the radius cannot be read from the data (the
#: radius configs/UDA/synthetic_shift.yml measured for the demo model on another domain).
FALLBACK_EPS = 0.5
#: UDA.TRACKLET_SPLIT: the value its key's comment recommends for trained models (a tracker's
#: identity switch cuts a tracklet when its two parts' mean features are less similar than this).
TRACKLET_SPLIT = 0.5
#: Fine-tuning a trained model: Adam at Cluster Contrast's rate, no warmup (the model is not random).
SOLVER_OPTS = ["SOLVER.OPTIMIZER", "Adam", "SOLVER.BASE_LR", 0.00035, "SOLVER.WARMUP_ITERS", 0,
               "SOLVER.SCHED", "cosine", "SOLVER.CHECKPOINT_PERIOD", 1]
#: The clustering of configs/UDA/synthetic_shift.yml (a few thousand crops, as a site's first videos give).
CLUSTER_OPTS = ["UDA.K1", 20, "UDA.K2", 6, "UDA.MIN_SAMPLES", 4, "UDA.TEMPERATURE", 0.05, "UDA.MOMENTUM", 0.1,
                "UDA.MEMORY_UPDATE", "hard"]


#: Pseudo-identities a batch may ask for, as a share of the tracklets: one person leaves several
#: tracklets (cameras, re-entries, the tracker's breaks), and each batch needs P distinct clusters.
TRACKLETS_PER_IDENTITY = 4


def batch_size(num_crops: int, num_tracklets: int, model_batch: int, k: int, where: str) -> int:
    """SOLVER.IMS_PER_BATCH for `num_crops` crops of `num_tracklets` tracklets: the model's batch, at
    most half the crops (room for clustering's outliers) and P = batch / K at most a quarter of the
    tracklets (the clusters a batch needs must exist), in whole groups of K = `k`, at least 2 groups;
    fewer crops than that is a one-line ValueError naming `where`."""
    if num_crops < 2 * k:
        raise ValueError(f"{where} holds {num_crops} crops, fewer than one batch of 2 x DATALOADER.NUM_INSTANCE "
                         f"{k} = {2 * k}: give longer or more sequences, or a smaller --frame-step.")
    most = min(model_batch, num_crops // 2, max(2, num_tracklets // TRACKLETS_PER_IDENTITY) * k)
    return max(2 * k, most // k * k)


def adaptation_opts(num_crops: int, num_tracklets: int, num_cameras: int, crops_list: str, weights: str, output_dir: str,
                    epochs: int, k: int, model_batch: int, label_smooth: float, has_tracklet_split: bool,
                    log: Callable[[str], None]) -> List[Any]:
    """``KEY VALUE`` overrides that turn the model's config into its adaptation to `num_crops` crops of
    `num_tracklets` tracklets and `num_cameras` cameras listed in `crops_list` (``path camid`` lines),
    starting from `weights`; each choice the data forces is said in one line through `log`."""
    batch = batch_size(num_crops, num_tracklets, model_batch, k, crops_list)
    opts: List[Any] = [
        "UDA.ENABLED", True, "DATASETS.NAMES", ["unlabelled"], "DATASETS.TESTS", [],
        "DATASETS.UNLABELLED.LIST", crops_list, "DATASETS.UNLABELLED.DIR", "", "DATASETS.UNLABELLED.CAMERA_REGEX", "",
        "MODEL.WEIGHTS", weights, "MODEL.BACKBONE.PRETRAINED", False, "OUTPUT_DIR", output_dir,
        "MODEL.LOSSES.NAMES", ["identity"], "MODEL.LOSSES.ID.LABEL_SMOOTH", 0.0,
        "UDA.TRACKLET_REGEX", _tracklet_regex(),
        "SOLVER.IMS_PER_BATCH", batch, "SOLVER.MAX_EPOCH", int(epochs),
        # one pass over the crops per epoch: the schedule follows the data, not a dataset's published count
        "UDA.ITERS_PER_EPOCH", max(1, num_crops // batch),
        *SOLVER_OPTS, *CLUSTER_OPTS,
    ]
    if has_tracklet_split:
        opts += ["UDA.TRACKLET_SPLIT", TRACKLET_SPLIT]
    cameras = num_cameras >= 2
    opts += ["UDA.CAMERA_AWARE", cameras, "UDA.CAMERA_NEIGHBOURS", cameras]
    if num_crops >= MIN_IMAGES:
        opts += ["UDA.EPS", "auto"]
    else:
        opts += ["UDA.EPS", FALLBACK_EPS]
        log(f"UDA.EPS {FALLBACK_EPS}: {num_crops} crops are fewer than the {MIN_IMAGES} from which the radius is "
            "read from the data (auto)")
    if label_smooth > 0 and cameras:
        log(f"MODEL.LOSSES.ID.LABEL_SMOOTH 0 (the model's config has {label_smooth:g}): camera-aware training "
            "has no label smoothing")
    return opts


def _tracklet_regex() -> str:
    from reid.tracking.to_reid import TRACKLET_REGEX

    return TRACKLET_REGEX


def build_adaptation_config(model_config_file: str, num_crops: int, num_tracklets: int, num_cameras: int, crops_list: str,
                            weights: str, output_dir: str, epochs: int, user_opts: Sequence[Any],
                            log: Callable[[str], None]):
    """The frozen training config: `model_config_file`, then :func:`adaptation_opts`, then `user_opts`.

    Read twice: the first reading (with the user's overrides) gives K and the model's batch, which
    the batch size of the second must fit."""
    from reid.config import get_cfg, load_config

    first = load_config(model_config_file, list(user_opts))
    has_split = "TRACKLET_SPLIT" in get_cfg().UDA
    opts = adaptation_opts(num_crops, num_tracklets, num_cameras, crops_list, weights, output_dir, epochs,
                           int(first.DATALOADER.NUM_INSTANCE), int(first.SOLVER.IMS_PER_BATCH),
                           float(first.MODEL.LOSSES.ID.LABEL_SMOOTH), has_split, log)
    return load_config(model_config_file, opts + list(user_opts))


def chosen_settings(cfg) -> Dict[str, Any]:
    """The adaptation's main settings as the config has them (for the stage's record and the log)."""
    u = cfg.UDA
    return {"UDA.EPS": u.EPS, "UDA.CAMERA_AWARE": u.CAMERA_AWARE, "UDA.CAMERA_NEIGHBOURS": u.CAMERA_NEIGHBOURS,
            "UDA.TRACKLET_SPLIT": getattr(u, "TRACKLET_SPLIT", None), "UDA.ITERS_PER_EPOCH": int(u.ITERS_PER_EPOCH),
            "SOLVER.IMS_PER_BATCH": int(cfg.SOLVER.IMS_PER_BATCH), "SOLVER.MAX_EPOCH": int(cfg.SOLVER.MAX_EPOCH),
            "DATALOADER.NUM_INSTANCE": int(cfg.DATALOADER.NUM_INSTANCE)}


__all__ = ["FALLBACK_EPS", "TRACKLETS_PER_IDENTITY", "TRACKLET_SPLIT", "adaptation_opts", "batch_size",
           "build_adaptation_config", "chosen_settings"]
