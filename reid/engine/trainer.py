"""The default trainer: builds the loop, the checkpointer and the built-in hooks from a config.

Usage (what ``reid.cli.train`` does)::

    trainer = Trainer(cfg, model, train_loader, eval_fn=eval_fn, hooks=[MyHook()])
    trainer.resume_or_load(resume=args.resume, drop_head=args.drop_head)
    result = trainer.train()   # may raise TrainingInterrupted / NonFiniteLossError

Repeatability: every training sample is augmented from a seed given by its position in the
epoch (``reid.utils.process``), the main process's generators are re-seeded at every epoch
start (:class:`~reid.engine.hooks.SeedEachEpoch`), and a checkpoint stores the generator
states, so a resumed run, even one stopped mid-epoch and with loader workers, continues
exactly as the uninterrupted run would have.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import nn

from reid.config import save_config
from reid.modeling.build import model_summary
from reid.utils.logger import LOGGER_NAME
from reid.utils.process import get_rank

from .checkpoint_files import BEST_NAME, FINAL_NAME, CheckpointManager, last_checkpoint, load_checkpoint
from .checkpointer import Checkpointer
from .errors import NonFiniteLossError, TrainingInterrupted
from .hook_base import HookBase
from .hooks import EvalFn, EvalHook, FreezeBackbone, LRSchedule, MetricsLogger, PeriodicCheckpoint, SeedEachEpoch, StopOnSignal
from .lr_scheduler import build_lr_scheduler
from .optimizer import build_optimizer
from .placement import place_model, setup_device, wrap_for_training
from .train_loop import TrainLoop


@dataclass
class TrainResult:
    """What a finished :meth:`Trainer.train` call produced."""

    epoch: int
    iteration: int
    final_checkpoint: Optional[str]
    best_checkpoint: Optional[str]
    best: Optional[Dict[str, Any]]
    eval_records: List[Dict[str, Any]] = field(default_factory=list)
    stop_reason: Optional[str] = None  # set when a hook's request_stop ended the run early


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


def build_hooks(cfg, loop: TrainLoop, scheduler: Any, checkpointer: Checkpointer, freezable: Sequence[nn.Parameter],
                eval_fn: Optional[EvalFn], progress: bool) -> List[HookBase]:
    """The built-in hooks, in the order they run (the one place that order is decided).

    1. StopOnSignal first, so that Ctrl-C/SIGTERM is caught during everything after it.
    2. SeedEachEpoch before anything that draws random numbers in an epoch.
    3. FreezeBackbone before the step whose gradients it decides.
    4. LRSchedule: steps the schedule after each optimizer step (the step logged the lr it used).
    5. EvalHook before PeriodicCheckpoint: the epoch's checkpoint then holds the best score
       this evaluation set, so a resume never forgets it; a failed evaluation saves the
       epoch's weights itself, under the checkpoint's scheduled name.
    6. PeriodicCheckpoint after evaluation (above); on a stop it saves the interrupt checkpoint.
    7. MetricsLogger last: it writes what the others produced (eval records) and logs the step.
    User hooks come after all of these: they see a finished step, an evaluated and saved epoch,
    and can change ``trainer.eval_model`` in ``before_train`` (before anything is evaluated).
    """
    solver = cfg.SOLVER
    checkpoints = PeriodicCheckpoint(checkpointer, int(solver.CHECKPOINT_PERIOD))
    hooks: List[HookBase] = [StopOnSignal(), SeedEachEpoch(int(cfg.SEED))]
    if int(solver.FREEZE_ITERS) > 0:
        hooks.append(FreezeBackbone(freezable, int(solver.FREEZE_ITERS)))
    hooks.append(LRSchedule(scheduler))
    if eval_fn is not None:
        hooks.append(EvalHook(eval_fn, int(cfg.TEST.EVAL_PERIOD), int(cfg.TEST.VAL_IDS) > 0, checkpointer,
                              on_failure=checkpoints.save_after_failure))
    hooks.append(checkpoints)
    hooks.append(MetricsLogger(str(cfg.OUTPUT_DIR), int(solver.LOG_PERIOD), enabled=loop.rank == 0, progress=progress))
    return hooks


class Trainer:
    """Trains `model` on `train_loader` as ``cfg.SOLVER`` says and writes ``cfg.OUTPUT_DIR``.

    Args:
        cfg: the merged config (SOLVER.*, SEED, OUTPUT_DIR, MODEL.DEVICE, MODEL.SYNC_BN,
            TEST.EVAL_PERIOD, TEST.VAL_IDS are read).
        model: built with ``MODEL.HEADS.NUM_CLASSES`` set; in train mode ``model(images,
            targets)`` returns a dict of ``loss_*`` tensors and may set ``model.last_stats``.
        train_loader: yields dict batches with ``images`` and ``targets``; its sampler should
            have ``set_epoch(epoch, start_batch=0)``.
        eval_fn: ``eval_fn(model, epoch) -> records`` (see :data:`EvalFn`), run on rank 0 every
            ``TEST.EVAL_PERIOD`` epochs and after the last; None disables evaluation.
        hooks: user hooks, run after the built-in ones (:func:`build_hooks`).
        progress: a tqdm bar per epoch; None = only when stderr is a terminal (rank 0 only).

    ``trainer.loop`` is the :class:`TrainLoop` (what hooks see as ``hook.trainer``).
    """

    #: What the warning of a warmup as long as the run names: the warmup key, its value as the user wrote it
    #: (None: the iterations), the peak learning rate's key. A stage with a solver of its own names its keys.
    warmup_keys: Tuple[str, Optional[str], str] = ("SOLVER.WARMUP_ITERS", None, "SOLVER.BASE_LR")

    def __init__(self, cfg, model: nn.Module, train_loader: Any, eval_fn: Optional[EvalFn] = None,
                 logger: Optional[logging.Logger] = None, progress: Optional[bool] = None,
                 hooks: Sequence[HookBase] = ()) -> None:
        self.cfg = cfg
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.output_dir = str(cfg.OUTPUT_DIR)
        solver = cfg.SOLVER
        try:
            iters_per_epoch = len(train_loader)
        except TypeError as e:
            raise TypeError("The training loader must have a length (batches per epoch).") from e
        if iters_per_epoch <= 0:
            raise ValueError(
                "The training loader yields no batch per epoch: the training set is smaller than one "
                f"batch (SOLVER.IMS_PER_BATCH {solver.IMS_PER_BATCH}). Lower the batch size or add data."
            )
        if int(solver.MAX_EPOCH) <= 0:
            raise ValueError(f"SOLVER.MAX_EPOCH must be > 0, got {solver.MAX_EPOCH}.")
        self.setup = setup_device(cfg)
        model = place_model(model, self.setup, bool(cfg.MODEL.SYNC_BN))
        # Built before any freezing so that a temporarily frozen backbone is in the groups.
        optimizer = build_optimizer(cfg, model)
        self.scheduler = build_lr_scheduler(cfg, optimizer, iters_per_epoch)
        scaler = torch.amp.GradScaler(self.setup.device.type, enabled=self.setup.use_scaler)
        freezable = backbone_parameters(model) if int(solver.FREEZE_ITERS) > 0 else []
        module = wrap_for_training(model, self.setup, [p for p in freezable if p.requires_grad])
        self.loop = TrainLoop(model, module, optimizer, scaler, train_loader, self.setup, int(solver.MAX_EPOCH),
                              float(solver.CLIP_GRAD_NORM))
        files = CheckpointManager(self.output_dir, keep=int(solver.CHECKPOINT_KEEP), enabled=get_rank() == 0)
        self.checkpointer = Checkpointer(self.loop, self.scheduler, cfg, files)
        progress = os.isatty(2) if progress is None else progress
        self.loop.register_hooks(build_hooks(cfg, self.loop, self.scheduler, self.checkpointer, freezable, eval_fn,
                                             bool(progress)))
        self.loop.register_hooks(list(hooks))

    # convenient views of the loop
    @property
    def model(self) -> nn.Module:
        return self.loop.model

    @property
    def hooks(self) -> List[HookBase]:
        return self.loop.hooks

    @property
    def best(self) -> Optional[Dict[str, Any]]:
        evals = [h for h in self.loop.hooks if isinstance(h, EvalHook)]
        return evals[0].best if evals else None

    def resume_or_load(self, resume: bool = False, weights: Optional[str] = None, drop_head: bool = False,
                       allow_config_change: bool = False) -> Optional[str]:
        """Resume from ``OUTPUT_DIR``'s last checkpoint, or load initial weights.

        With `resume` and a checkpoint present, the whole state is restored (see
        :class:`Checkpointer`; `allow_config_change` lets the run's settings differ from the
        checkpoint's) and its path returned. Otherwise `weights` (default
        ``MODEL.WEIGHTS``) is loaded into the model only; `drop_head` leaves the identity head
        at its initialisation (fine-tuning on other identities). Returns the path loaded, or None.
        """
        if resume:
            path = last_checkpoint(self.output_dir)
            if path is not None:
                self.checkpointer.resume(path, allow_config_change=allow_config_change)
                return path
            self.logger.info("--resume: no checkpoint in %s yet; starting from scratch.", self.output_dir)
        weights = str(self.cfg.MODEL.WEIGHTS) if weights is None else weights
        if weights:
            load_checkpoint(weights, model=self.loop.model, drop_head=drop_head)  # the model only, no training state
            self.logger.info("Loaded weights from %s%s.", weights, " without the identity head" if drop_head else "")
            return weights
        return None

    def _banner(self) -> None:
        loop, cfg, solver = self.loop, self.cfg, self.cfg.SOLVER
        device = loop.device
        gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
        groups = ", ".join(f"{g.get('name', i)}: {len(g['params'])} tensors, peak lr {g.get('initial_lr', g['lr']):.2e} "
                           f"wd {g['weight_decay']:.1e}" for i, g in enumerate(loop.optimizer.param_groups))
        warmup = int(solver.WARMUP_ITERS)
        lines = [
            f"Output dir: {os.path.abspath(self.output_dir)}",
            f"Device: {device}{gpu}; processes: {loop.world_size}; AMP: {solver.AMP}; channels_last: {self.setup.channels_last}",
            f"Model: {model_summary(loop.model)}",
            f"Optimizer: {solver.OPTIMIZER}; groups: {groups}",
            f"Schedule: {solver.SCHED}, {loop.max_epoch} epochs x {loop.iters_per_epoch} iterations = {loop.max_iter}; "
            + (f"linear warmup over {warmup} iterations from {float(solver.WARMUP_FACTOR):g} x the peak lr; "
               if warmup > 0 else "no warmup; ") + f"batch {solver.IMS_PER_BATCH}",
            "Model selection: " + ("best validation mAP (model_best.pth)" if int(cfg.TEST.VAL_IDS) > 0
                                   else "none (TEST.VAL_IDS 0): model_final.pth is the result"),
        ]
        for line in lines:
            self.logger.info(line)
        if warmup >= loop.max_iter:
            peak = max(self.scheduler.factor(i) for i in range(loop.max_iter))
            key, value, lr = self.warmup_keys
            self.logger.warning(
                "%s %s is not shorter than the whole run (%d iterations): the learning rate never reaches %s (at "
                "most %.0f%% of it). Lower %s or train longer.",
                key, str(warmup) if value is None else value, loop.max_iter, lr, 100 * peak, key,
            )

    def train(self) -> TrainResult:
        """Run (or continue) training to ``SOLVER.MAX_EPOCH``; returns a :class:`TrainResult`.

        Raises :class:`TrainingInterrupted` after saving a checkpoint when SIGINT/SIGTERM
        arrives, and :class:`NonFiniteLossError` when a loss term is NaN or infinite. A stop
        requested by a hook returns normally, with ``stop_reason`` set, after saving.
        """
        loop = self.loop
        if loop.rank == 0:
            # Written here rather than on construction: a resume that is refused must leave the
            # run's config.yaml as it was.
            save_config(self.cfg, os.path.join(self.output_dir, "config.yaml"))
            self._banner()
        if loop.epoch >= loop.max_epoch:
            self.logger.info("Training already finished (%d/%d epochs); nothing to do.", loop.epoch, loop.max_epoch)
        else:
            loop.model.train()
            try:
                loop.train()
            except NonFiniteLossError as e:
                e.checkpoint = self.checkpointer.last_saved
                raise
            finally:
                for hook in loop.hooks:  # the last checkpoint is written: signals may end the process again
                    if isinstance(hook, StopOnSignal):
                        hook.release()
        if loop.stop_reason is not None and loop.epoch >= loop.max_epoch:
            # A stop that came once every epoch was done (its end-of-epoch work included): the run
            # is complete, and nothing is left for a --resume.
            self.logger.info("A stop (%s) arrived after the last epoch was complete.", loop.stop_reason)
            loop.stop_reason = loop.stop_signal = None
        if loop.stop_reason is not None:
            if loop.stop_signal is not None:  # its message (the tool's one line) says what to do
                epoch, _ = loop.position()
                raise TrainingInterrupted(loop.stop_signal, self.checkpointer.last_saved, epoch, loop.iter)
            self.logger.warning("Stopped (%s) after iteration %d; continue with --resume.", loop.stop_reason, loop.iter)
        final, best = os.path.join(self.output_dir, FINAL_NAME), os.path.join(self.output_dir, BEST_NAME)
        if loop.rank == 0 and loop.stop_reason is None:
            if self.best is not None:
                self.logger.info("Best validation mAP %.2f at epoch %d: %s", self.best["value"], self.best["epoch"], best)
            self.logger.info("Training done: %s", final)
        return TrainResult(epoch=loop.epoch, iteration=loop.iter,
                           final_checkpoint=final if os.path.isfile(final) else None,
                           best_checkpoint=best if os.path.isfile(best) else None, best=self.best,
                           eval_records=loop.eval_records, stop_reason=loop.stop_reason)


__all__ = ["TrainResult", "Trainer", "backbone_parameters", "build_hooks"]
