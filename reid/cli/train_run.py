"""What ``tools/train.py`` runs: data -> model -> trainer, with periodic evaluation wired in.

This is the one place that joins the engine and the evaluator (the engine takes an
``eval_fn`` callback so that it never imports evaluation). reid/cli/train.py parses the
flags and holds the run folder's lock around :func:`run_training`.
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import Callable, List, Optional

from reid.data import build_train_data, build_train_loader
from reid.engine import HookBase, NonFiniteLossError, PeerFailedError, Trainer, TrainingInterrupted
from reid.engine.checkpoint import CheckpointError, last_checkpoint, load_checkpoint
from reid.engine.distributed import cleanup_distributed, init_distributed
from reid.evaluation.evaluator import evaluate_model, format_draws, format_table
from reid.inference.calibration import calibrate_run
from reid.inference.loading import run_weights, weights_override
from reid.modeling import build_model
from reid.utils.device import resolve_device
from reid.utils.file_io import remove_stale_temp_files
from reid.utils.process import seed_everything

from .args import overrides
from .prompt_stage import PROMPT_DIR, check_prompt_learning, run_prompt_stage, split_hooks
from .common import (
    TestSets,
    check_batch_identities,
    check_dataset_names,
    check_test_settings,
    check_unlabelled_keys,
    load_test_sets,
    setup_run,
)


def make_eval_fn(
    cfg, val_query: list, val_gallery: list, test_sets: TestSets, logger: logging.Logger
) -> Callable[..., List[dict]]:
    """``eval_fn(model, epoch)`` for the trainer: the validation split (if any), then each test set.

    `test_sets` holds the query and gallery lists (and protocol) of DATASETS.TESTS, loaded before
    training so that a bad test set stops the run before it trains. Only validation records select
    a model. A gallery-draws test set's records are the means over its draws.
    """

    def eval_fn(model, epoch: int, when: str = "") -> List[dict]:
        """`when` titles the tables (default: "after epoch <epoch>")."""
        records = []
        if val_query:
            res = evaluate_model(cfg, model, val_query, val_gallery, rerank=False)
            # The validation identities come from the training datasets: named after them.
            records.append({"split": "val", "dataset": "+".join(map(str, cfg.DATASETS.NAMES)), **res.metrics["plain"]})
        for name, test in test_sets.items():
            res = evaluate_model(cfg, model, test.query, test.gallery, protocol=test.protocol)
            for row, metrics in res.metrics.items():
                label = name if row == "plain" else f"{name}+{row}"
                records.append({"split": "test", "dataset": label, **metrics})
            title = f"{name} {when or f'after epoch {epoch}'}"
            if res.draws:
                title += f" (mean of {res.draws['num_draws']} gallery draws)"
                logger.info("\n%s", format_draws(res, title=f"{title}, with the standard deviation:"))
            else:
                logger.info("\n%s", format_table(res.metrics, title=f"{title}:"))
        return records

    return eval_fn


def check_output_dir(cfg, args: argparse.Namespace) -> Optional[str]:
    """The checkpoint in OUTPUT_DIR (None if none); refuse to start a new run over it.

    A new run in a folder with checkpoints would overwrite them and mix two runs in
    metrics.jsonl and log.txt, so only --resume and --eval-only may use such a folder.
    """
    out = str(cfg.OUTPUT_DIR)
    found = last_checkpoint(out)
    # CLIP-ReID's first stage keeps its checkpoints in a sub-folder: a run stopped there is a run too.
    held = found or last_checkpoint(os.path.join(out, PROMPT_DIR))
    if held and not (args.resume or args.eval_only):
        raise CheckpointError(
            f"OUTPUT_DIR {out!r} already holds a training run (checkpoint {held}). Continue it with "
            f"--resume, or choose another OUTPUT_DIR (or delete {out!r}) to start a new run."
        )
    return found


def run_training(cfg, args: argparse.Namespace, hooks: List[HookBase], main_rank: bool) -> int:
    """Everything ``tools/train.py`` does once it holds the run folder (rank 0) or needs not."""
    out = str(cfg.OUTPUT_DIR)
    # Before anything is written: the log of an existing run must not get a refused run's lines.
    found = check_output_dir(cfg, args)
    # Safe only under the lock: no other process can be writing here now.
    stale = remove_stale_temp_files(out) if main_rank and os.path.isdir(out) else []
    dist_info = init_distributed(str(cfg.MODEL.DEVICE))
    try:
        logger, _ = setup_run(cfg, rank=dist_info.rank)
        for path in stale:
            logger.info("Removed %s, the temporary file of a write that was interrupted.", path)
        return _run(cfg, args, dist_info, logger, hooks, resuming=bool(args.resume and found))
    finally:
        cleanup_distributed()


def _run(cfg, args, dist_info, logger: logging.Logger, hooks: List[HookBase], resuming: bool = False) -> int:
    if dist_info.rank == 0:
        logger.info("Command: %s", args.command)
        config_file = os.path.join(args.run, "config.yaml") if args.run else args.config_file
        logger.info("Config file: %s", config_file or "(defaults only)")
    seed_everything(int(cfg.SEED), dist_info.rank)
    # Cheap checks first: a misspelt name should not cost the time of loading the training set.
    check_dataset_names(cfg.DATASETS.NAMES, "DATASETS.NAMES")
    check_unlabelled_keys(cfg)
    check_test_settings(cfg)
    check_batch_identities(cfg, dist_info.world_size)
    check_prompt_learning(cfg)
    uda = bool(cfg.UDA.ENABLED)  # learning without labels: the training images' pids are never used
    data = build_train_data(cfg, labels_required=not uda)  # logs each dataset's table and the validation split
    # Every rank checks (the lists are cheap to read), so all stop alike before any training.
    test_sets = load_test_sets(cfg)
    cfg.defrost()
    cfg.MODEL.HEADS.NUM_CLASSES = 0 if uda else int(data.num_classes)  # UDA: a cluster memory instead
    if cfg.MODEL.TRANSREID.SIE_CAMERA:  # SIE: one embedding per camera of the training data
        cameras = 1 + max((int(item[2]) for item in data.items), default=0)
        if cameras > int(cfg.MODEL.TRANSREID.NUM_CAMERAS) > 0:
            raise ValueError(f"The training data has camera ids up to {cameras - 1} but MODEL.TRANSREID.NUM_CAMERAS "
                             f"is {cfg.MODEL.TRANSREID.NUM_CAMERAS}: set it to {cameras} (or 0 to count them).")
        cfg.MODEL.TRANSREID.NUM_CAMERAS = int(cfg.MODEL.TRANSREID.NUM_CAMERAS) or cameras
    cfg.freeze()
    model_cfg = cfg
    if args.eval_only or resuming:
        # A checkpoint replaces every weight, so ImageNet weights would be downloaded for nothing
        # (and fail offline). Only the model's copy changes: config.yaml keeps the run's setting.
        model_cfg = cfg.clone()
        model_cfg.defrost()
        model_cfg.MODEL.BACKBONE.PRETRAINED = False
        if args.eval_only:
            # Evaluation needs no identity head, so weights trained on other identities (another
            # class count) evaluate too, as with tools/test.py.
            model_cfg.MODEL.HEADS.NUM_CLASSES = 0
        model_cfg.freeze()
    model = build_model(model_cfg)  # the trainer's start banner describes it
    eval_fn = make_eval_fn(cfg, data.val_query, data.val_gallery, test_sets, logger)

    if args.eval_only:
        # A run's folder means its own result, as for tools/test.py --run (run_weights: model_best,
        # else model_final; else its last checkpoint): its config's MODEL.WEIGHTS is where its
        # training started (e.g. the source model of an adaptation), unless given on this command.
        named = bool(args.weights) or weights_override(overrides(args)) is not None
        out = str(cfg.OUTPUT_DIR)
        own = (run_weights(out) or last_checkpoint(out)) if getattr(args, "run", None) and not named else None
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

    if uda:
        from reid.uda import build_uda_training

        loader, uda_hooks = build_uda_training(cfg, data, model)
        hooks = uda_hooks + list(hooks)
    else:
        loader = build_train_loader(cfg, data.items)
    prompt_hooks, hooks = split_hooks(hooks)
    trainer = Trainer(cfg, model, loader, eval_fn=eval_fn, logger=logger, hooks=hooks)
    trainer.resume_or_load(resume=args.resume, drop_head=args.drop_head,
                           allow_config_change=bool(getattr(args, "allow_config_change", False)))
    try:
        # CLIP-ReID's first stage, unless the second has a checkpoint (which holds its result).
        if getattr(model, "text_head", None) is not None and not resuming:
            if not run_prompt_stage(cfg, trainer.model, data.items, int(data.num_classes), logger,
                                    resume=bool(args.resume), hooks=prompt_hooks,
                                    allow_config_change=bool(getattr(args, "allow_config_change", False))):
                return 0  # a hook stopped the first stage: it said so; --resume continues it
        trainer.train()
    except TrainingInterrupted as e:
        logger.warning("%s", e)
        return e.exit_code  # 128 + signal: 130 SIGINT, 143 SIGTERM, 138 SIGUSR1
    except (NonFiniteLossError, PeerFailedError) as e:
        logger.error("%s", e)
        return 1
    out = str(cfg.OUTPUT_DIR)
    if dist_info.rank == 0 and data.val_query and os.path.isfile(os.path.join(out, "model_final.pth")):
        # Decision thresholds at TEST.VERIFICATION.FARS, chosen on held-out identities (never the test split).
        path, record = calibrate_run(cfg, out, data.val_query, data.val_gallery)
        rows = ", ".join(f"FAR {far}: similarity {t['similarity']:.4f} (TAR {100 * t['tar']:.1f}%)"
                         for far, t in record["thresholds"].items())
        if rows:
            logger.info("Thresholds calibrated on the validation split with %s: %s; written to %s",
                        record["weights"], rows, path)
        else:  # each FAR's warning above says how many more identities would resolve it
            logger.warning("No threshold calibrated: the validation split resolves none of TEST.VERIFICATION.FARS "
                           "%s; %s lists them as unresolved.", list(cfg.TEST.VERIFICATION.FARS), path)
    return 0


__all__ = ["check_output_dir", "make_eval_fn", "run_training"]
