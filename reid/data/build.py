"""Datasets and loaders from a config: training data (with an optional validation split),
the train loader and the test loader."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch
from torch.utils.data import DataLoader

from reid.config import ConfigError
from reid.utils.process import get_rank, get_world_size
from reid.utils.worker_signals import StopSafeDataLoader

from .dataset_wrappers import ImageDataset, collate_batch
from .datasets import DATASET_REGISTRY, build_dataset
from .datasets.base import Item, ReIDDataset, combine_all, relabel_pids
from .image_io import filter_readable
from .samplers import IdentitySampler, PseudoLabelSampler, ShuffleSampler
from .frame_sampling import check_sampling
from .tracklet_dataset import TrackletDataset, collate_tracklets
from .transforms import build_transforms
from .video import VIDEO_DATASET_REGISTRY, build_video_dataset

logger = logging.getLogger(__name__)

SAMPLERS = ("identity", "random")


@dataclass
class TrainData:
    """Training items (pids 0..num_classes-1) and the held-out validation split.

    ``val_query``/``val_gallery`` are empty when TEST.VAL_IDS is 0; their pids are the
    combined (offset) pids, never reused by ``items``.
    """

    items: List[Item]
    num_classes: int
    val_query: List[Item] = field(default_factory=list)
    val_gallery: List[Item] = field(default_factory=list)
    datasets: List[ReIDDataset] = field(default_factory=list)
    #: False when a dataset has no identities (``unlabelled``): every pid is then -1 and num_classes 0.
    labelled: bool = True


#: dataset name -> its constructor kwargs from ``cfg.DATASETS`` (datasets not listed take none).
_DATASET_KWARGS = {
    "msmt17": lambda d: {"combine_val": bool(d.MSMT17_COMBINE_VAL), "version": str(d.MSMT17_VERSION)},
    "cuhk03": lambda d: {"image_set": str(d.CUHK03.IMAGE_SET), "protocol": str(d.CUHK03.PROTOCOL),
                         "classic_split": int(d.CUHK03.CLASSIC_SPLIT)},
    "custom": lambda d: {"train_list": d.CUSTOM.TRAIN_LIST, "query_list": d.CUSTOM.QUERY_LIST,
                         "gallery_list": d.CUSTOM.GALLERY_LIST},
    "folders": lambda d: {"query_path": d.FOLDERS.QUERY_PATH, "gallery_path": d.FOLDERS.GALLERY_PATH},
    "unlabelled": lambda d: {"folder": d.UNLABELLED.DIR, "list_file": d.UNLABELLED.LIST,
                             "camera_regex": d.UNLABELLED.CAMERA_REGEX},
    "synthetic": lambda d: {
        "num_train_ids": d.SYNTHETIC.NUM_TRAIN_IDS,
        "num_test_ids": d.SYNTHETIC.NUM_TEST_IDS,
        "num_cameras": d.SYNTHETIC.NUM_CAMERAS,
        "images_per_camera": d.SYNTHETIC.IMAGES_PER_CAMERA,
        "num_distractors": d.SYNTHETIC.NUM_DISTRACTORS,
        "seed": d.SYNTHETIC.SEED,
        "image_size": tuple(d.SYNTHETIC.IMAGE_SIZE),
        "style": d.SYNTHETIC.STYLE,
        "object_type": d.SYNTHETIC.OBJECT,
    },
    "synthetic_video": lambda d: {
        "num_train_ids": d.SYNTHETIC.NUM_TRAIN_IDS,
        "num_test_ids": d.SYNTHETIC.NUM_TEST_IDS,
        "num_cameras": d.SYNTHETIC.NUM_CAMERAS,
        "frames": d.VIDEO.FRAMES,
        "num_distractors": d.SYNTHETIC.NUM_DISTRACTORS,
        "seed": d.SYNTHETIC.SEED,
        "image_size": tuple(d.SYNTHETIC.IMAGE_SIZE),
        "style": d.SYNTHETIC.STYLE,
    },
    "mars": lambda d: {"keep_junk": bool(d.VIDEO.MARS_KEEP_JUNK)},
    "ilidsvid": lambda d: {"split_id": int(d.VIDEO.SPLIT_ID)},
    "prid2011": lambda d: {"split_id": int(d.VIDEO.SPLIT_ID)},
    "vehicleid": lambda d: {"test_size": d.VEHICLEID.TEST_SIZE},
    "veriwild": lambda d: {"test_size": d.VERIWILD.TEST_SIZE},
}


def dataset_kwargs(cfg, name: str) -> Dict[str, Any]:
    """Constructor kwargs of dataset `name` taken from the config (empty for folder datasets)."""
    make = _DATASET_KWARGS.get(name.lower())
    return make(cfg.DATASETS) if make else {}


def is_video_dataset(name: str) -> bool:
    """True when `name` is a video dataset (tracklets: reid/data/video/), not an image one."""
    return str(name) in VIDEO_DATASET_REGISTRY


def trained_on_tracklets(cfg: Any) -> bool:
    """True when the config trains on video datasets (every DATASETS.NAMES entry one): such a model
    pools a tracklet's frames itself, and the tracking tools and exports let it by default."""
    names = list(cfg.DATASETS.NAMES) if cfg is not None else []
    return bool(names) and all(is_video_dataset(n) for n in names)


