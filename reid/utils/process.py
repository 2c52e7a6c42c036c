"""Who this process is (rank, world size) and how its random streams are seeded.

The lowest layer: data, engine and evaluation all ask here, so no layer has to import a
higher one (or keep its own copy) to learn its rank or to seed a stream.

Seeding scheme (docs/training.md, "Repeatability"):
- ``derive_seed(*parts)`` mixes integers into one 32-bit seed; neighbouring tuples give
  unrelated streams (seed 0 epoch 1 never equals seed 1 epoch 0).
- ``sample_seeds(base, positions)`` gives every training sample its own seed from its
  position in the epoch, and ``seed_sample(seed)`` seeds the process's RNGs with it just before
  that sample's augmentation. Augmentation is then a pure function of (SEED, epoch, rank,
  position): it does not depend on which loader worker draws the sample, on whether the
  workers persist between epochs, or on a resume in the middle of an epoch.
"""
from __future__ import annotations

import random
from typing import Any, Dict, Tuple

import numpy as np
import torch
import torch.distributed as dist

# SeedSequence output is 32-bit; numpy's legacy seeding only accepts values below 2**32.
_SEED_MASK = 0xFFFF_FFFF


def get_rank() -> int:
    """This process's rank in the initialised process group (0 without one)."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    """Processes in the initialised process group (1 without one)."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def shard_bounds(total: int, rank: int, world_size: int) -> Tuple[int, int]:
    """``[lo, hi)`` of `rank`'s contiguous shard of `total` items; sizes differ by at most one.

    Processes of a torchrun job that split a list this way and concatenate their results in
    rank order get the single-process order back.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in a job of {world_size} processes.")
    base, extra = divmod(int(total), int(world_size))
    lo = rank * base + min(rank, extra)
    return lo, lo + base + (1 if rank < extra else 0)


def is_main_process() -> bool:
    """Whether this process writes files and logs (rank 0)."""
    return get_rank() == 0


def derive_seed(*parts: int) -> int:
    """Return a well-mixed 32-bit seed that is a pure function of integer `parts`.

    Mixing via numpy's SeedSequence (rather than e.g. ``seed + epoch``) keeps the streams of
    neighbouring (seed, epoch, rank) tuples unrelated.
    """
    if any(int(p) < 0 for p in parts):
        raise ValueError(f"Seed parts must be non-negative integers, got {parts!r}.")
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0]) & _SEED_MASK


def sample_seeds(base: int, positions: np.ndarray) -> np.ndarray:
    """32-bit seeds for the samples at `positions` of a stream seeded `base` (vectorised).

    splitmix64's finaliser over ``base * 2**32 + position``: consecutive positions get
    unrelated seeds, at a cost of a few nanoseconds each (a SeedSequence per sample would cost
    microseconds on every image of every epoch).
    """
    z = (np.uint64(int(base) & _SEED_MASK) << np.uint64(32)) + np.asarray(positions, dtype=np.uint64)
    with np.errstate(over="ignore"):  # the mixing relies on wrap-around
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z & np.uint64(_SEED_MASK)).astype(np.int64)


def seed_sample(seed: int) -> None:
    """Seed the RNGs a transform may use (torch's CPU generator, `random`, NumPy) for one sample.

    Only the CPU generator: augmentation runs on CPU tensors, and re-seeding every CUDA device
    per image would cost a device call each time.
    """
    seed = int(seed) & _SEED_MASK
    torch.random.default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def seed_everything(seed: int, rank: int = 0) -> int:
    """Seed Python's `random`, NumPy's global RNG and torch (CPU and every CUDA device).

    Each process of a distributed run gets its own stream (`rank` is mixed in). Returns the
    seed actually applied.
    """
    value = derive_seed(int(seed), int(rank))
    random.seed(value)
    np.random.seed(value)
    torch.manual_seed(value)  # also seeds every CUDA device
    return value


def get_rng_state() -> Dict[str, Any]:
    """Capture Python, NumPy, torch and CUDA RNG states as plain values and tensors.

    Everything is a tensor, int, float, str or None so that a checkpoint holding it loads
    with ``torch.load(..., weights_only=True)`` (NumPy arrays and Python's state tuple would
    not).
    """
    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    return {
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


__all__ = [
    "shard_bounds",
    "derive_seed",
    "get_rank",
    "get_rng_state",
    "get_world_size",
    "is_main_process",
    "sample_seeds",
    "seed_everything",
    "seed_sample",
    "set_rng_state",
]
