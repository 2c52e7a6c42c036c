"""Datasets: one module per dataset, all registered in DATASET_REGISTRY."""
from __future__ import annotations

from .base import (
    DATASET_REGISTRY,
    DatasetFormatError,
    DatasetNotFoundError,
    Item,
    ReIDDataset,
    combine_all,
    relabel_pids,
)
from .cuhk03 import CUHK03
from .custom import CustomDataset
from .dukemtmc import DukeMTMC
from .folders import FoldersDataset
from .market1501 import Market1501
from .msmt17 import MSMT17
from .synthetic import SyntheticDataset
from .unlabelled import UnlabelledDataset
from .vehicleid import VehicleID
from .veri import VeRi
from .veriwild import VeRiWild


def build_dataset(name: str, root: str = "datasets", **kwargs) -> ReIDDataset:
    """Build the dataset registered as `name` from folder `root`.

    `kwargs` go to the dataset's constructor (see ``reid.data.build.dataset_kwargs`` for the
    config keys). An unknown name raises KeyError listing the valid names.
    """
    return DATASET_REGISTRY.get(name)(root=root, **kwargs)


__all__ = [
    "CUHK03",
    "DATASET_REGISTRY",
    "CustomDataset",
    "DatasetFormatError",
    "DatasetNotFoundError",
    "DukeMTMC",
    "FoldersDataset",
    "Item",
    "MSMT17",
    "Market1501",
    "ReIDDataset",
    "SyntheticDataset",
    "UnlabelledDataset",
    "VeRi",
    "VeRiWild",
    "VehicleID",
    "build_dataset",
    "combine_all",
    "relabel_pids",
]