def is_tracklet_items(items: Sequence) -> bool:
    """True when `items` are tracklets ``(frame paths, pid, camid)`` rather than images ``(path, pid, camid)``."""
    return bool(items) and isinstance(items[0][0], tuple)


def _load(cfg, name: str, log: bool = True, splits: Sequence[str] = ()):
    """Dataset `name`; with DATASETS.SKIP_CORRUPT the images of `splits` are read first and the
    unreadable ones dropped, so that the logged table counts the images actually used (image
    datasets; a video dataset's frames are read when used, and a bad one names its file)."""
    if is_video_dataset(name):
        ds = build_video_dataset(name, cfg.DATASETS.ROOT, **dataset_kwargs(cfg, name))
        if log:
            logger.info("\n%s", ds.summary())
        return ds
    ds = build_dataset(name, cfg.DATASETS.ROOT, **dataset_kwargs(cfg, name))
    checked = [split for split in splits if cfg.DATASETS.SKIP_CORRUPT]
    for split in checked:
        kept, _ = filter_readable(getattr(ds, split), f"{ds.name} {split} images")
        _require_readable(kept, f"the {split} images of {name}", cfg.DATASETS.ROOT)
        setattr(ds, split, kept)
    if log:
        note = f"\n  (DATASETS.SKIP_CORRUPT: unreadable images left out of {', '.join(checked)})" if checked else ""
        logger.info("\n%s%s", ds.summary(), note)
    return ds


def _hold_out(items: List[Item], num_val: int, seed: int) -> Tuple[List[Item], List[Item], List[Item]]:
    """Move `num_val` random identities out of `items` into a validation query/gallery split.

    Identities seen by two or more cameras are preferred (then any with two or more images),
    so every validation query has a cross-camera match when the data allows. Per held-out
    identity one random image becomes the query and the rest the gallery.
    """
    pids = np.array([it[1] for it in items], dtype=np.int64)
    cams = np.array([it[2] for it in items], dtype=np.int64)
    uniq, inv, counts = np.unique(pids, return_inverse=True, return_counts=True)
    if num_val >= len(uniq):
        raise ValueError(
            f"TEST.VAL_IDS={num_val} would hold out all {len(uniq)} training identities; "
            f"use a value below {len(uniq)} (or 0 for no validation split)."
        )
    pair = np.unique(np.stack([inv, cams], 1), axis=0)
    ncams = np.bincount(pair[:, 0], minlength=len(uniq))
    rng = np.random.default_rng([seed, 7919])
    # Sort key: camera-rich identities first, then multi-image ones, random within each tier.
    tier = np.where(ncams >= 2, 0, np.where(counts >= 2, 1, 2))
    chosen = np.lexsort((rng.random(len(uniq)), tier))[:num_val]
    held = np.zeros(len(uniq), dtype=bool)
    held[chosen] = True
    is_val = held[inv]
    val_idx = np.flatnonzero(is_val)
    # One random query image per held-out identity.
    order = val_idx[np.lexsort((rng.random(len(val_idx)), inv[val_idx]))]
    first = np.ones(len(order), dtype=bool)
    first[1:] = inv[order][1:] != inv[order][:-1]
    query = [items[i] for i in order[first]]
    gallery = [items[i] for i in order[~first]]
    train = [items[i] for i in np.flatnonzero(~is_val)]
    return train, query, gallery


