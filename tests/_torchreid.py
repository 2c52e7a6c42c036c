"""torchreid checkpoints for tests, rebuilt from seeds; reference features from torchreid's code.

``tests/fixtures/torchreid_reference.npz`` was written by ``benchmarks/compare_torchreid.py
--fixture`` with torchreid 0.2.5's own models and its ``FeatureExtractor``: for each
architecture the state-dict layout (keys and shapes, no values) and the features torchreid
computed for the seeded crops saved as PNG files. The weights and crops are rebuilt here from
the same seeds with the script's own functions, so the stored file holds no weights.
"""
from __future__ import annotations

import os
from types import ModuleType
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from tests._tools import load_benchmark, load_fixture

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

State = Dict[str, torch.Tensor]


def bench() -> ModuleType:
    """benchmarks/compare_torchreid.py as a module."""
    return load_benchmark("compare_torchreid")


def reference() -> Dict[str, np.ndarray]:
    return load_fixture("torchreid_reference")


def arch_names() -> Tuple[str, ...]:
    return tuple(sorted({k.split("/")[0] for k in reference() if "/" in k}))


def size() -> Tuple[int, int]:
    """The model input size the fixture's features were computed at."""
    return tuple(int(v) for v in reference()["size"])


def layout(name: str) -> List[Tuple[str, Tuple[int, ...]]]:
    """torchreid's (key, shape) state-dict layout of architecture `name`, in its order."""
    return bench().layout_from(reference(), name)


def torchreid_state(name: str) -> State:
    """The seeded torchreid state dict of `name` (identical to the one torchreid was run with)."""
    return bench().synthesize_state(layout(name))


def features(name: str) -> np.ndarray:
    """torchreid's FeatureExtractor features of :func:`write_images`' files (not normalised)."""
    return reference()[f"{name}/features"]


def write_images(folder: str) -> List[str]:
    """The fixture's crops as PNG files in `folder` (the files torchreid read)."""
    _, sizes, ext = bench().SMALL
    return bench().write_crops(str(folder), sizes, ext)


def config(name: str) -> str:
    return os.path.join(ROOT, bench().ARCHS[name]["config"])


def opts(name: str) -> list:
    """Config overrides for `name`: the architecture's extra options and the fixture's input size."""
    return bench().arch_opts(name, size())


def write_checkpoint(path: str, name: str, edit: Optional[Callable[[State], State]] = None,
                     legacy: bool = False) -> str:
    """Save `name`'s seeded state as torchreid's engine does ({"state_dict", "epoch", "rank1", "optimizer"})."""
    state = torchreid_state(name)
    if edit is not None:
        state = edit(state)
    optimizer = {"state": {}, "param_groups": [{"lr": 0.0015, "amsgrad": True, "params": list(range(len(state)))}]}
    torch.save({"state_dict": state, "epoch": 60, "rank1": np.float32(0.5), "optimizer": optimizer}, path,
               _use_new_zipfile_serialization=not legacy)
    return str(path)


def compare(ours: np.ndarray, theirs: np.ndarray) -> Dict[str, float]:
    return bench().shared.compare(ours, theirs)
