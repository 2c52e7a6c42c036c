"""What a training checkpoint holds, and how a resume restores it.

A resumable checkpoint (``model_XXXX.pth``, ``model_final.pth``, ``model_interrupted.pth``)
is one dict, loadable with ``torch.load(..., weights_only=True)``:

- ``model``: the weights to use (evaluated, tested, exported): ``trainer.eval_model``, which
  is the trained model unless a hook points it elsewhere (an average of the weights);
  ``train_model``: the trained weights, only when they differ from ``model``;
- ``optimizer``, ``scheduler``, ``scaler`` (None without fp16);
- ``epoch`` (complete epochs), ``iteration`` (steps done), ``sampler``
  (``{"epoch", "start_batch"}``: where the data continues), ``rng`` (Python, NumPy, torch and
  CUDA generator states of rank 0), ``cfg`` (YAML text), ``world_size``;
- ``hooks``: ``{hook name: state}`` for every hook with state (the best-model tracker, a
  user's weight average).

Everything else a resume needs follows from the config. Files are written by
:class:`reid.engine.checkpoint_files.CheckpointManager` (atomic, pruned, ``last_checkpoint`` pointer).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Mapping, Optional

from reid.config import load_config_from_text
from reid.config.differences import changed_keys, describe_changes, resume_free_keys
from reid.utils.process import get_rng_state, set_rng_state

from .checkpoint_files import CheckpointError, CheckpointManager, load_checkpoint, load_model_state, read_checkpoint
from .hook_base import HookBase
from .lr_scheduler import WarmupDecayLR
from .train_loop import TrainLoop

logger = logging.getLogger(__name__)


class Checkpointer:
    """Saves the state of `loop` (and its hooks) and restores it on resume.

    Args:
        loop: the training loop (model, optimizer, scaler, position, hooks).
        scheduler: the LR schedule (stepped by a hook; its state lives in the checkpoint).
        cfg: the run's config (stored as YAML text).
        files: where and how checkpoint files are written (rank 0 only).
    """

    def __init__(self, loop: TrainLoop, scheduler: WarmupDecayLR, cfg, files: CheckpointManager) -> None:
        self.loop, self.scheduler, self.cfg, self.files = loop, scheduler, cfg, files
        self.last_saved: Optional[str] = None
        self.last_saved_iter = -1

    # ------------------------------------------------------------------ saving
    def hook_states(self) -> Dict[str, Any]:
        """``{name: state}`` of the hooks that have state (two hooks may not share a name)."""
        states: Dict[str, Any] = {}
        for hook in self.loop.hooks:
            state = hook.state_dict()
            if not state:
                continue
            if hook.name in states:
                raise ValueError(f"Two training hooks with state are both named {hook.name!r}; give one another name.")
            states[hook.name] = state
        return states

    def state(self) -> Dict[str, Any]:
        """The whole resumable state at the loop's current position."""
        loop = self.loop
        epoch, start_batch = loop.position()
        state = {
            "model": loop.eval_model.state_dict(),
            "optimizer": loop.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": loop.scaler.state_dict() if loop.scaler.is_enabled() else None,
            "epoch": int(epoch),
            "iteration": int(loop.iter),
            "sampler": {"epoch": int(epoch), "start_batch": int(start_batch)},
            "rng": get_rng_state(),
            "cfg": self.cfg.dump(),
            "hooks": self.hook_states(),
            "world_size": int(loop.world_size),
        }
        if loop.eval_model is not loop.model:
            state["train_model"] = loop.model.state_dict()
        return state

    def save(self, name: str) -> Optional[str]:
        """Write a resumable checkpoint `name` (rank 0; None elsewhere) and log it."""
        path = self.files.save(name, self.state())
        self.last_saved, self.last_saved_iter = path, self.loop.iter
        if path:
            epoch, start_batch = self.loop.position()
            where = f"{epoch} epoch(s) complete" + (f" + {start_batch} batch(es) of epoch {epoch + 1}" if start_batch else "")
            logger.info("Saved checkpoint %s (iteration %d: %s).", path, self.loop.iter, where)
        return path

    def save_weights(self, name: str, **extra: Any) -> Optional[str]:
        """Write the weights to use (``eval_model``) and `extra` values: not resumable (model_best)."""
        state = {"model": self.loop.eval_model.state_dict(), "epoch": self.loop.position()[0],
                 "iteration": self.loop.iter, "cfg": self.cfg.dump(), **extra}
        return self.files.save(name, state, resumable=False)

    # ------------------------------------------------------------------ loading
    def resume(self, path: str, allow_config_change: bool = False) -> Dict[str, Any]:
        """Restore everything saved in `path`: weights, optimizer, schedule, scaler, position,
        RNG (one process, mid-epoch) and hook states. Returns the checkpoint dict.

        The run's config must be the one the checkpoint was trained with, but for the keys that do
        not change what is trained (:data:`reid.config.differences.RESUME_FREE_KEYS`): other changes
        are refused, naming the keys, unless `allow_config_change` (then they are logged).
        """
        loop = self.loop
        data = read_checkpoint(path)
        self._check_config(data, path, allow_config_change)
        load_checkpoint(path, optimizer=loop.optimizer, scheduler=self.scheduler, data=data)
        load_model_state(loop.model, data.get("train_model") or data["model"], path)
        if loop.eval_model is not loop.model:
            load_model_state(loop.eval_model, data["model"], path)
        if loop.scaler.is_enabled():
            if data.get("scaler") is not None:
                loop.scaler.load_state_dict(data["scaler"])
            else:
                # A run switched to fp16 on resume: the scaler starts afresh and finds its scale
                # within a few iterations.
                logger.info("%s has no gradient-scaler state (saved without fp16); starting a new scaler.", path)
        try:
            sampler = data.get("sampler") or {"epoch": int(data.get("epoch", 0)), "start_batch": 0}
            epoch, start_batch = int(sampler["epoch"]), int(sampler["start_batch"])
            iteration = int(data.get("iteration", epoch * loop.iters_per_epoch + start_batch))
        except (TypeError, ValueError, KeyError, AttributeError):
            raise CheckpointError(f"Checkpoint {path}: its training position (epoch, sampler, iteration) is damaged; "
                                  "resume from another checkpoint of the run, or start a new run.") from None
        if min(epoch, start_batch, iteration) < 0:
            raise CheckpointError(f"Checkpoint {path}: its training position is negative (epoch {epoch}, batch "
                                  f"{start_batch}, iteration {iteration}); resume from another checkpoint.")
        loop.epoch, loop.start_batch, loop.iter = epoch, start_batch, iteration
        if loop.start_batch > 0 and loop.world_size == 1 and data.get("rng") is not None:
            # Mid-epoch: the next step must draw what it would have drawn without the stop.
            # (Other ranks' states are not saved; they derive theirs from the position.)
            set_rng_state(data["rng"])
        self._restore_hooks(data, path)
        self.last_saved, self.last_saved_iter = path, loop.iter
        self._check_schedule(path)
        if loop.epoch >= loop.max_epoch:  # a finished run: nothing to continue (the trainer says so)
            logger.info("Resumed from %s: all %d epoch(s) (%d iterations) done.", path, loop.epoch, loop.iter)
        else:
            logger.info("Resumed from %s: %d epoch(s) and %d iteration(s) done, continuing at epoch %d batch %d.",
                        path, loop.epoch, loop.iter, loop.epoch + 1, loop.start_batch)
        return data

    def _check_config(self, data: Mapping[str, Any], path: str, allow_change: bool) -> None:
        text = data.get("cfg")
        if not isinstance(text, str):
            logger.warning("%s stores no config to compare this run's settings with; resuming with this run's.", path)
            return
        unknown: List[str] = []
        try:
            stored = load_config_from_text(text, f"checkpoint {path}", unknown=unknown)
        except ValueError as e:  # a damaged stored config
            logger.warning("Cannot compare the config stored in %s with this run's (%s); resuming with this run's.",
                           path, e)
            return
        if unknown:  # written by another version: the keys both know are still compared
            logger.warning("The config stored in %s has keys this version does not know (%s); the others are "
                           "compared.", path, ", ".join(unknown[:10]) + (" ..." if len(unknown) > 10 else ""))
        changes = changed_keys(stored, self.cfg, resume_free_keys(self.cfg))
        if not changes:
            return
        if allow_change:
            logger.warning("Resuming %s with settings it was not trained with (--allow-config-change): %s.",
                           path, describe_changes(changes))
            return
        raise CheckpointError(
            f"Cannot resume {path}: this run's config differs from the one it was trained with in "
            f"{describe_changes(changes)}. Resume with the run's own settings (undo the edit of its config.yaml or "
            f"drop the override), start a new run from these weights (MODEL.WEIGHTS {path} OUTPUT_DIR <new folder>), "
            "or pass --allow-config-change to continue with the new values."
        )

    def _restore_hooks(self, data: Mapping[str, Any], path: str) -> None:
        states = dict(data.get("hooks") or {})
        if "hooks" not in data and data.get("best"):
            states["EvalHook"] = {"best": data["best"]}  # checkpoints written before hooks existed
        for hook in self.loop.hooks:
            if type(hook).state_dict is HookBase.state_dict:
                continue  # a hook without state
            if hook.name in states:
                hook.load_state_dict(states.pop(hook.name))
            else:
                logger.warning("Hook %s has state but %s has none for it; it starts afresh.", hook.name, path)
        for name in states:
            logger.warning("%s holds the state of a hook %r that this run does not have; it is ignored.", path, name)

    def _check_schedule(self, path: str) -> None:
        loop, sched = self.loop, self.scheduler
        if loop.max_iter > sched.max_iters:
            # The schedule (and its length) comes from the checkpoint so that a resume continues
            # the same curve; past its end the learning rate would stay at its final value.
            ckpt_iters = sched.max_iters
            ckpt_epochs = ckpt_iters // max(1, sched.iters_per_epoch)
            end_lr = sched.factor(ckpt_iters) * float(sched.base_lrs[0])
            raise CheckpointError(
                f"Cannot resume {path} for {loop.max_iter} iterations ({loop.max_epoch} epoch(s) x "
                f"{loop.iters_per_epoch}): its LR schedule ends after {ckpt_iters} iterations ({ckpt_epochs} "
                f"epoch(s) x {sched.iters_per_epoch}), so the {loop.max_iter - ckpt_iters} extra iterations would "
                f"train at the schedule's final learning rate {end_lr:.2e}. To train longer, start a new run with "
                f"a fresh schedule from these weights in another OUTPUT_DIR (MODEL.WEIGHTS {path} OUTPUT_DIR "
                f"<new folder>, without --resume); to continue this run, resume with its original "
                f"SOLVER.MAX_EPOCH {ckpt_epochs} (and the same batch size and datasets)."
            )
        if sched.iters_per_epoch != loop.iters_per_epoch or sched.max_iters != loop.max_iter:
            logger.warning(
                "Resuming %s: it was trained with %d iterations/epoch and %d iterations in all, this run "
                "has %d and %d (MAX_EPOCH, batch size or dataset changed). The checkpoint's LR schedule is kept.",
                path, sched.iters_per_epoch, sched.max_iters, loop.iters_per_epoch, loop.max_iter,
            )


__all__ = ["Checkpointer"]