def _train_items(cfg, ds: ReIDDataset) -> List[Item]:
    """`ds`'s training items; with DATASETS.COMBINE_ALL its query and gallery identities too."""
    if not cfg.DATASETS.COMBINE_ALL:
        return ds.train
    items, dropped = combine_all(ds)
    logger.info(
        "DATASETS.COMBINE_ALL: training on all of %s: %d images of %d identities (train %d + query/gallery %d "
        "images; %d distractor/junk or repeated images left out)",
        ds.name, len(items), len({it[1] for it in items}), len(ds.train), len(items) - len(ds.train), dropped,
    )
    return items


def _require_readable(items: List[Item], what: str, root: str) -> None:
    """Stop when the SKIP_CORRUPT scan left nothing: later errors would point elsewhere."""
    if not items:
        raise ValueError(
            f"DATASETS.SKIP_CORRUPT: every one of {what} failed to read, so none is left. This usually "
            f"means a wrong DATASETS.ROOT (now {root!r}) or dataset layout, or files that are not images; "
            f"the warning above names the first few."
        )


def build_train_data(cfg, labels_required: bool = True) -> TrainData:
    """Combine the train splits of DATASETS.NAMES, hold out TEST.VAL_IDS identities, relabel.

    With `labels_required` (supervised training) a dataset without identities (``unlabelled``)
    raises ValueError; without it (learning without labels) such data gives pids -1 and
    ``labelled=False``, and TEST.VAL_IDS must be 0 (holding out identities needs labels).

    Pids are offset per dataset so identities never collide; camera ids stay as each dataset
    numbers them. With DATASETS.SKIP_CORRUPT, unreadable images are dropped (and reported, once)
    before each dataset's table is logged, and a ValueError says so when none is left. A dataset named twice raises ValueError.
    With DATASETS.COMBINE_ALL each dataset gives all its images (``combine_all``); TEST.VAL_IDS
    then holds identities out of that larger set.
    """
    names = [str(n).lower() for n in cfg.DATASETS.NAMES]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        # Loading a dataset twice would train on every image twice, as two different identities.
        raise ValueError(
            f"DATASETS.NAMES {list(cfg.DATASETS.NAMES)} names {', '.join(map(repr, dup))} more than once; "
            f"list each dataset once."
        )
    check_one_kind(cfg.DATASETS.NAMES, "DATASETS.NAMES")
    if any(is_video_dataset(n) for n in cfg.DATASETS.NAMES):
        if not labels_required:
            raise ConfigError(f"DATASETS.NAMES {list(cfg.DATASETS.NAMES)}: learning without labels (UDA.ENABLED) "
                              "clusters images, not tracklets; train on the tracklets' frames as an image dataset "
                              "(video_folder's crops: the unlabelled dataset with UDA.TRACKLET_REGEX) or set "
                              "UDA.ENABLED False.")
        check_video_sampling(cfg)
    datasets, items, offset = [], [], 0
    tests = {str(n).lower() for n in cfg.DATASETS.TESTS}
    for name in cfg.DATASETS.NAMES:
        # Also the test splits when they are used here or shown as test sets (one table, right counts).
        more = ("query", "gallery") if cfg.DATASETS.COMBINE_ALL or str(name).lower() in tests else ()
        ds = _load(cfg, name, splits=("train",) + more)
        datasets.append(ds)
        train = _train_items(cfg, ds)
        items.extend((p, pid + offset, cam) for p, pid, cam in train)
        # Past the largest label, not the count: skipped images may have emptied an identity.
        offset += max((it[1] for it in train), default=-1) + 1
    if not items:
        raise ValueError(f"DATASETS.NAMES {list(cfg.DATASETS.NAMES)} has no training images.")
    unlabelled = [ds.name for ds in datasets if not ds.has_labels]
    if unlabelled and labels_required:
        raise ValueError(
            f"DATASETS.NAMES includes {', '.join(map(repr, unlabelled))}, whose images have no identity labels: "
            "supervised training needs them. Set UDA.ENABLED True to learn from them without labels "
            "(docs/training.md, 'No labels?'), or train on a labelled dataset."
        )
    if not labels_required and int(cfg.TEST.VAL_IDS) > 0:
        raise ValueError(
            f"TEST.VAL_IDS {cfg.TEST.VAL_IDS} holds out labelled identities to choose a model, but learning without "
            "labels (UDA.ENABLED) uses no labels: set TEST.VAL_IDS 0 (the last checkpoint is the result)."
        )
    if unlabelled:
        # Labels of the other datasets would cover only part of the images: none are kept.
        items = [(p, -1, cam) for p, _, cam in items]
        return TrainData(items, 0, datasets=datasets, labelled=False)
    val_query: List[Item] = []
    val_gallery: List[Item] = []
    if cfg.TEST.VAL_IDS > 0:
        items, val_query, val_gallery = _hold_out(items, int(cfg.TEST.VAL_IDS), int(cfg.SEED))
        logger.info(
            "Validation split: %d identities held out of training (%d query, %d gallery images)",
            len({it[1] for it in val_query + val_gallery}), len(val_query), len(val_gallery),
        )
    items, mapping = relabel_pids(items)
    if is_tracklet_items(items):
        _note_short_tracklets(items, int(cfg.DATALOADER.VIDEO.SEQ_LEN))
    return TrainData(items, len(mapping), val_query, val_gallery, datasets)


