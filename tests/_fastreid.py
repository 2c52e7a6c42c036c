"""fast-reid checkpoints for tests, rebuilt from seeds; reference features from fast-reid's code.

``tests/fixtures/fastreid_reference.npz`` was written by ``benchmarks/compare_fastreid.py
--fixture`` with fast-reid 1.4.0's own models: for each architecture the state-dict layout
(keys and shapes, no values) and the features fast-reid computed for the seeded images.
The weights are rebuilt here from the same seed with the script's own synthesis function,
so the stored file stays small and holds no weights.
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from tests._tools import load_benchmark, load_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARCH_NAMES = ("bot_R50", "bot_R50-ibn", "sbs_R50", "sbs_R50-ibn", "mgn_R50", "mgn_R50-ibn", "sbs_R50-ibn_veri",
              "bot_R50-ibn_vehicleid")

State = Dict[str, torch.Tensor]


def bench() -> ModuleType:
    """benchmarks/compare_fastreid.py as a module."""
    return load_benchmark("compare_fastreid")


def reference() -> Dict[str, np.ndarray]:
    return load_fixture("fastreid_reference")


def layout(name: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """fast-reid's (key, shape) state-dict layout of architecture `name`, in its order."""
    return bench().layout_from(reference(), name)


def fastreid_state(name: str) -> State:
    """The seeded fast-reid state dict of `name` (identical to the one fast-reid was run with)."""
    return bench().synthesize_state(layout(name))


def size(name: str) -> Tuple[int, int]:
    return tuple(int(v) for v in reference()[f"{name}/size"])


def images(name: str) -> torch.Tensor:
    """The seeded uint8 images ``[N, 3, H, W]`` fast-reid's features were computed on."""
    n = reference()[f"{name}/features"].shape[0]
    return bench().synthesize_images(n, *size(name))


def features(name: str) -> np.ndarray:
    """fast-reid's eval-mode features of :func:`images` (not normalised)."""
    return reference()[f"{name}/features"]


def config(name: str) -> str:
    return os.path.join(ROOT, bench().ARCHS[name]["config"])


def opts(name: str) -> list:
    """Config overrides for `name`: the architecture's extra options and the fixture's input size."""
    h, w = size(name)
    return list(bench().ARCHS[name]["opts"]) + ["INPUT.SIZE_TEST", [h, w], "MODEL.BACKBONE.PRETRAINED", False,
                                                 "MODEL.DEVICE", "cpu"]


def write_checkpoint(path: str, name: str, edit: Optional[Callable[[State], State]] = None) -> str:
    """Save `name`'s seeded state as fast-reid's trainer does ({"model", "optimizer", "iteration"})."""
    state = fastreid_state(name)
    if edit is not None:
        state = edit(state)
    optimizer = {"state": {}, "param_groups": [{"lr": 3.5e-4, "params": list(range(len(state)))}]}
    torch.save({"model": state, "optimizer": optimizer, "iteration": 1234}, path)
    return str(path)


def compare(ours: np.ndarray, theirs: np.ndarray) -> Dict[str, float]:
    return bench().compare(ours, theirs)
