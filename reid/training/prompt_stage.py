"""CLIP-ReID's first stage, run by tools/train.py before the model trains
(``MODEL.CLIPREID.PROMPT_LEARNING``; Li et al., AAAI 2023).

1. The frozen image encoder's projections of the training images (test transforms, no SIE)
   are computed once and kept in ``OUTPUT_DIR/prompt_stage/image_features.pt`` (written
   atomically; a resumed first stage reads them back, so it continues on the same numbers).
2. The identities' prompt tokens train on them (reid.modeling.meta_arch.clipreid_prompts) with
   the ordinary trainer: ``SOLVER.PROMPT_STAGE`` as its solver (Adam, warmup + cosine), its
   checkpoints in ``OUTPUT_DIR/prompt_stage``, stops and ``--resume`` exactly as for any run.
3. Every identity's text feature goes into the model's ``text_head`` (a buffer saved with it),
   and the second stage trains the model with the image-to-text loss as well.

A resumed run whose second stage has a checkpoint skips all of this (the checkpoint holds the
text features). User hooks whose ``stage`` attribute is ``"prompts"`` run in the first stage,
all others in the second.
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
from typing import List, Sequence, Tuple

import torch

from reid.data import build_test_loader
from reid.data.feature_batches import build_feature_loader, check_feature_batch
from reid.engine import HookBase, Trainer
from reid.engine.checkpoint_files import CheckpointError, last_checkpoint
from reid.evaluation.extract import autocast_context
from reid.modeling.clip_text import prompt_slots
from reid.modeling.meta_arch.clipreid_prompts import build_prompt_learning
from reid.utils.file_io import atomic_write
from reid.utils.process import get_rank, get_world_size

PROMPT_DIR = "prompt_stage"
FEATURES_NAME = "image_features.pt"
#: A user hook with this ``stage`` attribute runs in the first stage.
PROMPT_HOOK_STAGE = "prompts"


def check_prompt_learning(cfg) -> None:
    """One-line errors for settings the two stages cannot run with (before any data is read)."""
    if not bool(cfg.MODEL.CLIPREID.PROMPT_LEARNING):
        return
    if str(cfg.MODEL.META_ARCHITECTURE).lower() != "clipreid":
        raise ValueError(f"MODEL.CLIPREID.PROMPT_LEARNING trains CLIP-ReID's text prompts, but MODEL.META_ARCHITECTURE "
                         f"is {cfg.MODEL.META_ARCHITECTURE!r}: set it to clipreid, or PROMPT_LEARNING False.")
    if bool(cfg.UDA.ENABLED):
        raise ValueError("MODEL.CLIPREID.PROMPT_LEARNING learns a prompt per labelled identity; learning without "
                         "labels (UDA.ENABLED) has none: set one of them False.")
    weight = float(cfg.MODEL.CLIPREID.I2T_WEIGHT)
    if not (math.isfinite(weight) and weight >= 0):
        raise ValueError(f"MODEL.CLIPREID.I2T_WEIGHT must be a finite number >= 0, got {weight}.")
    stage = cfg.SOLVER.PROMPT_STAGE
    for key in ("MAX_EPOCH", "IMS_PER_BATCH", "CHECKPOINT_PERIOD"):
        if int(stage[key]) < 1:
            raise ValueError(f"SOLVER.PROMPT_STAGE.{key} must be >= 1, got {stage[key]}.")
    if int(stage.WARMUP_EPOCHS) < 0:
        raise ValueError(f"SOLVER.PROMPT_STAGE.WARMUP_EPOCHS must be >= 0, got {stage.WARMUP_EPOCHS}.")
    for key in ("BASE_LR", "WEIGHT_DECAY", "WARMUP_FACTOR", "MIN_LR_FACTOR"):
        value = float(stage[key])
        if not (math.isfinite(value) and value >= 0) or (key == "BASE_LR" and value == 0):
            raise ValueError(f"SOLVER.PROMPT_STAGE.{key} must be a finite number {'>' if key == 'BASE_LR' else '>='} 0, "
                             f"got {stage[key]}.")
    prompt_slots(str(cfg.MODEL.CLIPREID.PROMPT))


def stage_config(cfg, num_items: int):
    """The first stage's config: ``SOLVER.PROMPT_STAGE`` as the solver, ``OUTPUT_DIR/prompt_stage``,
    no evaluation, no initial weights (the text encoder comes from the CLIP file)."""
    stage = cfg.SOLVER.PROMPT_STAGE
    iters = max(1, num_items // int(stage.IMS_PER_BATCH))
    out = cfg.clone()
    out.defrost()
    out.OUTPUT_DIR = os.path.join(str(cfg.OUTPUT_DIR), PROMPT_DIR)
    out.MODEL.WEIGHTS = ""
    solver = out.SOLVER
    solver.OPTIMIZER, solver.SCHED = "Adam", "cosine"  # CLIP-ReID's first stage: Adam, warmup then cosine
    solver.MAX_EPOCH, solver.IMS_PER_BATCH = int(stage.MAX_EPOCH), int(stage.IMS_PER_BATCH)
    solver.BASE_LR = float(stage.BASE_LR)
    solver.WEIGHT_DECAY = solver.WEIGHT_DECAY_NORM = solver.WEIGHT_DECAY_BIAS = float(stage.WEIGHT_DECAY)
    solver.BIAS_LR_FACTOR = solver.HEADS_LR_FACTOR = 1.0
    solver.MOMENTUM, solver.BETA2 = 0.9, 0.999
    solver.WARMUP_ITERS = int(stage.WARMUP_EPOCHS) * iters
    solver.WARMUP_FACTOR, solver.MIN_LR_FACTOR = float(stage.WARMUP_FACTOR), float(stage.MIN_LR_FACTOR)
    solver.FREEZE_ITERS, solver.CLIP_GRAD_NORM = 0, 0.0
    solver.CHECKPOINT_PERIOD = int(stage.CHECKPOINT_PERIOD)
    out.TEST.EVAL_PERIOD, out.TEST.VAL_IDS = 0, 0
    out.freeze()
    return out


def _digest(items: Sequence[Tuple[str, int, int]]) -> str:
    h = hashlib.sha1()
    for path, pid, _ in items:
        h.update(f"{path}\0{pid}\n".encode())
    return h.hexdigest()


@torch.no_grad()
def _extract(cfg, model, items: List, device: torch.device) -> torch.Tensor:
    was = model.training
    model.eval()
    out = []
    with autocast_context(device, str(cfg.SOLVER.AMP)):
        for batch in build_test_loader(cfg, items, []):
            out.append(model.prompt_features(batch["images"].to(device)).float().cpu())
    model.train(was)
    return torch.cat(out)


def image_features(cfg, model, items: List, device: torch.device,
                   logger: logging.Logger) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(features [N, P], labels [N])`` of the training items: read from the stage's folder when
    they were computed for these items, else computed (and saved by rank 0)."""
    path = os.path.join(str(cfg.OUTPUT_DIR), PROMPT_DIR, FEATURES_NAME)
    digest = _digest(items)
    labels = torch.tensor([int(pid) for _, pid, _ in items], dtype=torch.long)
    if os.path.isfile(path):
        try:
            saved = torch.load(path, map_location="cpu", weights_only=True)
            fits = isinstance(saved, dict) and saved.get("digest") == digest \
                and tuple(saved["features"].shape[:1]) == (len(items),)
        except Exception as e:  # a cache only: whatever is wrong with it, the features are computed again
            fits, why = False, f"cannot be read ({type(e).__name__})"
        else:
            why = "was computed for other training images"
        if fits:
            logger.info("First stage: the training images' features from %s.", path)
            return saved["features"], labels
        logger.warning("First stage: %s %s; computing the features again.", path, why)
    logger.info("First stage: features of %d training images from the frozen image encoder.", len(items))
    feats = _extract(cfg, model, items, device)
    if get_rank() == 0:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_write(path, lambda f: torch.save({"features": feats, "digest": digest}, f))
    return feats, labels