def _note_short_tracklets(items: Sequence, seq_len: int) -> None:
    """Say how many training tracklets are shorter than a clip: their frames repeat (in order) to fill it."""
    short = [t for t in items if len(t[0]) < seq_len]
    if short:
        single = sum(len(t[0]) == 1 for t in short)
        logger.warning("%d of %d training tracklets have fewer than DATALOADER.VIDEO.SEQ_LEN %d frames (%d of them one "
                       "frame, e.g. %s): their frames repeat in order to fill a clip", len(short), len(items), seq_len,
                       single, short[0][0][0])


@dataclass
class TestSet:
    """A test dataset's query and gallery items and how they are evaluated.

    `protocol` is the dataset's ``test_protocol``: "cross_camera" (Market-1501's) or
    "gallery_draws" (VehicleID's: query and gallery are pooled and the gallery drawn again,
    TEST.GALLERY_DRAWS times; reid/evaluation/gallery_draws.py). Items of a video dataset are
    tracklets; gallery items whose pid is in `junk_pids` (MARS's -1) are ignored by every query.
    """

    __test__ = False  # not a pytest test class, whatever its name

    query: List[Item]
    gallery: List[Item]
    protocol: str = "cross_camera"
    junk_pids: Tuple[int, ...] = ()


def build_test_data(cfg, name: str, log: bool = True,
                    notes: Optional[Dict[str, Any]] = None) -> Tuple[List[Item], List[Item]]:
    """(query, gallery) of test dataset `name`: ``build_test_set`` without the protocol."""
    test = build_test_set(cfg, name, log, notes)
    return test.query, test.gallery


