"""Helpers shared by several test folders: tools/ and benchmarks/ scripts as modules, small configs."""
import functools
import importlib.util
import os
from types import ModuleType
from typing import Dict

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOLS = os.path.join(ROOT, "tools")

#: ``KEY VALUE`` overrides for a tiny run on the synthetic dataset (4 + 4 identities, 64x32, CPU).
TINY_DATA = [
    "DATASETS.NAMES", "[synthetic]", "DATASETS.TESTS", "[synthetic]", "DATALOADER.NUM_WORKERS", "0",
    "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "4", "DATASETS.SYNTHETIC.NUM_TEST_IDS", "4",
    "DATASETS.SYNTHETIC.NUM_CAMERAS", "2", "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "2",
    "DATASETS.SYNTHETIC.NUM_DISTRACTORS", "0", "DATASETS.SYNTHETIC.IMAGE_SIZE", "[64, 32]",
    "INPUT.SIZE_TEST", "[64, 32]", "INPUT.SIZE_TRAIN", "[64, 32]", "MODEL.DEVICE", "cpu", "TEST.IMS_PER_BATCH", "8",
]


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py as a module, under a private name so that it cannot shadow a package."""
    spec = importlib.util.spec_from_file_location(f"_tool_{name}", os.path.join(TOOLS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def load_benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (benchmarks/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", os.path.join(ROOT, "benchmarks", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def load_fixture(name: str) -> Dict[str, np.ndarray]:
    """The arrays of tests/fixtures/<name>.npz."""
    with np.load(os.path.join(ROOT, "tests", "fixtures", f"{name}.npz")) as data:
        return {k: data[k] for k in data.files}


def backbone_cfg(name: str, **backbone):
    """Default config with MODEL.BACKBONE.NAME `name`, no ImageNet weights, and `backbone` keys set."""
    from reid.config import get_cfg

    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = name
    cfg.MODEL.BACKBONE.PRETRAINED = False
    for key, value in backbone.items():
        setattr(cfg.MODEL.BACKBONE, key, value)
    return cfg

