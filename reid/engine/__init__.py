"""Training engine: optimizer, LR schedule, checkpoints, distributed helpers and the trainer.

The engine never imports ``reid.evaluation``: evaluation reaches the trainer as an
``eval_fn(model, epoch)`` callback built by ``reid.cli.train``.
"""
from .checkpoint import (
    CheckpointError,
    CheckpointManager,
    last_checkpoint,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
)
from .distributed import (
    DistInfo,
    all_reduce_mean,
    barrier,
    cleanup_distributed,
    get_rank,
    get_world_size,
    init_distributed,
    is_main_process,
)
from .lr_scheduler import WarmupDecayLR, build_lr_scheduler
from .optimizer import build_optimizer, build_param_groups
from .trainer import NonFiniteLossError, Trainer, TrainingInterrupted, TrainResult, amp_settings

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "DistInfo",
    "NonFiniteLossError",
    "TrainResult",
    "Trainer",
    "TrainingInterrupted",
    "WarmupDecayLR",
    "all_reduce_mean",
    "amp_settings",
    "barrier",
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
]
