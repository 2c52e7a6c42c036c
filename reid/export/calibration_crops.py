"""The images an int8 export is calibrated on (``--calibration``) and the labelled set its accuracy is
checked on (``--check-on``), read with the model's test transform.

A source is a dataset name (read from ``DATASETS.ROOT`` as training reads it: its training images for
calibration, its query/gallery for the check) or paths: folders, list files, image files for
calibration; a query and a gallery (folders of identity sub-folders, or list files
``path identity [camid]``) for the check.
"""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from reid.data.build import build_test_data, build_test_loader, dataset_kwargs
from reid.data.dataset_wrappers import ImageDataset
from reid.data.datasets import DATASET_REGISTRY, Item, build_dataset
from reid.data.sources import collect_entries
from reid.data.transforms import build_transforms

from .options import DEFAULT_CALIBRATION_IMAGES, MIN_CALIBRATION_IMAGES


def _dataset_name(sources: Sequence[str]) -> str:
    """The registered dataset `sources` names (one word that is not a path), else ''."""
    if len(sources) == 1 and not os.path.exists(sources[0]) and str(sources[0]).lower() in DATASET_REGISTRY:
        return str(sources[0]).lower()
    return ""


def calibration_paths(cfg, sources: Sequence[str]) -> Tuple[List[str], str]:
    """The candidate calibration images of `sources` and a description of where they came from."""
    name = _dataset_name(sources)
    if name:
        ds = build_dataset(name, cfg.DATASETS.ROOT, **dataset_kwargs(cfg, name))
        paths = [item[0] for item in ds.train] or [item[0] for item in ds.gallery]
        if not paths:
            raise ValueError(f"--calibration {name}: the dataset has no images under {cfg.DATASETS.ROOT}.")
        return paths, f"dataset {name} ({cfg.DATASETS.ROOT})"
    # A folder named twice (or a file in a folder also named) is one set of crops, each crop once.
    paths = list(dict.fromkeys(os.path.realpath(p) for p in collect_entries(sources).paths))
    return paths, ", ".join(str(s) for s in sources)


def load_calibration(cfg, sources: Sequence[str], num: int = DEFAULT_CALIBRATION_IMAGES,
                     seed: int = 0) -> Tuple[np.ndarray, str]:
    """`num` images of `sources` (all when there are fewer; chosen with `seed`, in file order) as the
    model's test transform gives them: uint8 ``[N, 3, H, W]`` at ``cfg.INPUT.SIZE_TEST``; and a
    description of the source. An unreadable image is an error naming it."""
    paths, where = calibration_paths(cfg, sources)
    if len(paths) < MIN_CALIBRATION_IMAGES or num < MIN_CALIBRATION_IMAGES:
        raise ValueError(f"--calibration {where}: {min(num, len(paths))} image; int8 needs at least "
                         f"{MIN_CALIBRATION_IMAGES} (some calibrate, one held out checks the int8 features against "
                         "fp32): give more crops.")
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(len(paths), size=min(num, len(paths)), replace=False))
    items: List[Item] = [(paths[i], 0, 0) for i in chosen]
    loader = DataLoader(ImageDataset(items, build_transforms(cfg, is_train=False)), batch_size=64, shuffle=False)
    batches = [b["images"] for b in loader]
    pixels = torch.cat(batches).round().clamp(0, 255).to(torch.uint8).numpy()
    return pixels, f"{len(pixels)} of {len(paths)} images of {where}, seed {seed}"


def check_set(cfg, sources: Sequence[str]) -> Tuple[str, List[Item], List[Item]]:
    """(name, query, gallery) of ``--check-on``: a dataset name, or a query and a gallery source."""
    cfg = cfg.clone()
    cfg.defrost()
    if len(sources) == 2:
        cfg.DATASETS.FOLDERS.QUERY_PATH, cfg.DATASETS.FOLDERS.GALLERY_PATH = str(sources[0]), str(sources[1])
        query, gallery = build_test_data(cfg, "folders", log=False)
        return f"{sources[0]} + {sources[1]}", query, gallery
    # One source is a dataset name even where a folder of that name exists: one folder cannot be
    # both a query and a gallery.
    if len(sources) == 1 and str(sources[0]).lower() in DATASET_REGISTRY:
        name = str(sources[0]).lower()
        query, gallery = build_test_data(cfg, name, log=False)
        return name, query, gallery
    raise ValueError(f"--check-on takes a dataset name ({', '.join(DATASET_REGISTRY.names())}) or a query and a "
                     f"gallery (folders of identity sub-folders, or list files 'path identity [camid]'); got "
                     f"{' '.join(str(s) for s in sources)}.")


def check_loader(cfg, query: List[Item], gallery: List[Item]) -> DataLoader:
    """The test loader over ``query + gallery`` (no worker processes: the export is a short job)."""
    cfg = cfg.clone()
    cfg.defrost()
    cfg.DATALOADER.NUM_WORKERS = 0
    return build_test_loader(cfg, query, gallery)


__all__ = ["DEFAULT_CALIBRATION_IMAGES", "calibration_paths", "check_loader", "check_set", "load_calibration"]
