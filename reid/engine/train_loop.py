"""The training loop: epochs of optimisation steps, with hooks called around them.

The loop only runs steps (forward, loss, NaN guard, backward, clipping, optimizer step) and
keeps the position (epoch, batch, iteration). Everything around a step is a hook
(reid/engine/hooks.py): the learning-rate schedule, freezing, seeding, evaluation,
checkpoints, logging, signals. Hooks are called in registration order::

    before_train
      before_epoch                  epoch = index of the epoch about to run
        before_step  run_step  after_step    (iter = steps completed, after the step)
      after_epoch                   epoch still the finished one; epoch + 1 are complete
    after_train                     also after an error (trainer.error) or a stop

``trainer.request_stop()`` ends the run after the current step (several processes: after the
step whose single all-reduce carries the request to all of them).
"""
from __future__ import annotations

import inspect
import math
import signal
from contextlib import nullcontext
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

from reid.modeling import takes_camera_ids
from reid.utils.process import get_rank, get_world_size
from reid.utils.stop_request import STOP_SIGNALS, StopRequested

from .errors import NonFiniteLossError
from .hook_base import HookBase
from .placement import DeviceSetup


class TrainLoop:
    """Runs epochs of steps of `module` on `loader` and calls the registered hooks.

    Args:
        model: the plain model (what is evaluated and saved).
        module: what a step calls: `model`, or its DistributedDataParallel wrapper.
        optimizer, scaler: stepped by :meth:`run_step` (the scaler is a no-op unless fp16).
        loader: yields dict batches with ``images`` and ``targets``; its sampler may have
            ``set_epoch(epoch, start_batch=0)`` (otherwise the loop skips done batches itself).
        setup: device and AMP settings (:mod:`reid.engine.placement`).
        max_epoch: epochs in the run; clip_grad_norm: max gradient norm (0 = no clipping).

    Attributes hooks read: ``epoch``, ``iter`` (steps completed), ``max_iter``,
    ``iters_per_epoch``, ``last_metrics``, ``eval_model`` (what evaluation and checkpoints use;
    a hook may point it elsewhere), ``eval_records``, ``log_records`` (for metrics.jsonl), ``error``.
    """

    def __init__(self, model: nn.Module, module: nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: torch.amp.GradScaler, loader: Any, setup: DeviceSetup, max_epoch: int,
                 clip_grad_norm: float = 0.0) -> None:
        self.model, self.module, self.eval_model = model, module, model
        self.optimizer, self.scaler, self.loader, self.setup = optimizer, scaler, loader, setup
        self.device, self.clip_grad_norm = setup.device, float(clip_grad_norm)
        self.iters_per_epoch, self.max_epoch = len(loader), int(max_epoch)
        self.max_iter = self.max_epoch * self.iters_per_epoch
        self.rank, self.world_size = get_rank(), get_world_size()
        # index of the current epoch (completed epochs between epochs), its batches done, steps done
        self.epoch, self.start_batch, self.iter = 0, 0, 0
        self.last_metrics: Dict[str, Any] = {}
        self.eval_records: List[Dict[str, Any]] = []
        self.log_records: List[Dict[str, Any]] = []
        self.hooks: List[HookBase] = []
        self.error: Optional[BaseException] = None
        self.stop_reason: Optional[str] = None
        self.stop_signal: Optional[int] = None
        self._agreed_stop = self._epoch_ending = False
        # (DDP) the stop request as device flags, one per stop signal and one for a hook's request,
        # set in place (no host-to-device copy per step); summed over the processes, they tell
        # every rank which signal stopped the job, so that all end with the same exit code.
        self._stop_flags = torch.zeros(len(STOP_SIGNALS) + 1, device=self.device)

    def register_hooks(self, hooks: Sequence[HookBase]) -> None:
        """Append `hooks` (called in this order) and give each a reference to this loop."""
        for hook in hooks:
            if not isinstance(hook, HookBase):
                raise TypeError(f"Training hooks must derive from reid.engine.HookBase, got {type(hook).__name__}.")
            hook.trainer = self
            self.hooks.append(hook)

    def request_stop(self, reason: str = "requested by a hook", signum: Optional[int] = None) -> None:
        """End the run after the current step; a checkpoint there lets ``--resume`` continue."""
        if self.stop_reason is None:
            self.stop_reason, self.stop_signal = str(reason), signum

    def position(self) -> Tuple[int, int]:
        """(epoch, batch) where a resume continues.

        From ``after_epoch`` on, the finished epoch's end-of-epoch work (evaluation, its
        checkpoint) is under way, so a resume starts the next epoch. A run stopped after the
        last batch but before that work resumes at (epoch, iters_per_epoch) and does it then.
        """
        if self._epoch_ending:
            return self.epoch + 1, 0
        return self.epoch, self.start_batch

    def _call(self, event: str) -> bool:
        """Call `event` of every hook; False when one gave up its work (an evaluation, a clustering)
        for a stop signal: the run stops there (all processes alike: distributed.run_on_main)."""
        try:
            for hook in self.hooks:
                getattr(hook, event)()
        except StopRequested as e:
            self.request_stop(signal.Signals(e.signum).name, signum=e.signum)
            return False
        return True

    def train(self) -> None:
        """Run from the current position to ``max_epoch`` (or to a stop); hooks around it."""
        self.error = None
        self._call("before_train")
        try:
            while self.epoch < self.max_epoch:
                finished = self._run_epoch()
                if not finished or self._stop_agreed():
                    break
        except BaseException as e:
            self.error = e
            raise
        finally:
            self._call("after_train")

    def _run_epoch(self) -> bool:
        """One epoch from ``start_batch``; False when a stop ended it early."""
        if not self._call("before_epoch"):
            return False
        if self._stop_agreed():  # a stop that arrived before this epoch's first step
            return False
        for batch in self._batches():
            if self.world_size == 1 and self.stop_reason is not None:
                return False  # one process: no step after a request (several agree on it in run_step)
            self._call("before_step")
            self.last_metrics = self.run_step(batch)
            self.iter += 1
            self.start_batch += 1
            self._call("after_step")
            # One process: a request made during this step counts at once. Several: only the
            # flag reduced inside run_step, which all ranks share, so all stop at the same step.
            if self._agreed_stop or (self.world_size == 1 and self.stop_reason is not None):
                return False
        if self.stop_reason is not None and self.start_batch < self.iters_per_epoch:
            return False  # the loader died under a stop signal; stop at the last clean step
        self.start_batch = self.iters_per_epoch
        self._epoch_ending = True
        try:
            finished = self._call("after_epoch")
        finally:
            self._epoch_ending = False
        if not finished:
            return False  # position (epoch, iters_per_epoch): a resume redoes the end-of-epoch work
        self.epoch, self.start_batch = self.epoch + 1, 0
        return True

    def _batches(self) -> Iterator[Any]:
        skip = self._set_sampler_epoch()
        if self.start_batch >= self.iters_per_epoch:
            return
        it = iter(self.loader)
        for _ in range(skip):  # the sampler could not start mid-epoch itself
            next(it)
        for _ in range(self.start_batch, self.iters_per_epoch):
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception:
                # A worker may die under a stop anyway (reid/utils/worker_signals.py); the batch was
                # never used, so the state after the previous step is a clean place to stop.
                if self.stop_reason is not None:
                    return
                raise
            yield batch

    def _set_sampler_epoch(self) -> int:
        """Point the sampler at (epoch, start_batch); returns batches the loop must skip itself."""
        for owner in (getattr(self.loader, "batch_sampler", None), getattr(self.loader, "sampler", None)):
            set_epoch = getattr(owner, "set_epoch", None)
            if callable(set_epoch):
                if "start_batch" in inspect.signature(set_epoch).parameters:
                    set_epoch(self.epoch, start_batch=self.start_batch)
                    return 0
                set_epoch(self.epoch)
                return self.start_batch
        return self.start_batch

    def _stop_agreed(self) -> bool:
        """Whether any process asked to stop (every process gets the same answer)."""
        if self.world_size > 1:
            flags = self._local_stop_flags().clone()
            dist.all_reduce(flags, op=dist.ReduceOp.SUM)
            self._agree_on_stop(flags.tolist())
        return self.stop_reason is not None

    def _local_stop_flags(self) -> torch.Tensor:
        """This process's stop flags (see ``_stop_flags``), updated in place when it was asked to stop."""
        if self.stop_reason is not None:
            kind = STOP_SIGNALS.index(self.stop_signal) if self.stop_signal in STOP_SIGNALS else len(STOP_SIGNALS)
            if not self._stop_flags[kind].item():
                self._stop_flags[kind] = 1.0
        return self._stop_flags

    def _agree_on_stop(self, flags: List[float]) -> bool:
        """Take the stop the processes' summed flags show; the signal, if any, is the largest number
        among those that arrived (all ranks pick the same one)."""
        signals = [sig for sig, f in zip(STOP_SIGNALS, flags) if f > 0]
        if not any(f > 0 for f in flags):
            return False
        signum = max(signals) if signals else None
        if self.stop_reason is None:
            name = signal.Signals(signum).name if signum is not None else "a request"
            self.request_stop(f"another process was asked to stop ({name})", signum=signum)
        elif self.stop_signal is None and signum is not None:
            self.stop_signal = signum  # a hook here, a signal elsewhere: the job was signalled
        return True

    def _unpack(self, batch: Any) -> Tuple[torch.Tensor, torch.Tensor, Dict[str, torch.Tensor]]:
        need = ("images", "targets") + (("camids",) if takes_camera_ids(self.model) else ())  # SIE
        if not isinstance(batch, Mapping) or any(k not in batch for k in need):
            got = sorted(map(str, batch)) if isinstance(batch, Mapping) else type(batch).__name__
            raise TypeError(f"Training batches must be dicts with {', '.join(map(repr, need))} (see docs/architecture.md; "
                            f"'camids' for a model with SIE); got {got}.")
        images, targets = (batch[k].to(self.device, non_blocking=True) for k in ("images", "targets"))
        if self.setup.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        extra = {"camids": batch["camids"].to(self.device)} if "camids" in need else {}
        if images.dim() == 5 and "frame_mask" in batch:  # clips of a video dataset, padded to one length
            extra["frame_mask"] = batch["frame_mask"].to(self.device, non_blocking=True)
        return images, targets, extra

    def run_step(self, batch: Any) -> Dict[str, Any]:
        """One optimisation step; returns its logged values, averaged over processes.

        Floats: ``loss`` (the sum of the terms), each ``loss_*`` term, the model's
        ``last_stats`` (head statistics), ``lr``, ``images``; with clipping also 0-d device
        tensors ``grad_norm`` and ``grad_norm_steps``. Raises :class:`NonFiniteLossError`
        before the optimizer step when a term is NaN or infinite (weights stay as they were).

        GPU work is queued without waiting: the one device-to-host copy (the loss terms and
        statistics, for the NaN check and the log) comes after the backward pass is queued.
        """
        images, targets, extra = self._unpack(batch)
        autocast = (torch.autocast(device_type=self.device.type, dtype=self.setup.amp_dtype)
                    if self.setup.amp_dtype is not None else nullcontext())
        with autocast:
            losses = self.module(images, targets, **extra)
        if not isinstance(losses, Mapping) or not losses:
            raise TypeError("In train mode the model must return a non-empty dict of loss tensors "
                            f"(keys 'loss_*'); got {type(losses).__name__}.")
        names = sorted(losses)
        terms = [losses[k].float() for k in names]
        total = torch.stack(terms).sum() if len(terms) > 1 else terms[0]
        stats = getattr(self.model, "last_stats", None) or {}
        stat_names = sorted(k for k, v in stats.items() if isinstance(v, (int, float, torch.Tensor)))
        # One vector, one device->host copy and (DDP) one all-reduce per step carries the loss
        # terms for the NaN check and the log, the head statistics and (DDP) the stop flag.
        parts = [total.detach()] + [t.detach() for t in terms]
        parts += [torch.as_tensor(stats[k], dtype=torch.float32, device=self.device).detach().reshape(())
                  for k in stat_names]
        vec = torch.stack([p.to(torch.float32) for p in parts])
        if self.world_size > 1:
            vec = torch.cat([vec, self._local_stop_flags()])
            dist.all_reduce(vec, op=dist.ReduceOp.SUM)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(total).backward()
        values = vec.tolist()  # waits for the forward (and the all-reduce), not the backward
        if self.world_size > 1:
            flags, values = values[-len(self._stop_flags):], values[: -len(self._stop_flags)]
            self._agreed_stop = self._agree_on_stop(flags)
            values = [v / self.world_size for v in values]
        record: Dict[str, Any] = {"loss": values[0]}
        record.update(zip(names, values[1 : 1 + len(names)]))
        record.update(zip(stat_names, values[1 + len(names) :]))
        for key in names + ["loss"]:
            if not math.isfinite(record[key]):
                raise NonFiniteLossError(key if key != "loss" else "loss (sum of terms)", record[key],
                                         self.iter, self.epoch, self.start_batch)
        record["lr"] = float(self.optimizer.param_groups[0]["lr"])
        if self.clip_grad_norm > 0:
            self.scaler.unscale_(self.optimizer)
            params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
            norm = torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm).detach().float()
            # fp16 steps that the scaler skips have an infinite norm; the log averages the others.
            finite = torch.isfinite(norm)
            record["grad_norm"] = torch.where(finite, norm, torch.zeros_like(norm))
            record["grad_norm_steps"] = finite.float()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        # frames for clips [B, T, 3, H, W]: the logged img/s is the backbone's throughput either way
        record["images"] = float(images.shape[0] * (images.shape[1] if images.dim() == 5 else 1) * self.world_size)
        return record


__all__ = ["TrainLoop"]