def build_test_set(cfg, name: str, log: bool = True, notes: Optional[Dict[str, Any]] = None) -> TestSet:
    """Query, gallery and protocol of test dataset `name` (unreadable images dropped with SKIP_CORRUPT).

    `log` logs the dataset's table (off when the caller has just logged it, e.g. for a dataset
    that is also a training set). `notes`, when given, receives what the test should record
    beside its metrics (``ReIDDataset.test_notes``). Raises ValueError when either split is empty,
    also after dropping unreadable images.
    """
    ds = _load(cfg, name, log, splits=("query", "gallery"))
    if notes is not None:
        notes.update(ds.test_notes)
    if cfg.DATASETS.COMBINE_ALL and str(name).lower() in {str(n).lower() for n in cfg.DATASETS.NAMES}:
        logger.warning(
            "DATASETS.COMBINE_ALL is on and %s is also a training dataset (DATASETS.NAMES): its query and "
            "gallery images are training images, so its test results are NOT a held-out measure. Use "
            "TEST.VAL_IDS for a held-out validation split, or test on a dataset you did not train on.", name,
        )
    query, gallery = ds.query, ds.gallery
    if not query or not gallery:
        raise ValueError(
            f"Test dataset {name!r} has {len(query)} query and {len(gallery)} gallery images; both are "
            f"needed for evaluation. {getattr(ds, 'empty_test_hint', 'Check DATASETS.TESTS and the dataset files.')}"
        )
    return TestSet(query, gallery, ds.test_protocol, tuple(getattr(ds, "junk_pids", ())))


def _loader_kwargs(cfg) -> Dict[str, Any]:
    workers = int(cfg.DATALOADER.NUM_WORKERS)
    kw: Dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": torch.cuda.is_available(),
        "collate_fn": collate_batch,
    }
    if workers > 0:
        # OpenCV's thread pool does not survive fork(): a forked worker that touches it (even
        # cv2.setNumThreads) can hang once the parent has used it (e.g. to draw the synthetic
        # dataset). One thread in the parent before the fork means no pool to inherit; the
        # per-image work is tiny, and the workers already run in parallel.
        cv2.setNumThreads(1)
    return kw


def build_train_loader(cfg, items: List[Item]) -> DataLoader:
    """Train loader over `items` with the sampler of DATALOADER.SAMPLER.

    Batch size per process = SOLVER.IMS_PER_BATCH / world size (when torch.distributed is
    initialised). ``loader.sampler`` has ``set_epoch(epoch, start_batch=0)``. The sampler gives
    every sample a seed from its position in the epoch and the dataset seeds the augmentation
    with it, so the workers can persist between epochs (no restart each epoch) and a run
    resumed anywhere, even mid-epoch, draws the same augmentations as an uninterrupted one.
    """
    rank, world = get_rank(), get_world_size()
    batch = _process_batch(cfg)
    kind = str(cfg.DATALOADER.SAMPLER).lower()
    if kind == "identity":
        sampler = IdentitySampler(
            [it[1] for it in items], batch, cfg.DATALOADER.NUM_INSTANCE, cfg.SEED, rank, world, sample_seeds=True
        )
    elif kind == "random":
        sampler = ShuffleSampler(len(items), batch, cfg.SEED, rank, world, sample_seeds=True)
    else:
        raise ValueError(f"Unknown DATALOADER.SAMPLER {cfg.DATALOADER.SAMPLER!r}. Valid: {', '.join(SAMPLERS)}.")
    return _train_loader(cfg, items, sampler, batch)


def _process_batch(cfg) -> int:
    """SOLVER.IMS_PER_BATCH divided over the processes (an error when it does not divide)."""
    total, world = int(cfg.SOLVER.IMS_PER_BATCH), get_world_size()
    if total % world:
        raise ValueError(f"SOLVER.IMS_PER_BATCH={total} is not divisible by the {world} processes.")
    return total // world


