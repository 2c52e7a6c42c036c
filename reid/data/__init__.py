"""Data: datasets, transforms, samplers and loaders (imports nothing above reid.config)."""
from .build import (
    build_pseudo_label_loader,
    TestSet,
    TrainData,
    build_test_data,
    build_test_set,
    build_test_loader,
    build_train_data,
    build_train_loader,
    dataset_kwargs,
)
from .datasets import DATASET_REGISTRY, ReIDDataset, build_dataset
from .image_io import CorruptImageError, read_image
from .samplers import IdentitySampler, PseudoLabelSampler, ShuffleSampler
from .transforms import build_transforms

__all__ = [
    "DATASET_REGISTRY",
    "CorruptImageError",
    "IdentitySampler",
    "ReIDDataset",
    "PseudoLabelSampler",
    "ShuffleSampler",
    "TestSet",
    "TrainData",
    "build_dataset",
    "build_pseudo_label_loader",
    "build_test_data",
    "build_test_loader",
    "build_test_set",
    "build_train_data",
    "build_train_loader",
    "build_transforms",
    "dataset_kwargs",
    "read_image",
]
