"""What ``tools/train.py`` runs: a :class:`TrainingRun` whose build steps are methods to override.

    from reid.training import TrainingRun, TrainingRequest
    class MyRun(TrainingRun):
        def build_model(self):                 # any step: data, model, loader + hooks, evaluation, ...
            model = super().build_model()
            ...
            return model
    run_training(cfg, TrainingRequest(), run_class=MyRun)

The order (:meth:`TrainingRun.run`): cheap config checks, the training data, the test sets, the
config completed from the data (class count, SIE cameras), the model, the evaluation callback; then
either an evaluation of given weights (``--eval-only``), or the loader and hooks (learning without
labels adds its own), the engine's :class:`~reid.engine.Trainer`, CLIP-ReID's first stage where the
model has one, training, and decision thresholds calibrated on the validation split at the end.
``reid/cli/train.py`` parses the flags and holds the run folder's lock around :func:`run_training`.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple, Type

from torch import nn

from reid.config.sie_keys import sie_node
from reid.data import TrainData, build_train_data, build_train_loader
from reid.data.build import check_dataset_names, is_tracklet_items
from reid.engine import HookBase, NonFiniteLossError, PeerFailedError, Trainer, TrainingInterrupted
from reid.engine.checkpoint_files import CheckpointError, last_checkpoint, load_checkpoint
from reid.engine.distributed import DistInfo, cleanup_distributed, init_distributed
from reid.evaluation.eval_sets import TestSets, check_test_settings, load_test_sets
from reid.evaluation.tracklet_extract import check_video_model
from reid.inference.decision_thresholds import calibrate_run
from reid.inference.loading import run_weights
from reid.modeling import build_model
from reid.utils.device import resolve_device
from reid.utils.file_io import remove_stale_temp_files
from reid.utils.logger import setup_run_logger
from reid.utils.process import seed_everything

from .checks import check_batch_identities, check_camera_count, check_unlabelled_keys
from .eval_fn import make_eval_fn
from .prompt_stage import PROMPT_DIR, check_prompt_learning, run_prompt_stage, split_hooks


@dataclass
class TrainingRequest:
    """How a run was asked for (the flags of ``tools/train.py``), beside its config.

    `resume` continues OUTPUT_DIR's last checkpoint; `eval_only` evaluates instead of training (the
    run's own result when `run_dir` names the run and no weights were named on the command:
    `weights_named`); `drop_head` loads MODEL.WEIGHTS without the identity head;
    `allow_config_change` lets a resumed run differ from its checkpoint's settings. `command` and
    `config_file` are logged.
    """

    resume: bool = False
    eval_only: bool = False
    drop_head: bool = False
    allow_config_change: bool = False
    run_dir: str = ""
    weights_named: bool = False
    config_file: str = ""
    command: str = ""


class TrainingRun:
    """One training run of `cfg` as `request` asks, with the caller's `hooks` after the built-in ones.

    Each ``build_*`` / ``check_*`` method is one step of :meth:`run`; a subclass overrides the ones
    it changes (fast-reid's DefaultTrainer pattern). ``self.cfg`` is completed from the data by
    :meth:`complete_config` before the model is built.
    """

    def __init__(self, cfg, request: TrainingRequest, hooks: Sequence[HookBase] = (),
                 dist_info: Optional[DistInfo] = None, logger: Optional[logging.Logger] = None,
                 resuming: bool = False) -> None:
        self.cfg, self.request, self.hooks = cfg, request, list(hooks)
        self.dist_info = dist_info or DistInfo()
        self.logger = logger or logging.getLogger(__name__)
        self.resuming = resuming  # --resume and OUTPUT_DIR holds a checkpoint of the second stage

    # ------------------------------------------------------------------ build steps
    def check_settings(self) -> None:
        """Cheap checks first: a misspelt name should not cost the time of loading the training set."""
        cfg = self.cfg
        check_dataset_names(cfg.DATASETS.NAMES, "DATASETS.NAMES")
        check_unlabelled_keys(cfg)
        check_test_settings(cfg)
        check_batch_identities(cfg, self.dist_info.world_size)
        check_prompt_learning(cfg)

    @property
    def unlabelled(self) -> bool:
        """Learning without labels (UDA.ENABLED): the training images' pids are never used."""
        return bool(self.cfg.UDA.ENABLED)

    def build_train_data(self) -> TrainData:
        """The training items and the validation split (logs each dataset's table)."""
        return build_train_data(self.cfg, labels_required=not self.unlabelled)

    def build_test_sets(self) -> TestSets:
        """DATASETS.TESTS, checked on every rank (the lists are cheap), so all stop alike before training."""
        return load_test_sets(self.cfg)

    def complete_config(self, data: TrainData) -> None:
        """What the config leaves to the data: the identity head's classes (none without labels: a
        cluster memory takes its place) and SIE's camera count."""
        cfg = self.cfg
        cfg.defrost()
        cfg.MODEL.HEADS.NUM_CLASSES = 0 if self.unlabelled else int(data.num_classes)
        node, _ = sie_node(cfg)
        if node.SIE_CAMERA:  # SIE: one embedding per camera of the training data
            node.NUM_CAMERAS = check_camera_count(cfg, data.items)
        cfg.freeze()

    def build_model(self) -> nn.Module:
        """The model; without ImageNet weights when a checkpoint replaces every weight anyway (they would
        be downloaded for nothing, and fail offline), and without a head for ``--eval-only`` (weights
        trained on other identities evaluate too). Only the model's copy changes: config.yaml keeps the
        run's settings."""
        model_cfg = self.cfg
        if self.request.eval_only or self.resuming:
            model_cfg = self.cfg.clone()
            model_cfg.defrost()
            model_cfg.MODEL.BACKBONE.PRETRAINED = False
            if self.request.eval_only:
                model_cfg.MODEL.HEADS.NUM_CLASSES = 0
            model_cfg.freeze()
        return build_model(model_cfg)

    def build_eval_fn(self, data: TrainData, test_sets: TestSets) -> Callable[..., List[dict]]:
        """The periodic evaluation: the validation split, then each test set."""
        return make_eval_fn(self.cfg, data.val_query, data.val_gallery, test_sets, self.logger)

    def build_loader_and_hooks(self, data: TrainData, model: nn.Module) -> Tuple[Any, List[HookBase]]:
        """The training loader and the hooks of the run's kind (learning without labels clusters every
        epoch and trains a memory: its hooks come before the caller's)."""
        if self.unlabelled:
            from reid.inference.cluster_runtime import cluster_runtimes
            from reid.uda import build_uda_training

            loader, uda_hooks = build_uda_training(self.cfg, data, model, cluster_runtimes())
            return loader, uda_hooks + self.hooks
        return build_train_loader(self.cfg, data.items), list(self.hooks)

    def build_trainer(self, model: nn.Module, loader: Any, eval_fn: Callable[..., List[dict]],
                      hooks: Sequence[HookBase]) -> Trainer:
        """The engine's trainer, resumed or with its initial weights loaded."""
        trainer = Trainer(self.cfg, model, loader, eval_fn=eval_fn, logger=self.logger, hooks=hooks)
        trainer.resume_or_load(resume=self.request.resume, drop_head=self.request.drop_head,
                               allow_config_change=self.request.allow_config_change)
        return trainer

    def run_first_stage(self, trainer: Trainer, data: TrainData, hooks: Sequence[HookBase]) -> bool:
        """CLIP-ReID's prompt stage before training (a model with a text head, unless the second stage
        has a checkpoint, which holds its result); False when a hook stopped it."""
        if getattr(trainer.model, "text_head", None) is None or self.resuming:
            return True
        return run_prompt_stage(self.cfg, trainer.model, data.items, int(data.num_classes), self.logger,
                                resume=self.request.resume, hooks=hooks,
                                allow_config_change=self.request.allow_config_change)

    def calibrate(self, data: TrainData) -> None:
        """Decision thresholds at TEST.VERIFICATION.FARS, chosen on held-out identities (never the test
        split), beside the final model."""
        out = str(self.cfg.OUTPUT_DIR)
        if self.dist_info.rank != 0 or not data.val_query or not os.path.isfile(os.path.join(out, "model_final.pth")):
            return
        path, record = calibrate_run(self.cfg, out, data.val_query, data.val_gallery)
        rows = ", ".join(f"FAR {far}: similarity {t['similarity']:.4f} (TAR {100 * t['tar']:.1f}%)"
                         for far, t in record["thresholds"].items())
        if rows:
            self.logger.info("Thresholds calibrated on the validation split with %s: %s; written to %s",
                             record["weights"], rows, path)
        else:  # each FAR's warning above says how many more identities would resolve it
            self.logger.warning("No threshold calibrated: the validation split resolves none of "
                                "TEST.VERIFICATION.FARS %s; %s lists them as unresolved.",
                                list(self.cfg.TEST.VERIFICATION.FARS), path)

    def evaluate_only(self, model: nn.Module, eval_fn: Callable[..., List[dict]]) -> int:
        """``--eval-only``: evaluate the run's result or the weights named (no training)."""
        cfg, out = self.cfg, str(self.cfg.OUTPUT_DIR)
        # A run's folder means its own result, as for tools/test.py --run (run_weights: model_best,
        # else model_final; else its last checkpoint): its config's MODEL.WEIGHTS is where its
        # training started (e.g. the source model of an adaptation), unless given on this command.
        own = (run_weights(out) or last_checkpoint(out)) if self.request.run_dir and not self.request.weights_named \
            else None
        weights = own or str(cfg.MODEL.WEIGHTS) or last_checkpoint(out)
        if not weights:
            raise CheckpointError(
                f"--eval-only needs weights: pass --weights FILE (or MODEL.WEIGHTS), or train first so that "
                f"{cfg.OUTPUT_DIR} has a checkpoint."
            )
        data = load_checkpoint(weights, model=model)
        model.to(resolve_device(str(cfg.MODEL.DEVICE)))
        # The epochs the checkpoint had trained (absent from files not written by this toolkit).
        epoch = data.get("epoch") if isinstance(data.get("epoch"), int) else None
        eval_fn(model, epoch or 0, when=f"with {weights}" + (f" (after epoch {epoch})" if epoch is not None else ""))
        return 0

    # ------------------------------------------------------------------ the run
    def run(self) -> int:
        """Every step in order; returns the exit code (0 done, 1 NaN loss or a failed peer, 128 + signal
        after a stop that --resume continues)."""
        if self.dist_info.rank == 0:
            self.logger.info("Command: %s", self.request.command)
            self.logger.info("Config file: %s", self.request.config_file or "(defaults only)")
        seed_everything(int(self.cfg.SEED), self.dist_info.rank)
        self.check_settings()
        data = self.build_train_data()
        test_sets = self.build_test_sets()
        self.complete_config(data)
        model = self.build_model()  # the trainer's start banner describes it
        if is_tracklet_items(data.items) or any(is_tracklet_items(t.query) for t in test_sets.values()):
            check_video_model(model)  # before any step: a model that cannot pool frames fails at its first clip
        eval_fn = self.build_eval_fn(data, test_sets)
        if self.request.eval_only:
            return self.evaluate_only(model, eval_fn)
        loader, hooks = self.build_loader_and_hooks(data, model)
        first_stage_hooks, hooks = split_hooks(hooks)
        trainer = self.build_trainer(model, loader, eval_fn, hooks)
        try:
            if not self.run_first_stage(trainer, data, first_stage_hooks):
                return 0  # a hook stopped the first stage: it said so; --resume continues it
            trainer.train()
        except TrainingInterrupted as e:
            self.logger.warning("%s", e)
            return e.exit_code  # 128 + signal: 130 SIGINT, 143 SIGTERM, 138 SIGUSR1
        except (NonFiniteLossError, PeerFailedError) as e:
            self.logger.error("%s", e)
            return 1
        self.calibrate(data)
        return 0


def check_output_dir(cfg, request: TrainingRequest) -> Optional[str]:
    """The checkpoint in OUTPUT_DIR (None if none); refuse to start a new run over it.

    A new run in a folder with checkpoints would overwrite them and mix two runs in
    metrics.jsonl and log.txt, so only --resume and --eval-only may use such a folder.
    """
    out = str(cfg.OUTPUT_DIR)
    found = last_checkpoint(out)
    # CLIP-ReID's first stage keeps its checkpoints in a sub-folder: a run stopped there is a run too.
    held = found or last_checkpoint(os.path.join(out, PROMPT_DIR))
    if held and not (request.resume or request.eval_only):
        raise CheckpointError(
            f"OUTPUT_DIR {out!r} already holds a training run (checkpoint {held}). Continue it with "
            f"--resume, or choose another OUTPUT_DIR (or delete {out!r}) to start a new run."
        )
    return found


def run_training(cfg, request: TrainingRequest, hooks: Sequence[HookBase] = (), main_rank: bool = True,
                 run_class: Type[TrainingRun] = TrainingRun) -> int:
    """Everything ``tools/train.py`` does once it holds the run folder (rank 0) or needs not: the
    folder checked, a write cut short before cleaned up, the process group joined, the log opened,
    and `run_class` run; returns the exit code."""
    out = str(cfg.OUTPUT_DIR)
    # Before anything is written: the log of an existing run must not get a refused run's lines.
    found = check_output_dir(cfg, request)
    # Safe only under the lock: no other process can be writing here now.
    stale = remove_stale_temp_files(out) if main_rank and os.path.isdir(out) else []
    dist_info = init_distributed(str(cfg.MODEL.DEVICE))
    try:
        logger = setup_run_logger(out, rank=dist_info.rank)
        for path in stale:
            logger.info("Removed %s, the temporary file of a write that was interrupted.", path)
        return run_class(cfg, request, hooks, dist_info, logger, resuming=bool(request.resume and found)).run()
    finally:
        cleanup_distributed()


__all__ = ["TrainingRequest", "TrainingRun", "check_output_dir", "run_training"]
