"""Training engine: a loop that runs steps, hooks around it, checkpoints, devices, DDP helpers.

- :class:`TrainLoop` (train_loop.py): epochs of steps; :class:`HookBase`: what runs around them.
- hooks.py: the built-in hooks; trainer.py: :class:`Trainer`, which builds loop, checkpointer
  and hooks from a config (``build_hooks`` fixes their order).
- checkpointer.py: what a checkpoint holds and how resume restores it; checkpoint_files.py: the files.
- placement.py: device, AMP, SyncBN, channels_last, DDP wrapping; distributed.py: process groups.

The engine never imports ``reid.evaluation``: evaluation reaches the trainer as an
``eval_fn(model, epoch)`` callback built by ``reid.cli.train``.
"""
from .checkpoint_files import (
    CheckpointError,
    CheckpointManager,
    last_checkpoint,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from .checkpointer import Checkpointer
from .distributed import (
    DistInfo,
    PeerFailedError,
    barrier,
    cleanup_distributed,
    get_rank,
    get_world_size,
    init_distributed,
    is_main_process,
)
from .errors import NonFiniteLossError, ResumableError, TrainingInterrupted
from .hook_base import HookBase
from .hooks import EvalFn, EvalHook, FreezeBackbone, LRSchedule, MetricsLogger, PeriodicCheckpoint, SeedEachEpoch, StopOnSignal
from .lr_scheduler import WarmupDecayLR, build_lr_scheduler
from .optimizer import build_optimizer, build_param_groups
from .placement import AMP_MODES, DeviceSetup, amp_settings, setup_device
from .train_loop import TrainLoop
from .trainer import Trainer, TrainResult, backbone_parameters, build_hooks

__all__ = [
    "AMP_MODES",
    "CheckpointError",
    "CheckpointManager",
    "Checkpointer",
    "DeviceSetup",
    "DistInfo",
    "EvalFn",
    "EvalHook",
    "FreezeBackbone",
    "HookBase",
    "LRSchedule",
    "MetricsLogger",
    "NonFiniteLossError",
    "ResumableError",
    "PeerFailedError",
    "PeriodicCheckpoint",
    "SeedEachEpoch",
    "StopOnSignal",
    "TrainLoop",
    "TrainResult",
    "Trainer",
    "TrainingInterrupted",
    "WarmupDecayLR",
    "amp_settings",
    "backbone_parameters",
    "barrier",
    "build_hooks",
    "build_lr_scheduler",
    "build_optimizer",
    "build_param_groups",
    "cleanup_distributed",
    "get_rank",
    "get_world_size",
    "init_distributed",
    "is_main_process",
    "last_checkpoint",
    "load_checkpoint",
    "read_checkpoint",
    "save_checkpoint",
    "setup_device",
]
