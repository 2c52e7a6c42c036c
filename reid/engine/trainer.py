"""The training loop: epochs of iterations with AMP, freezing, clipping, logging, checkpoints.

Usage (what ``reid.cli.train`` does)::

    trainer = Trainer(cfg, model, train_loader, eval_fn=eval_fn, logger=logger)
    trainer.resume_or_load(resume=args.resume, drop_head=args.drop_head)
    result = trainer.train()          # may raise TrainingInterrupted / NonFiniteLossError

Repeatability: at the start of every epoch the Python/NumPy/torch RNGs and the loader's
generator are re-seeded from ``(SEED, epoch, rank)``, so augmentation, sampling and worker
seeds are a function of the epoch rather than of what ran before (an evaluation, a resume).
A checkpoint taken mid-epoch (on a signal) also stores the RNG states, so a single-process
run with ``DATALOADER.NUM_WORKERS 0`` resumes exactly; with workers, a mid-epoch resume
draws different augmentations for the rest of that epoch (same samples, same schedule).
"""
from __future__ import annotations

import datetime
import inspect
import logging
import math
import os
import random
import signal
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from reid.config import save_config
from reid.modeling.build import model_summary
from reid.utils.logger import LOGGER_NAME, MetricsWriter
from reid.utils.misc import derive_seed, get_rng_state, resolve_device, set_rng_state

from .checkpoint import (
    BEST_NAME,
    FINAL_NAME,
    INTERRUPT_NAME,
    CheckpointError,
    CheckpointManager,
    last_checkpoint,
    load_checkpoint,
    periodic_name,
)
from .distributed import barrier, convert_sync_bn, get_rank, get_world_size, local_cuda_index, wrap_ddp
from .lr_scheduler import build_lr_scheduler
from .optimizer import build_optimizer

AMP_MODES = ("off", "bf16", "fp16")

#: ``eval_fn(model, epoch)`` returns evaluation records: a list of mappings with "split"
#: ("val" or "test"), "dataset" and metric values in percent ("R-1", "R-5", "R-10", "mAP",
#: "mINP"). A mapping ``{"val/<dataset>": {...}, "test/<dataset>": {...}}`` is accepted too.
EvalFn = Callable[[nn.Module, int], Union[Sequence[Mapping[str, Any]], Mapping[str, Mapping[str, Any]]]]


class TrainingInterrupted(Exception):
    """Training stopped on SIGINT/SIGTERM after saving a checkpoint.

    ``exit_code`` is the shell convention 128 + signal number (130 for Ctrl-C, 143 for
    SIGTERM); ``checkpoint`` is the file to resume from (None on ranks other than 0).
    """

    def __init__(self, signum: int, checkpoint: Optional[str], epoch: int, iteration: int) -> None:
        self.signum = int(signum)
        self.exit_code = 128 + self.signum
        self.checkpoint = checkpoint
        self.epoch = epoch
        self.iteration = iteration
        name = signal.Signals(self.signum).name
        where = f"saved {checkpoint}" if checkpoint else "checkpoint written by rank 0"
        super().__init__(
            f"Training stopped by {name} after iteration {iteration} (epoch {epoch + 1}); {where}. "
            "Run the same command with --resume to continue."
        )


class NonFiniteLossError(FloatingPointError):
    """A loss term became NaN or infinite; nothing was stepped or saved for that iteration."""

    def __init__(self, term: str, value: float, iteration: int, epoch: int, batch: int, checkpoint: Optional[str]) -> None:
        self.term = term
        self.value = value
        self.iteration = iteration
        self.epoch = epoch
        self.batch = batch
        self.checkpoint = checkpoint
        last = (
            f"The last good checkpoint is {checkpoint} (resume from it with --resume)."
            if checkpoint
            else "No checkpoint was written before it."
        )
        super().__init__(
            f"Loss term {term} is {value} at iteration {iteration} (epoch {epoch + 1}, batch {batch}); "
            f"training stopped. {last} Try a lower SOLVER.BASE_LR, a longer SOLVER.WARMUP_ITERS, "
            "SOLVER.CLIP_GRAD_NORM > 0, or SOLVER.AMP off."
        )


@dataclass
class TrainResult:
    """What a finished :meth:`Trainer.train` call produced."""

    epoch: int
    iteration: int
    final_checkpoint: Optional[str]
    best_checkpoint: Optional[str]
    best: Optional[Dict[str, Any]]
    eval_records: List[Dict[str, Any]] = field(default_factory=list)