def run_prompt_stage(cfg, model, items: List, num_classes: int, logger: logging.Logger, resume: bool,
                     hooks: Sequence[HookBase] = (), allow_config_change: bool = False) -> bool:
    """Run (or finish) the first stage and put the identities' text features into `model`'s
    ``text_head``; False when a hook stopped it (saved; --resume continues). Raises
    TrainingInterrupted after saving when a signal stopped it."""
    out = os.path.join(str(cfg.OUTPUT_DIR), PROMPT_DIR)
    found = last_checkpoint(out)
    if found and not resume:
        raise CheckpointError(f"{out!r} already holds CLIP-ReID's first stage of a run (checkpoint {found}). "
                              f"Continue it with --resume, or choose another OUTPUT_DIR to start a new run.")
    check_feature_batch(len(items), int(cfg.SOLVER.PROMPT_STAGE.IMS_PER_BATCH), get_world_size())  # before extracting
    device = next(model.parameters()).device
    feats, labels = image_features(cfg, model, items, device, logger)
    scfg = stage_config(cfg, len(items))
    stage_model = build_prompt_learning(scfg, num_classes)
    loader = build_feature_loader(feats, labels, int(scfg.SOLVER.IMS_PER_BATCH), int(cfg.SEED), get_rank(),
                                  get_world_size())
    logger.info("CLIP-ReID's first stage: prompts %r for %d identities, %d epochs (%s).",
                str(cfg.MODEL.CLIPREID.PROMPT), num_classes, int(scfg.SOLVER.MAX_EPOCH), out)
    trainer = Trainer(scfg, stage_model, loader, logger=logger, hooks=list(hooks))
    stage = cfg.SOLVER.PROMPT_STAGE  # the stage's own keys, not the SOLVER keys it was translated into
    trainer.warmup_keys = ("SOLVER.PROMPT_STAGE.WARMUP_EPOCHS", f"{stage.WARMUP_EPOCHS} ({scfg.SOLVER.WARMUP_ITERS} "
                           "iterations)", "SOLVER.PROMPT_STAGE.BASE_LR")
    trainer.resume_or_load(resume=resume, allow_config_change=allow_config_change)  # as the second stage's
    if trainer.train().stop_reason is not None:  # (a signal raises TrainingInterrupted: "requeue me")
        return False
    text = trainer.model.text_features()
    model.text_head.set_features(text.to(device))
    logger.info("CLIP-ReID's first stage done: text features of %d identities; the second stage starts.", len(text))
    return True


def split_hooks(hooks: Sequence[HookBase]) -> Tuple[List[HookBase], List[HookBase]]:
    """``(first-stage hooks, second-stage hooks)`` by their ``stage`` attribute."""
    first = [h for h in hooks if getattr(h, "stage", None) == PROMPT_HOOK_STAGE]
    return first, [h for h in hooks if getattr(h, "stage", None) != PROMPT_HOOK_STAGE]


__all__ = ["FEATURES_NAME", "PROMPT_DIR", "PROMPT_HOOK_STAGE", "check_prompt_learning", "image_features",
           "run_prompt_stage", "split_hooks", "stage_config"]
