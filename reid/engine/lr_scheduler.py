"""Per-iteration learning-rate schedule: linear warmup, then multistep or cosine decay.

The learning rate of every parameter group at (0-based) iteration ``i`` is
``group_base_lr * factor(i)`` with ``factor(i) = warmup(i) * decay(i)``:

* ``warmup(i) = WARMUP_FACTOR + (1 - WARMUP_FACTOR) * i / WARMUP_ITERS`` for ``i < WARMUP_ITERS``,
  else 1;
* multistep: ``decay(i) = GAMMA ** (number of STEPS s with i >= s * iters_per_epoch)``
  (``STEPS`` are epochs, so the drop happens at the first iteration of that epoch);
* cosine: ``decay(i) = MIN_LR_FACTOR + (1 - MIN_LR_FACTOR) * (1 + cos(pi * i / T)) / 2`` with
  ``T = MAX_EPOCH * iters_per_epoch``.

The scheduler is stepped once per iteration and its state (the iteration counter and the
schedule's parameters) goes into the checkpoint, so a resumed run continues the same curve.
"""
from __future__ import annotations

import bisect
import math
from typing import List, Sequence

import torch
from torch.optim.lr_scheduler import LRScheduler

SCHEDULES = ("multistep", "cosine")


class WarmupDecayLR(LRScheduler):
    """Warmup + multistep/cosine schedule evaluated in closed form at every iteration.

    Args:
        optimizer: the optimizer whose groups' ``initial_lr`` are scaled.
        sched: "multistep" or "cosine".
        max_iters: total training iterations (``MAX_EPOCH * iters_per_epoch``).
        iters_per_epoch: iterations in one epoch (to turn epoch ``steps`` into iterations).
        steps: multistep decay epochs.
        gamma: multistep decay factor.
        min_lr_factor: cosine floor as a fraction of the base lr.
        warmup_iters: warmup length in iterations (0 = none).
        warmup_factor: factor at iteration 0 of the warmup.
        last_epoch: index of the last iteration done (-1 = fresh; torch's name for it).
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        sched: str,
        max_iters: int,
        iters_per_epoch: int,
        steps: Sequence[int] = (),
        gamma: float = 0.1,
        min_lr_factor: float = 0.0,
        warmup_iters: int = 0,
        warmup_factor: float = 0.1,
        last_epoch: int = -1,
    ) -> None:
        self.sched = str(sched).lower()
        if self.sched not in SCHEDULES:
            raise ValueError(f"Unknown SOLVER.SCHED {sched!r}. Valid names: {', '.join(SCHEDULES)}.")
        if iters_per_epoch <= 0:
            raise ValueError(
                f"iters_per_epoch must be > 0, got {iters_per_epoch}: the training loader yields no "
                "batch; check the dataset size against SOLVER.IMS_PER_BATCH."
            )
        if warmup_iters < 0 or not 0.0 <= warmup_factor <= 1.0:
            raise ValueError(
                f"SOLVER.WARMUP_ITERS must be >= 0 and SOLVER.WARMUP_FACTOR in [0, 1]; got "
                f"{warmup_iters} and {warmup_factor}."
            )
        if list(steps) != sorted(steps):
            raise ValueError(f"SOLVER.STEPS must be increasing epochs, got {list(steps)}.")
        self.max_iters = int(max_iters)
        self.iters_per_epoch = int(iters_per_epoch)
        # Plain lists/floats keep state_dict() loadable with torch.load(weights_only=True).
        self.step_iters: List[int] = [int(s) * self.iters_per_epoch for s in steps]
        self.gamma = float(gamma)
        self.min_lr_factor = float(min_lr_factor)
        self.warmup_iters = int(warmup_iters)
        self.warmup_factor = float(warmup_factor)
        super().__init__(optimizer, last_epoch)

    def factor(self, it: int) -> float:
        """The multiplier of every group's base lr at iteration `it` (closed form)."""
        warm = 1.0
        if it < self.warmup_iters:
            warm = self.warmup_factor + (1.0 - self.warmup_factor) * (it / self.warmup_iters)
        if self.sched == "multistep":
            decay = self.gamma ** bisect.bisect_right(self.step_iters, it)
        else:
            progress = min(it, self.max_iters) / max(1, self.max_iters)
            decay = self.min_lr_factor + (1.0 - self.min_lr_factor) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return warm * decay

    def get_lr(self) -> List[float]:  # type: ignore[override]
        f = self.factor(self.last_epoch)
        return [base * f for base in self.base_lrs]


def build_lr_scheduler(cfg, optimizer: torch.optim.Optimizer, iters_per_epoch: int) -> WarmupDecayLR:
    """The schedule of ``cfg.SOLVER`` for a loader of `iters_per_epoch` batches."""
    solver = cfg.SOLVER
    return WarmupDecayLR(
        optimizer,
        sched=str(solver.SCHED),
        max_iters=int(solver.MAX_EPOCH) * int(iters_per_epoch),
        iters_per_epoch=int(iters_per_epoch),
        steps=[int(s) for s in solver.STEPS],
        gamma=float(solver.GAMMA),
        min_lr_factor=float(solver.MIN_LR_FACTOR),
        warmup_iters=int(solver.WARMUP_ITERS),
        warmup_factor=float(solver.WARMUP_FACTOR),
    )


__all__ = ["SCHEDULES", "WarmupDecayLR", "build_lr_scheduler"]