def amp_settings(mode: str, device: torch.device) -> Tuple[Optional[torch.dtype], bool]:
    """(autocast dtype or None, use a GradScaler) for ``SOLVER.AMP`` on `device`."""
    key = str(mode).lower()
    if key == "off":
        return None, False
    if key == "bf16":
        if device.type == "cuda" and not torch.cuda.is_bf16_supported():
            raise ValueError(
                f"SOLVER.AMP bf16 needs a GPU with bfloat16 support; {torch.cuda.get_device_name(device)} "
                "has none. Use SOLVER.AMP fp16 on this GPU."
            )
        return torch.bfloat16, False
    if key == "fp16":
        if device.type != "cuda":
            raise ValueError(
                f"SOLVER.AMP fp16 needs CUDA (float16 training relies on a CUDA gradient scaler), "
                f"but the run is on {device}. Use SOLVER.AMP bf16 (works on CPU) or SOLVER.AMP off."
            )
        return torch.float16, True
    raise ValueError(f"Unknown SOLVER.AMP {mode!r}. Valid values: {', '.join(AMP_MODES)}.")


def backbone_parameters(model: nn.Module) -> List[nn.Parameter]:
    """The pretrained feature extractor's parameters, frozen for ``SOLVER.FREEZE_ITERS``.

    A model may define ``backbone_parameters()`` (MGN's trunk and branches); otherwise its
    ``backbone`` sub-module is used.
    """
    custom = getattr(model, "backbone_parameters", None)
    if callable(custom):
        return list(custom())
    backbone = getattr(model, "backbone", None)
    if isinstance(backbone, nn.Module):
        return list(backbone.parameters())
    raise ValueError(
        f"SOLVER.FREEZE_ITERS > 0 needs to know the backbone of {type(model).__name__}: give the model a "
        "'backbone' sub-module or a backbone_parameters() method, or set SOLVER.FREEZE_ITERS 0."
    )


def _normalise_eval_records(out: Any) -> List[Dict[str, Any]]:
    """Turn eval_fn's return value into a list of records with "split" and "dataset"."""
    if out is None:
        return []
    if isinstance(out, Mapping):
        if all(isinstance(v, Mapping) for v in out.values()):
            records = []
            for key, metrics in out.items():
                split, _, dataset = str(key).partition("/")
                rec = {"split": split or "test", "dataset": dataset}
                rec.update(metrics)
                records.append(rec)
            return records
        out = [out]
    records = []
    for rec in out:
        if not isinstance(rec, Mapping):
            raise TypeError(f"eval_fn must return evaluation records (mappings), got {type(rec).__name__}.")
        rec = dict(rec)
        rec.setdefault("split", "test")
        rec.setdefault("dataset", "")
        records.append(rec)
    return records


def _fmt_seconds(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(max(0.0, seconds))))