def _train_loader(cfg, items: List[Item], sampler: Any, batch: int) -> DataLoader:
    kw = _loader_kwargs(cfg)
    if is_tracklet_items(items):
        # A sample is a clip of DATALOADER.VIDEO.SEQ_LEN frames; IMS_PER_BATCH counts clips.
        video = cfg.DATALOADER.VIDEO
        dataset = TrackletDataset(items, build_transforms(cfg, is_train=True), str(video.SAMPLER), video.SEQ_LEN,
                                  video.STRIDE, int(cfg.SEED))
        kw["collate_fn"] = collate_tracklets
    else:
        dataset = ImageDataset(items, build_transforms(cfg, is_train=True), bool(cfg.DATASETS.SKIP_CORRUPT))
    # Each iter(loader) draws a base seed for its workers; from its own generator it leaves the
    # process's generator (dropout's stream) alone, which a resume mid-epoch must find intact.
    generator = torch.Generator().manual_seed(int(cfg.SEED))
    return StopSafeDataLoader(dataset, batch_size=batch, sampler=sampler, drop_last=True, generator=generator,
                      persistent_workers=kw["num_workers"] > 0, **kw)


def build_pseudo_label_loader(cfg, items: List[Item]) -> DataLoader:
    """Train loader of learning without labels: UDA.ITERS_PER_EPOCH P x K batches per epoch over
    pseudo-labels that ``loader.sampler.set_labels(labels)`` sets before each epoch
    (:class:`PseudoLabelSampler`); the items' own pids are never the targets."""
    batch = _process_batch(cfg)
    sampler = PseudoLabelSampler(batch, int(cfg.DATALOADER.NUM_INSTANCE), int(cfg.UDA.ITERS_PER_EPOCH), int(cfg.SEED),
                                 get_rank(), get_world_size())
    return _train_loader(cfg, items, sampler, batch)


def build_test_loader(cfg, query: List[Item], gallery: List[Item]) -> DataLoader:
    """Loader over ``query + gallery`` in that order (no shuffling), TEST.IMS_PER_BATCH per batch.

    An unreadable image always raises CorruptImageError naming it, even with SKIP_CORRUPT.
    """
    # Never replace a bad image here: the replacement (another image of the same pid, often
    # from the other split) would silently corrupt the evaluation, e.g. a query turning into
    # one of its gallery matches. With SKIP_CORRUPT, build_test_data has already dropped the
    # images that were bad at start-up; one that breaks later must stop the run.
    dataset = ImageDataset(list(query) + list(gallery), build_transforms(cfg, is_train=False), skip_corrupt=False)
    return StopSafeDataLoader(dataset, batch_size=int(cfg.TEST.IMS_PER_BATCH), shuffle=False, drop_last=False,
                      **_loader_kwargs(cfg))


def check_dataset_names(names, key: str) -> None:
    """Raise ConfigError naming `key` for a dataset name that is not registered (image or video)."""
    unknown = [n for n in names if n not in DATASET_REGISTRY and n not in VIDEO_DATASET_REGISTRY]
    if unknown:
        raise ConfigError(
            f"{key} {list(names)}: unknown dataset {', '.join(map(repr, unknown))}. Valid names: "
            f"{', '.join(DATASET_REGISTRY.names())}; video: {', '.join(VIDEO_DATASET_REGISTRY.names())}. "
            "Fix the spelling in the config file or the override."
        )


def check_video_sampling(cfg) -> None:
    """Raise ConfigError naming the key for a bad DATALOADER.VIDEO.SAMPLER, SEQ_LEN or STRIDE."""
    video = cfg.DATALOADER.VIDEO
    try:
        check_sampling(str(video.SAMPLER), video.SEQ_LEN, video.STRIDE)
    except ValueError as e:  # UnknownNameError is one too, its message listing the samplers
        raise ConfigError(str(e)) from None


def check_one_kind(names, key: str) -> None:
    """Raise ConfigError naming `key` when it mixes image and video datasets: a batch is either
    images or clips, and a model is tested on the kind of data it pools."""
    video = [str(n) for n in names if is_video_dataset(n)]
    if video and len(video) != len(list(names)):
        images = [str(n) for n in names if not is_video_dataset(n)]
        raise ConfigError(
            f"{key} {list(names)} mixes video datasets ({', '.join(video)}) with image datasets ({', '.join(images)}); "
            "train or test on one kind at a time."
        )
