"""Seeding, device resolution and RNG-state capture: the small pieces a repeatable run needs."""
from __future__ import annotations

import random
from typing import Any, Dict, Optional

import numpy as np
import torch

# SeedSequence output is 32-bit; numpy's legacy seeding only accepts values below 2**32.
_SEED_MASK = 0xFFFF_FFFF


def derive_seed(*parts: int) -> int:
    """Return a well-mixed 32-bit seed that is a pure function of integer `parts`.

    Mixing via numpy's SeedSequence (rather than e.g. ``seed + epoch``) keeps the streams of
    neighbouring (seed, epoch, rank) tuples unrelated, so seed 0 epoch 1 never equals seed 1
    epoch 0.
    """
    if any(int(p) < 0 for p in parts):
        raise ValueError(f"Seed parts must be non-negative integers, got {parts!r}.")
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0]) & _SEED_MASK


def seed_everything(seed: int, rank: int = 0) -> int:
    """Seed Python's `random`, NumPy's global RNG and torch (CPU and every CUDA device).

    Each process of a distributed run gets its own stream (`rank` is mixed in), so ranks do
    not draw identical augmentations. Returns the seed actually applied.
    """
    value = derive_seed(int(seed), int(rank))
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)  # also seeds every CUDA device
    return value


def resolve_device(spec: str) -> torch.device:
    """Turn ``MODEL.DEVICE`` ("auto", "cpu", "cuda", "cuda:N") into a `torch.device`.

    "auto" picks CUDA when it is available, else the CPU. Asking for CUDA on a machine
    without it is an error rather than a silent CPU fallback: a run configured for a GPU
    would otherwise take hours longer without telling anyone. A CUDA device always comes
    back with its index ("cuda" -> the current device, normally ``cuda:0``), because
    ``torch.cuda.set_device`` and DistributedDataParallel refuse a device without one.
    """
    text = str(spec).strip().lower()
    if text in ("", "auto"):
        text = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(text)
    except RuntimeError as e:
        raise ValueError(
            f"MODEL.DEVICE {spec!r} is not a device; use 'auto', 'cpu', 'cuda' or 'cuda:N'."
        ) from e
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"MODEL.DEVICE is {spec!r} but CUDA is not available on this machine; "
                "set MODEL.DEVICE cpu (or auto)."
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(
                f"MODEL.DEVICE is {spec!r} but only {torch.cuda.device_count()} CUDA device(s) "
                "exist; pick an index below that."
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    elif device.type != "cpu":
        raise ValueError(f"MODEL.DEVICE {spec!r} is not supported; use 'auto', 'cpu', 'cuda' or 'cuda:N'.")
    return device


def get_rng_state() -> Dict[str, Any]:
    """Capture Python, NumPy, torch and CUDA RNG states as plain values and tensors.

    Everything is a tensor, int, float, str or None so that a checkpoint holding it loads
    with ``torch.load(..., weights_only=True)`` (NumPy arrays and Python's state tuple would
    not).
    """
    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    state: Dict[str, Any] = {
        "python": {
            "version": int(py_version),
            "internal": torch.tensor(py_internal, dtype=torch.int64),
            "gauss_next": py_gauss,
        },
        "numpy": {
            "name": str(np_name),
            "keys": torch.from_numpy(np.asarray(np_keys, dtype=np.int64)),
            "pos": int(np_pos),
            "has_gauss": int(np_has_gauss),
            "cached_gaussian": float(np_gauss),
        },
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }
    return state


def set_rng_state(state: Dict[str, Any]) -> None:
    """Restore the RNG states captured by :func:`get_rng_state`.

    CUDA states are restored only when the number of visible devices matches; a checkpoint
    taken on another machine still resumes, with fresh CUDA streams.
    """
    py = state["python"]
    random.setstate((py["version"], tuple(int(v) for v in py["internal"].tolist()), py["gauss_next"]))
    nps = state["numpy"]
    np.random.set_state(
        (
            nps["name"],
            nps["keys"].numpy().astype(np.uint32),
            int(nps["pos"]),
            int(nps["has_gauss"]),
            float(nps["cached_gaussian"]),
        )
    )
    torch.set_rng_state(state["torch"])
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of scalar parameters of `model` (all, or only those with requires_grad)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def unwrap_model(model: torch.nn.Module) -> torch.nn.Module:
    """The plain module inside a DistributedDataParallel / DataParallel wrapper (or `model`)."""
    inner: Optional[torch.nn.Module] = getattr(model, "module", None)
    if isinstance(model, (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)) and inner is not None:
        return inner
    return model


__all__ = [
    "count_parameters",
    "derive_seed",
    "get_rng_state",
    "resolve_device",
    "seed_everything",
    "set_rng_state",
    "unwrap_model",
]