class Trainer:
    """Trains `model` on `train_loader` according to ``cfg.SOLVER`` and writes ``cfg.OUTPUT_DIR``.

    Args:
        cfg: the merged config (SOLVER.*, SEED, OUTPUT_DIR, MODEL.DEVICE, MODEL.SYNC_BN,
            TEST.EVAL_PERIOD, TEST.VAL_IDS are read).
        model: built with ``MODEL.HEADS.NUM_CLASSES`` set; in train mode ``model(images,
            targets)`` returns a dict of ``loss_*`` tensors and sets ``model.last_stats``.
        train_loader: yields dict batches with ``images`` and ``targets``; its sampler (or
            batch sampler) should have ``set_epoch(epoch, start_batch=0)``.
        eval_fn: ``eval_fn(model, epoch) -> records`` (see :data:`EvalFn`), called on rank 0
            every ``TEST.EVAL_PERIOD`` epochs and after the last one, with the plain (unwrapped)
            model; None disables evaluation.
        logger: where progress goes (default: the "reid" logger, see ``setup_logger``).
        progress: show a tqdm progress bar per epoch; None = only when stdout is a terminal
            and tqdm is installed (rank 0 only).

    The constructor moves the model to the device, applies SyncBN / channels_last / DDP as
    configured, and builds the optimizer, LR schedule and gradient scaler.
    """

    def __init__(
        self,
        cfg,
        model: nn.Module,
        train_loader: Any,
        eval_fn: Optional[EvalFn] = None,
        logger: Optional[logging.Logger] = None,
        progress: Optional[bool] = None,
    ) -> None:
        self.cfg = cfg
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.rank = get_rank()
        self.world_size = get_world_size()
        self.is_main = self.rank == 0
        self.output_dir = str(cfg.OUTPUT_DIR)
        self.eval_fn = eval_fn
        self.train_loader = train_loader
        solver = cfg.SOLVER

        self.device = self._pick_device(str(cfg.MODEL.DEVICE))
        self.amp_dtype, use_scaler = amp_settings(solver.AMP, self.device)
        self._configure_backends()

        model = model.to(self.device)
        if bool(cfg.MODEL.SYNC_BN):
            model = convert_sync_bn(model, self.device)
        # channels_last only pays off with cuDNN kernels; on the CPU it just adds copies.
        self.channels_last = bool(solver.CHANNELS_LAST) and self.device.type == "cuda"
        if self.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.model = model

        try:
            self.iters_per_epoch = len(train_loader)
        except TypeError as e:
            raise TypeError("The training loader must have a length (batches per epoch).") from e
        if self.iters_per_epoch <= 0:
            raise ValueError(
                "The training loader yields no batch per epoch: the training set is smaller than one "
                f"batch (SOLVER.IMS_PER_BATCH {solver.IMS_PER_BATCH}). Lower the batch size or add data."
            )
        self.max_epoch = int(solver.MAX_EPOCH)
        if self.max_epoch <= 0:
            raise ValueError(f"SOLVER.MAX_EPOCH must be > 0, got {self.max_epoch}.")
        self.max_iters = self.max_epoch * self.iters_per_epoch

        # Built before any freezing so that a temporarily frozen backbone is in the groups.
        self.optimizer = build_optimizer(cfg, model)
        self.scheduler = build_lr_scheduler(cfg, self.optimizer, self.iters_per_epoch)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=use_scaler)

        self.freeze_iters = int(solver.FREEZE_ITERS)
        self._freezable: List[nn.Parameter] = []
        if self.freeze_iters > 0:
            # Remember what was trainable so that permanently frozen tensors stay frozen.
            self._freezable = [p for p in backbone_parameters(model) if p.requires_grad]
        self._frozen = False
        # Parameters with no gradient in some iterations (a frozen backbone) need DDP's search.
        self.ddp_model = wrap_ddp(model, self.device, find_unused_parameters=self.freeze_iters > 0)

        self.clip_grad_norm = float(solver.CLIP_GRAD_NORM)
        self.log_period = max(1, int(solver.LOG_PERIOD))
        self.checkpoint_period = int(solver.CHECKPOINT_PERIOD)
        self.eval_period = int(cfg.TEST.EVAL_PERIOD)
        self.use_val = int(cfg.TEST.VAL_IDS) > 0
        self.checkpoints = CheckpointManager(self.output_dir, keep=int(solver.CHECKPOINT_KEEP), enabled=self.is_main)
        self.metrics = MetricsWriter(self.output_dir, enabled=self.is_main, logger=self.logger)
        if progress is None:
            progress = sys.stdout.isatty()
        self.progress = bool(progress) and self.is_main

        # Position: completed epochs / iterations, and the batch to start the current epoch at.
        self.epoch = 0
        self.start_batch = 0
        self.iteration = 0
        self.best: Optional[Dict[str, Any]] = None
        self.last_saved: Optional[str] = None
        self._last_saved_iteration = -1
        self._rng_to_restore: Optional[Dict[str, Any]] = None
        self._stop_signal: Optional[int] = None
        self._stop_after_step = False
        # (DDP) the stop request as a device tensor, set in place: no host-to-device copy per step
        self._stop_flag = torch.zeros((), device=self.device)
        self.eval_records: List[Dict[str, Any]] = []
        # Where this process's training started (time, iteration): the ETA's average.
        self._t0 = time.perf_counter()
        self._start_iteration = 0

        if self.is_main:
            if getattr(train_loader, "persistent_workers", False) and getattr(train_loader, "num_workers", 0) > 0:
                # Persistent workers are seeded once, so per-epoch re-seeding cannot reach them.
                self.logger.info(
                    "The train loader keeps its workers between epochs: augmentations after a --resume "
                    "differ from those of an uninterrupted run (sampling and schedule are identical)."
                )

    # ------------------------------------------------------------------ setup
    def _pick_device(self, spec: str) -> torch.device:
        device = resolve_device(spec)
        if device.type == "cuda" and self.world_size > 1:
            # One GPU per process: torchrun's LOCAL_RANK picks it (an index in MODEL.DEVICE
            # would put every process on the same GPU).
            local = torch.device("cuda", local_cuda_index(int(os.environ.get("LOCAL_RANK", 0))))
            if device.index is not None and device.index != local.index:
                self.logger.warning("MODEL.DEVICE %s ignored under torchrun: this process uses %s.", spec, local)
            device = local
        if device.type == "cuda":
            torch.cuda.set_device(device)
        return device

    def _configure_backends(self) -> None:
        if self.device.type != "cuda":
            return
        deterministic = bool(self.cfg.CUDNN_DETERMINISTIC)
        torch.backends.cudnn.deterministic = deterministic
        # Autotuning picks the fastest kernels for the fixed input size, but non-deterministically.
        torch.backends.cudnn.benchmark = not deterministic
        if deterministic:
            # cuDNN's flag alone leaves other CUDA kernels free to use atomics (the cross-entropy
            # backward, adaptive max pooling's backward in MGN). warn_only: an op without a
            # deterministic kernel warns instead of stopping the run. cuBLAS needs its workspace
            # setting before its first use, i.e. now.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
            torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    # ----------------------------------------------------------------- resume
    def resume_or_load(self, resume: bool = False, weights: Optional[str] = None, drop_head: bool = False) -> Optional[str]:
        """Resume from ``OUTPUT_DIR``'s last checkpoint, or load initial weights.

        With `resume` and a checkpoint present, the whole state (model, optimizer, schedule,
        scaler, position, RNG, best score) is restored and its path returned. Otherwise
        `weights` (default ``MODEL.WEIGHTS``) is loaded into the model only; `drop_head`
        leaves the identity head at its initialisation (fine-tuning on other identities).
        Returns the path that was loaded, or None.
        """
        if resume:
            path = last_checkpoint(self.output_dir)
            if path is not None:
                self.resume_from(path)
                return path
            self.logger.info("--resume: no checkpoint in %s yet; starting from scratch.", self.output_dir)
        weights = str(self.cfg.MODEL.WEIGHTS) if weights is None else weights
        if weights:
            load_checkpoint(weights, model=self.model, drop_head=drop_head)
            self.logger.info("Loaded weights from %s%s.", weights, " without the identity head" if drop_head else "")
            return weights
        return None

    def resume_from(self, path: str) -> None:
        """Restore the full training state saved in checkpoint `path`."""
        data = load_checkpoint(path, model=self.model, optimizer=self.optimizer, scheduler=self.scheduler)
        if self.scaler.is_enabled():
            if data.get("scaler") is not None:
                self.scaler.load_state_dict(data["scaler"])
            else:
                # A run switched to fp16 on resume (the checkpoint was float32 or bf16): the
                # scaler starts afresh and finds its scale within a few iterations.
                self.logger.info("%s has no gradient-scaler state (saved without fp16); starting a new scaler.", path)
        sampler = data.get("sampler") or {"epoch": int(data.get("epoch", 0)), "start_batch": 0}
        self.epoch = int(sampler["epoch"])
        self.start_batch = int(sampler["start_batch"])
        self.iteration = int(data.get("iteration", self.epoch * self.iters_per_epoch + self.start_batch))
        self.best = data.get("best")
        self._rng_to_restore = data.get("rng")
        self.last_saved = path
        self._last_saved_iteration = self.iteration
        if self.max_iters > self.scheduler.max_iters:
            self._refuse_longer_schedule(path)
        if self.scheduler.iters_per_epoch != self.iters_per_epoch or self.scheduler.max_iters != self.max_iters:
            self.logger.warning(
                "Resuming %s: it was trained with %d iterations/epoch and %d iterations in all, this run "
                "has %d and %d (MAX_EPOCH, batch size or dataset changed). The checkpoint's LR schedule is kept.",
                path, self.scheduler.iters_per_epoch, self.scheduler.max_iters, self.iters_per_epoch, self.max_iters,
            )
        self.logger.info(
            "Resumed from %s: %d epoch(s) and %d iteration(s) done, continuing at epoch %d batch %d.",
            path, self.epoch, self.iteration, self.epoch + 1, self.start_batch,
        )

    def _refuse_longer_schedule(self, path: str) -> None:
        """Raise CheckpointError: this run has more iterations than the checkpoint's LR schedule."""
        # The schedule (and its length) comes from the checkpoint so that a resume continues the
        # same curve; past its end the learning rate stays at its final value (0 for cosine).
        ckpt_iters = self.scheduler.max_iters
        ckpt_epochs = ckpt_iters // max(1, self.scheduler.iters_per_epoch)
        end_lr = self.scheduler.factor(ckpt_iters) * float(self.scheduler.base_lrs[0])
        raise CheckpointError(
            f"Cannot resume {path} for {self.max_iters} iterations ({self.max_epoch} epoch(s) x "
            f"{self.iters_per_epoch}): its LR schedule ends after {ckpt_iters} iterations ({ckpt_epochs} epoch(s) "
            f"x {self.scheduler.iters_per_epoch}), so the {self.max_iters - ckpt_iters} extra iterations would "
            f"train at the schedule's final learning rate {end_lr:.2e}. To train longer, start a new run with a "
            f"fresh schedule from these weights in another OUTPUT_DIR (MODEL.WEIGHTS {path} OUTPUT_DIR "
            f"<new folder>, without --resume); to continue this run, resume with its original SOLVER.MAX_EPOCH "
            f"{ckpt_epochs} (and the same batch size and datasets)."
        )

    # ------------------------------------------------------------- checkpoint
    def state_dict(self, epoch: int, start_batch: int) -> Dict[str, Any]:
        """Everything needed to continue at (`epoch`, `start_batch`); weights_only-loadable."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "epoch": int(epoch),
            "iteration": int(self.iteration),
            "sampler": {"epoch": int(epoch), "start_batch": int(start_batch)},
            "rng": get_rng_state(),
            "cfg": self.cfg.dump(),
            "best": self.best,
            "world_size": int(self.world_size),
        }

    def _save(self, name: str, epoch: int, start_batch: int) -> Optional[str]:
        path = self.checkpoints.save(name, self.state_dict(epoch, start_batch))
        if self.is_main:
            self.last_saved = path
            self._last_saved_iteration = self.iteration
            self.logger.info("Saved checkpoint %s (epoch %d, iteration %d).", path, epoch, self.iteration)
        return path

    # ---------------------------------------------------------------- signals
    def request_stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask the loop to save a checkpoint and stop at the next iteration boundary."""
        self._stop_signal = int(signum)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only a flag is set here: logging or saving inside a signal handler can deadlock or
        # corrupt a file mid-write; the loop acts on the flag at a safe point.
        if self._stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl-C means "now"
        self.request_stop(signum)

    def _install_signal_handlers(self) -> Dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # signal.signal only works in the main thread
        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, self._on_signal)
        return previous

    def _stop_agreed(self) -> bool:
        """Whether any process was asked to stop (all processes get the same answer)."""
        flag = 1.0 if self._stop_signal is not None else 0.0
        if self.world_size > 1:
            t = torch.tensor([flag], device=self.device)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = float(t.item())
        return flag > 0

    def _interrupt(self, epoch: int, start_batch: int) -> TrainingInterrupted:
        """Save the interrupt checkpoint (unless this state is saved already) and build the exception."""
        signum = self._stop_signal if self._stop_signal is not None else int(signal.SIGTERM)
        if self._last_saved_iteration == self.iteration and self.last_saved and start_batch == 0:
            path = self.last_saved
        else:
            path = self._save(INTERRUPT_NAME, epoch, start_batch)
        self.logger.warning(
            "Stopping on %s after iteration %d; resume with --resume.", signal.Signals(signum).name, self.iteration
        )
        return TrainingInterrupted(signum, path if self.is_main else None, epoch, self.iteration)

    # ------------------------------------------------------------------ epoch
    def _begin_epoch(self, epoch: int, start_batch: int) -> int:
        """Seed RNGs and the sampler for `epoch`; returns batches the loop must skip itself."""
        seed = int(self.cfg.SEED)
        if start_batch > 0 and self._rng_to_restore is not None and self.world_size == 1:
            set_rng_state(self._rng_to_restore)
        else:
            # Rank 0's RNG state is all a checkpoint holds, so other ranks (and a fresh epoch)
            # derive theirs from the position instead.
            value = derive_seed(seed, epoch, self.rank, start_batch)
            random.seed(value)
            np.random.seed(value)
            torch.manual_seed(value)
        self._rng_to_restore = None
        generator = getattr(self.train_loader, "generator", None)
        if isinstance(generator, torch.Generator):
            # Each rank its own augmentation stream (the ranks' workers would otherwise flip and
            # erase in lockstep); rank 0 keeps the single-process stream.
            generator.manual_seed(derive_seed(seed, epoch) if self.rank == 0 else derive_seed(seed, epoch, self.rank))
        return self._set_sampler_epoch(epoch, start_batch)

    def _set_sampler_epoch(self, epoch: int, start_batch: int) -> int:
        for owner in (getattr(self.train_loader, "batch_sampler", None), getattr(self.train_loader, "sampler", None)):
            set_epoch = getattr(owner, "set_epoch", None)
            if not callable(set_epoch):
                continue
            try:
                params = inspect.signature(set_epoch).parameters
            except (TypeError, ValueError):
                params = {}
            if "start_batch" in params:
                set_epoch(epoch, start_batch=start_batch)
                return 0
            set_epoch(epoch)
            return start_batch
        return start_batch

    # ------------------------------------------------------------- iteration
    def _set_backbone_frozen(self, frozen: bool) -> None:
        if frozen == self._frozen:
            return
        for p in self._freezable:
            p.requires_grad_(not frozen)
        self._frozen = frozen
        if frozen:
            self.logger.info("Backbone frozen for the first %d iterations (training neck and head only).", self.freeze_iters)
        else:
            self.logger.info("Backbone unfrozen at iteration %d.", self.iteration)

    def _autocast(self):
        if self.amp_dtype is None:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.amp_dtype)

    def _unpack(self, batch: Any) -> Tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(batch, Mapping) or "images" not in batch or "targets" not in batch:
            raise TypeError(
                "Training batches must be dicts with 'images' and 'targets' (see docs/architecture.md); "
                f"got {type(batch).__name__}."
            )
        images = batch["images"].to(self.device, non_blocking=True)
        targets = batch["targets"].to(self.device, non_blocking=True)
        if self.channels_last and images.dim() == 4:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, targets

    def run_step(self, batch: Any, epoch: int, batch_idx: int) -> Dict[str, Any]:
        """One optimisation step; returns the logged values (rank-averaged) of this iteration
        (floats; with gradient clipping also the 0-d device tensors `grad_norm`, `grad_norm_steps`).

        Raises :class:`NonFiniteLossError` before the optimizer step when a loss term is NaN
        or infinite, so the weights and the optimizer state stay as they were.

        GPU work is queued without waiting: the one device-to-host copy per step (the loss
        terms and head statistics, for the NaN check and the log) is made after the backward
        pass has been queued, so the GPU keeps computing while the host checks. ``grad_norm``
        (with SOLVER.CLIP_GRAD_NORM) stays a device tensor until the log line needs it.
        """
        if self.freeze_iters > 0:
            self._set_backbone_frozen(self.iteration < self.freeze_iters)
        images, targets = self._unpack(batch)
        with self._autocast():
            losses = self.ddp_model(images, targets)
        if not isinstance(losses, Mapping) or not losses:
            raise TypeError(
                "In train mode the model must return a non-empty dict of loss tensors "
                f"(keys 'loss_*'); got {type(losses).__name__}."
            )
        names = sorted(losses)
        terms = [losses[k].float() for k in names]
        total = torch.stack(terms).sum() if len(terms) > 1 else terms[0]
        stats = getattr(self.model, "last_stats", None) or {}
        stat_names = sorted(k for k, v in stats.items() if isinstance(v, (int, float, torch.Tensor)))
        # One vector, one device->host copy and (DDP) one all-reduce per iteration carries the
        # loss terms for the NaN check and logging, the head statistics and (DDP) the stop flag.
        parts = [total.detach()] + [t.detach() for t in terms]
        parts += [torch.as_tensor(stats[k], dtype=torch.float32, device=self.device).detach().reshape(()) for k in stat_names]
        if self.world_size > 1:
            if self._stop_signal is not None:
                self._stop_flag.fill_(1.0)
            parts.append(self._stop_flag)
        vec = torch.stack([p.to(torch.float32) for p in parts])
        if self.world_size > 1:
            dist.all_reduce(vec, op=dist.ReduceOp.SUM)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(total).backward()
        values = vec.tolist()  # waits for the forward (and the all-reduce), not the backward
        if self.world_size > 1:
            stop = values.pop() > 0
            values = [v / self.world_size for v in values]
        else:
            stop = self._stop_signal is not None
        record: Dict[str, Any] = {"loss": values[0]}
        record.update({k: v for k, v in zip(names, values[1 : 1 + len(names)])})
        record.update({k: v for k, v in zip(stat_names, values[1 + len(names) :])})
        for key in names + ["loss"]:
            if not math.isfinite(record[key]):
                raise NonFiniteLossError(
                    key if key != "loss" else "loss (sum of terms)", record[key], self.iteration, epoch, batch_idx, self.last_saved
                )
        if stop and self._stop_signal is None:
            self._stop_signal = int(signal.SIGTERM)  # another rank was signalled
        # Every rank sees the same reduced flag, so all stop after the same iteration.
        self._stop_after_step = stop

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
        self.scheduler.step()
        self.iteration += 1
        record["images"] = float(images.shape[0] * self.world_size)
        return record

    # ------------------------------------------------------------------ train
    def _banner(self) -> None:
        if not self.is_main:
            return
        gpu = f" ({torch.cuda.get_device_name(self.device)})" if self.device.type == "cuda" else ""
        groups = ", ".join(
            f"{g.get('name', i)}: {len(g['params'])} tensors lr {g['lr']:.2e} wd {g['weight_decay']:.1e}"
            for i, g in enumerate(self.optimizer.param_groups)
        )
        lines = [
            f"Output dir: {os.path.abspath(self.output_dir)}",
            f"Device: {self.device}{gpu}; processes: {self.world_size}; AMP: {self.cfg.SOLVER.AMP}; "
            f"channels_last: {self.channels_last}",
            f"Model: {model_summary(self.model)}",
            f"Optimizer: {self.cfg.SOLVER.OPTIMIZER}; groups: {groups}",
            f"Schedule: {self.cfg.SOLVER.SCHED}, {self.max_epoch} epochs x {self.iters_per_epoch} iterations "
            f"= {self.max_iters}; warmup {self.cfg.SOLVER.WARMUP_ITERS} iterations; "
            f"batch {self.cfg.SOLVER.IMS_PER_BATCH}",
            "Model selection: "
            + ("best validation mAP (model_best.pth)" if self.use_val else "none (TEST.VAL_IDS 0): model_final.pth is the result"),
        ]
        for line in lines:
            self.logger.info(line)
        warmup = int(self.cfg.SOLVER.WARMUP_ITERS)
        if warmup >= self.max_iters:
            peak = max(self.scheduler.factor(i) for i in range(self.max_iters))
            self.logger.warning(
                "SOLVER.WARMUP_ITERS %d is not shorter than the whole run (%d iterations): the learning rate "
                "never reaches SOLVER.BASE_LR (at most %.0f%% of it). Lower SOLVER.WARMUP_ITERS or train longer.",
                warmup, self.max_iters, 100 * peak,
            )

    def train(self) -> TrainResult:
        """Run (or continue) training to ``SOLVER.MAX_EPOCH``; returns a :class:`TrainResult`.

        Raises :class:`TrainingInterrupted` after saving a checkpoint when SIGINT/SIGTERM
        arrives, and :class:`NonFiniteLossError` when a loss term is NaN or infinite.
        """
        if self.is_main:
            # Written here rather than on construction: a resume that resume_or_load refuses
            # must leave the run's config.yaml as it was.
            save_config(self.cfg, os.path.join(self.output_dir, "config.yaml"))
        self._banner()
        previous = self._install_signal_handlers()
        self._t0 = time.perf_counter()
        self._start_iteration = self.iteration
        try:
            if self.epoch >= self.max_epoch:
                self.logger.info("Training already finished (%d/%d epochs); nothing to do.", self.epoch, self.max_epoch)
            else:
                self.model.train()
                self._train_epochs()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._set_backbone_frozen(False)
            self.metrics.close()
        final = self.checkpoints.path(FINAL_NAME)
        best = self.checkpoints.path(BEST_NAME)
        if self.is_main:
            if self.use_val and self.best is not None:
                self.logger.info(
                    "Best validation mAP %.2f at epoch %d: %s", self.best["value"], self.best["epoch"], best
                )
            self.logger.info("Training done: %s", final)
        return TrainResult(
            epoch=self.epoch,
            iteration=self.iteration,
            final_checkpoint=final if os.path.isfile(final) else None,
            best_checkpoint=best if os.path.isfile(best) else None,
            best=self.best,
            eval_records=self.eval_records,
        )

    def _train_epochs(self) -> None:
        for epoch in range(self.epoch, self.max_epoch):
            start_batch = self.start_batch if epoch == self.epoch else 0
            self._run_epoch(epoch, start_batch)
            self.epoch = epoch + 1
            self.start_batch = 0
            self._end_epoch()
            if self._stop_agreed():
                raise self._interrupt(self.epoch, 0)

    def _batches(self, epoch: int, start_batch: int) -> Iterator[Tuple[int, Any]]:
        skip = self._begin_epoch(epoch, start_batch)
        if start_batch >= self.iters_per_epoch:
            return
        it = iter(self.train_loader)
        for _ in range(skip):  # the sampler could not start mid-epoch itself
            next(it)
        for batch_idx in range(start_batch, self.iters_per_epoch):
            try:
                batch = next(it)
            except StopIteration:
                return
            except Exception:
                # Ctrl-C also reaches the loader's workers, which then die; the batch was never
                # used, so the state after the previous iteration is a clean place to stop.
                if self._stop_signal is not None:
                    raise self._interrupt(epoch, batch_idx)
                raise
            yield batch_idx, batch

    def _run_epoch(self, epoch: int, start_batch: int) -> None:
        bar = None
        if self.progress:
            try:
                from tqdm import tqdm

                bar = tqdm(total=self.iters_per_epoch, initial=min(start_batch, self.iters_per_epoch),
                           desc=f"epoch {epoch + 1}/{self.max_epoch}", leave=False, dynamic_ncols=True)
            except ImportError:
                bar = None
        window: Dict[str, Any] = {}  # sums of the step records (floats, or device tensors)
        count = 0
        t_window = time.perf_counter()
        try:
            for batch_idx, batch in self._batches(epoch, start_batch):
                record = self.run_step(batch, epoch, batch_idx)
                for k, v in record.items():
                    window[k] = window.get(k, 0.0) + v
                count += 1
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(loss=f"{record['loss']:.3f}", refresh=False)
                last_in_epoch = batch_idx + 1 == self.iters_per_epoch
                if self.iteration % self.log_period == 0 or last_in_epoch:
                    elapsed = time.perf_counter() - t_window
                    self._log_window(epoch, batch_idx, window, count, elapsed)
                    window, count, t_window = {}, 0, time.perf_counter()
                # Single process: a signal that arrived during this step counts at once. Several
                # processes: only the flag reduced inside run_step, which all ranks share.
                if self._stop_after_step or (self.world_size == 1 and self._stop_signal is not None):
                    raise self._interrupt(epoch, batch_idx + 1)
        finally:
            if bar is not None:
                bar.close()

    def _log_window(self, epoch: int, batch_idx: int, window: Mapping[str, Any], count: int, elapsed: float) -> None:
        window = {k: float(v) for k, v in window.items()}  # device tensors (grad_norm) sync here, once
        means = {k: v / count for k, v in window.items() if k not in ("images", "grad_norm", "grad_norm_steps")}
        if window.get("grad_norm_steps", 0.0) > 0:
            means["grad_norm"] = window["grad_norm"] / window["grad_norm_steps"]
        images_per_s = window.get("images", 0.0) / max(elapsed, 1e-9)
        # One window is too short a sample (a slow first batch, an evaluation, a busy disk make
        # the ETA swing); the average since this process started training is steady.
        done_here = self.iteration - self._start_iteration
        if done_here > 0:
            sec_per_iter = (time.perf_counter() - self._t0) / done_here
        else:
            sec_per_iter = elapsed / max(count, 1)
        eta = (self.max_iters - self.iteration) * sec_per_iter
        loss_terms = sorted(k for k in means if k.startswith("loss_"))
        # Head statistics: s_p and s_n first (the ones every cosine head reports), then others.
        stats = sorted(
            (k for k in means if k not in loss_terms and k not in ("loss", "lr", "grad_norm")),
            key=lambda k: ({"s_p": 0, "s_n": 1}.get(k, 2), k),
        )
        record: Dict[str, Any] = {"type": "train", "epoch": epoch + 1, "iter": self.iteration, "lr": means["lr"], "loss": means["loss"]}
        record.update({k: means[k] for k in loss_terms})
        record.update({k: means[k] for k in stats})
        if "grad_norm" in means:
            record["grad_norm"] = means["grad_norm"]
        record.update({
            "images_per_s": images_per_s,
            "time": time.perf_counter() - self._t0,
            "eta_s": eta,
        })
        self.metrics.write(record)
        if not self.is_main:
            return
        parts = [f"epoch {epoch + 1}/{self.max_epoch}", f"iter {batch_idx + 1}/{self.iters_per_epoch}",
                 f"(total {self.iteration}/{self.max_iters})", f"loss {means['loss']:.4f}"]
        parts += [f"{k} {means[k]:.4f}" for k in loss_terms]
        parts += [f"{k} {means[k]:.3f}" for k in stats]
        if "grad_norm" in means:
            parts.append(f"grad_norm {means['grad_norm']:.2f}")
        parts += [f"lr {means['lr']:.2e}", f"{images_per_s:.1f} img/s", f"eta {_fmt_seconds(eta)}"]
        self.logger.info("  ".join(parts))

    # ----------------------------------------------------------- epoch end
    def _end_epoch(self) -> None:
        """Evaluate and save as scheduled after epoch ``self.epoch`` (completed count).

        If the evaluation raises, the epoch's weights are saved first (its scheduled checkpoint,
        or ``model_interrupted.pth`` when none was due) and the error is re-raised.
        """
        is_last = self.epoch == self.max_epoch
        name: Optional[str] = None
        if is_last:
            name = FINAL_NAME
        elif self.checkpoint_period > 0 and self.epoch % self.checkpoint_period == 0:
            name = periodic_name(self.epoch)
        if self.eval_fn is not None and (is_last or (self.eval_period > 0 and self.epoch % self.eval_period == 0)):
            try:
                self._evaluate()
            except Exception as e:
                self._save_after_failed_eval(name, is_last, e)
                raise
        if name is not None:
            self._save(name, self.epoch, 0)
        barrier()

    def _save_after_failed_eval(self, name: Optional[str], is_last: bool, error: BaseException) -> None:
        # Hours of training must not be lost to an evaluation problem (a bad test set, a
        # metric typo): the trained state is written before the error ends the run.
        self.logger.error("Evaluation after epoch %d failed: %s: %s", self.epoch, type(error).__name__, error)
        path = self._save(name or INTERRUPT_NAME, self.epoch, 0)
        if not self.is_main:
            return
        if is_last:
            hint = (f"Training is complete: fix the evaluation settings, then evaluate these weights with "
                    f"tools/test.py ... MODEL.WEIGHTS {path} (or tools/train.py --eval-only).")
        else:
            hint = "Fix the evaluation settings, then continue training with the same command plus --resume."
        self.logger.error("The weights of epoch %d were saved to %s before stopping. %s", self.epoch, path, hint)

    def _evaluate(self) -> None:
        """Rank 0 runs eval_fn; records go to metrics.jsonl; "val" records pick the best model."""
        if self.is_main:
            was_training = self.model.training
            self.model.eval()
            try:
                records = _normalise_eval_records(self.eval_fn(self.model, self.epoch))
            finally:
                self.model.train(was_training)
            for rec in records:
                full = {"type": "eval", "split": rec["split"], "dataset": rec["dataset"], "epoch": self.epoch, "iter": self.iteration}
                full.update({k: v for k, v in rec.items() if k not in full})
                self.metrics.write(full)
                self.eval_records.append(full)
                shown = "  ".join(
                    f"{k} {float(full[k]):.2f}" for k in ("R-1", "R-5", "R-10", "mAP", "mINP") if k in full
                )
                self.logger.info("Eval epoch %d [%s %s]: %s", self.epoch, full["split"], full["dataset"], shown)
            self._update_best(records)
        barrier()

    def _update_best(self, records: Sequence[Mapping[str, Any]]) -> None:
        # The test split never selects a model: choosing on it would leak the test set.
        val = [r for r in records if r["split"] == "val" and "mAP" in r]
        if not self.use_val or not val:
            return
        score = float(sum(float(r["mAP"]) for r in val) / len(val))
        if self.best is not None and score <= float(self.best["value"]):
            return
        self.best = {"metric": "val/mAP", "value": score, "epoch": int(self.epoch), "iteration": int(self.iteration)}
        state = {"model": self.model.state_dict(), "epoch": self.epoch, "iteration": self.iteration,
                 "cfg": self.cfg.dump(), "best": self.best}
        path = self.checkpoints.save(BEST_NAME, state, resumable=False)
        self.logger.info("New best validation mAP %.2f at epoch %d: saved %s", score, self.epoch, path)


__all__ = ["AMP_MODES", "EvalFn", "backbone_parameters", "NonFiniteLossError", "TrainResult", "Trainer", "TrainingInterrupted", "amp_settings"]
