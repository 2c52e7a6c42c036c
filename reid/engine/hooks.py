"""The built-in training hooks: everything around a step.

Each hook does one job; :func:`reid.engine.trainer.build_hooks` puts them in order (the
reasons are written there). A user's own hook derives from :class:`reid.engine.HookBase` and
is passed to ``reid.cli.train.main(argv, hooks=[...])``; docs/training.md has examples.
"""
from __future__ import annotations

import contextlib
import logging
import random
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from reid.utils.logger import MetricsWriter, format_duration, progress_bar
from reid.utils.process import derive_seed
from reid.utils.stop_request import STOP_SIGNALS, StopRequested, clear_stop, request_stop
from reid.utils.worker_signals import shutdown_workers, tolerate_worker_exits

from .checkpoint_files import BEST_NAME, FINAL_NAME, INTERRUPT_NAME, periodic_name
from .checkpointer import Checkpointer
from .distributed import run_on_main
from .errors import ResumableError
from .hook_base import HookBase
from .lr_scheduler import WarmupDecayLR

logger = logging.getLogger(__name__)

#: ``eval_fn(model, epoch)`` returns evaluation records: a list of mappings with "split"
#: ("val" or "test"), "dataset" and metric values in percent ("R-1", "R-5", "R-10", "mAP",
#: "mINP"). A mapping ``{"val/<dataset>": {...}, "test/<dataset>": {...}}`` is accepted too.
EvalFn = Callable[[nn.Module, int], Union[Sequence[Mapping[str, Any]], Mapping[str, Mapping[str, Any]]]]


class StopOnSignal(HookBase):
    """SIGINT (Ctrl-C), SIGTERM and SIGUSR1 end the run after the current step, with a checkpoint.

    Schedulers send SIGTERM to stop or preempt a job and SLURM's ``--signal`` sends SIGUSR1 ahead
    of a time limit, to every process of the job, loader workers included
    (:mod:`reid.utils.worker_signals` keeps those alive until the step is done). The handler only
    records the request (here and in :mod:`reid.utils.stop_request`, where an evaluation or a
    clustering in progress sees it and gives up): logging or saving inside a signal handler can
    deadlock or corrupt a file mid-write, so the loop acts on it at a safe point. A second Ctrl-C
    means "now" (KeyboardInterrupt); one within a second of the first is the same request
    delivered twice (a launcher forwarding the Ctrl-C its processes also received).
    """

    def __init__(self) -> None:
        self._previous: Dict[int, Any] = {}
        self._undo_tolerance: Callable[[], None] = lambda: None
        self._first: Optional[float] = None  # when the first stop signal arrived

    def _on_signal(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.trainer.stop_reason is not None and signum == signal.SIGINT and now - (self._first or now) >= 1.0:
            raise KeyboardInterrupt
        self._first = self._first or now
        request_stop(signum)
        self.trainer.request_stop(signal.Signals(signum).name, signum=signum)

    def before_train(self) -> None:
        self._first = None
        clear_stop()  # a request an earlier run in this process acted on is not this run's
        if threading.current_thread() is threading.main_thread():  # signal.signal needs it
            self._previous = {sig: signal.signal(sig, self._on_signal) for sig in STOP_SIGNALS}
            self._undo_tolerance = tolerate_worker_exits()

    def release(self) -> None:
        """Give the signals back (the handlers before training) once everything is over.

        Not in ``after_train``: other hooks save the last checkpoint there, and a second signal
        (a scheduler's, and the copy a launcher forwards) must not kill that write. The trainer
        calls this after the loop has returned.
        """
        t = self.trainer
        if t.stop_reason is not None or t.error is not None:
            # Workers that a stop signal reached (or killed) are ended now, so that a later run in
            # this process starts fresh ones rather than reusing them.
            shutdown_workers(t.loader)
        self._undo_tolerance()
        self._undo_tolerance = lambda: None
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
        clear_stop()


class SeedEachEpoch(HookBase):
    """Re-seed Python, NumPy and torch at every epoch start from (SEED, epoch, rank).

    What an epoch draws in this process (dropout, anything random outside the data workers)
    is then a function of the epoch, not of what ran before it (an evaluation, a resume).
    A single-process run resumed mid-epoch keeps the generator states the checkpointer
    restored instead; other ranks derive theirs from the position.
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)

    def before_epoch(self) -> None:
        t = self.trainer
        if t.start_batch > 0 and t.world_size == 1:
            return
        value = derive_seed(self.seed, t.epoch, t.rank, t.start_batch)
        random.seed(value)
        np.random.seed(value)
        torch.manual_seed(value)


class FreezeBackbone(HookBase):
    """Train only the neck and head for the first `iters` steps (``SOLVER.FREEZE_ITERS``)."""

    def __init__(self, params: Sequence[nn.Parameter], iters: int) -> None:
        # Only what was trainable: permanently frozen tensors stay frozen afterwards.
        self.params = [p for p in params if p.requires_grad]
        self.iters = int(iters)
        self.frozen = False

    def _set(self, frozen: bool) -> None:
        if frozen == self.frozen:
            return
        for p in self.params:
            p.requires_grad_(not frozen)
        self.frozen = frozen
        if frozen:
            logger.info("Backbone frozen for the first %d iterations (training neck and head only).", self.iters)
        else:
            logger.info("Backbone unfrozen at iteration %d.", self.trainer.iter)

    def before_step(self) -> None:
        self._set(self.trainer.iter < self.iters)

    def after_train(self) -> None:
        self._set(False)


class LRSchedule(HookBase):
    """Advance the per-iteration learning-rate schedule after every optimizer step."""

    def __init__(self, scheduler: WarmupDecayLR) -> None:
        self.scheduler = scheduler

    def after_step(self) -> None:
        self.scheduler.step()


class PeriodicCheckpoint(HookBase):
    """``model_XXXX.pth`` every `period` epochs, ``model_final.pth`` after the last one, and
    ``model_interrupted.pth`` when the run stops mid-epoch (signal or ``request_stop``).

    An epoch's checkpoint is written once the epoch is completely over, i.e. after every
    hook's ``after_epoch`` (user hooks run later than this one): at the next epoch's start, or
    at the end of training. It then holds every hook's state as the epoch left it (an early
    stopping counter that this epoch's evaluation moved, say).
    """

    def __init__(self, checkpointer: Checkpointer, period: int) -> None:
        self.checkpointer = checkpointer
        self.period = int(period)
        self._due: Optional[str] = None

    def scheduled_name(self) -> Optional[str]:
        """The checkpoint due after the current epoch, if any."""
        done = self.trainer.epoch + 1
        if done == self.trainer.max_epoch:
            return FINAL_NAME
        if self.period > 0 and done % self.period == 0:
            return periodic_name(done)
        return None

    def save_after_failure(self) -> Optional[str]:
        """Save the epoch's weights at once under its scheduled name (or as interrupted); rank 0."""
        self._due = None
        return self.checkpointer.save(self.scheduled_name() or INTERRUPT_NAME)

    def after_epoch(self) -> None:
        self._due = self.scheduled_name()

    def before_epoch(self) -> None:
        due, self._due = self._due, None
        # Every rank takes part: a failed write on rank 0 then stops the others at once.
        run_on_main(lambda: due and self.checkpointer.save(due), "saving a checkpoint", self.trainer.device)

    def after_train(self) -> None:
        t, due, self._due = self.trainer, self._due, None
        if t.error is None and t.stop_reason is not None:
            # A stop: every process left the loop at the same step. Rank 0 saves while the others
            # wait, so that none of them ends before the checkpoint is written (a launcher that
            # sees a process end stops the rest, rank 0 in the middle of its write included).
            name = due or (INTERRUPT_NAME if self.checkpointer.last_saved_iter != t.iter else None)
            run_on_main(lambda: name and self.checkpointer.save(name), "saving the checkpoint of a stop", t.device)
            return
        # No collective below: after an error the other processes may not be in after_train.
        if due:
            self.checkpointer.save(due)  # the last epoch's
        elif isinstance(t.error, ResumableError) and t.iter > 0:  # a setting to change: keep what was trained
            if self.checkpointer.last_saved_iter != t.iter:
                self.checkpointer.save(INTERRUPT_NAME)
            t.error.checkpoint = self.checkpointer.last_saved


def _as_records(out: Any) -> List[Dict[str, Any]]:
    """eval_fn's return value as a list of records with "split" and "dataset"."""
    if out is None:
        return []
    if isinstance(out, Mapping):
        if all(isinstance(v, Mapping) for v in out.values()):
            return [{"split": str(k).partition("/")[0] or "test", "dataset": str(k).partition("/")[2], **v}
                    for k, v in out.items()]
        out = [out]
    records = []
    for rec in out:
        if not isinstance(rec, Mapping):
            raise TypeError(f"eval_fn must return evaluation records (mappings), got {type(rec).__name__}.")
        records.append({"split": "test", "dataset": "", **rec})
    return records


class EvalHook(HookBase):
    """Evaluate on rank 0 every `period` epochs and after the last; keep the best on "val".

    Records go to ``trainer.eval_records`` (the writer hook puts them in metrics.jsonl). Only
    validation records select ``model_best.pth``: choosing on the test split would leak it.
    If the evaluation raises, the epoch's weights are saved first and the error ends the run
    on every process. State (checkpointed): the best validation score so far.
    """

    def __init__(self, eval_fn: EvalFn, period: int, select_on_val: bool, checkpointer: Checkpointer,
                 on_failure: Callable[[], Optional[str]]) -> None:
        self.eval_fn, self.period, self.select_on_val = eval_fn, int(period), bool(select_on_val)
        self.checkpointer, self.on_failure = checkpointer, on_failure
        self.best: Optional[Dict[str, Any]] = None

    def state_dict(self) -> Dict[str, Any]:
        return {"best": self.best}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.best = state.get("best")

    def after_epoch(self) -> None:
        done = self.trainer.epoch + 1
        if done == self.trainer.max_epoch or (self.period > 0 and done % self.period == 0):
            run_on_main(self._evaluate_or_save, "evaluation", self.trainer.device)

    def _evaluate_or_save(self) -> None:
        t = self.trainer
        done = t.epoch + 1
        model = t.eval_model
        was_training = model.training
        model.eval()
        try:
            records = _as_records(self.eval_fn(model, done))
        except StopRequested:
            raise  # not a failure: the loop stops and a resume evaluates this epoch again
        except Exception as e:
            # Hours of training must not be lost to an evaluation problem (a bad test set, a
            # metric typo): the trained state is written before the error ends the run.
            logger.error("Evaluation after epoch %d failed: %s: %s", done, type(e).__name__, e)
            path = self.on_failure()
            hint = (f"Training is complete: fix the evaluation settings, then evaluate these weights with "
                    f"tools/test.py --weights {path} (or tools/train.py --eval-only)."
                    if done == t.max_epoch else
                    "Fix the evaluation settings, then continue training with the same command plus --resume.")
            logger.error("The weights of epoch %d were saved to %s before stopping. %s", done, path, hint)
            raise
        finally:
            model.train(was_training)
        for rec in records:
            full = {"type": "eval", "split": rec["split"], "dataset": rec["dataset"], "epoch": done, "iter": t.iter}
            full.update({k: v for k, v in rec.items() if k not in full})
            t.eval_records.append(full)
            shown = "  ".join(f"{k} {float(full[k]):.2f}" for k in ("R-1", "R-5", "R-10", "mAP", "mINP") if k in full)
            logger.info("Eval epoch %d [%s %s]: %s", done, full["split"], full["dataset"], shown)
        self._update_best(records, done)

    def _update_best(self, records: Sequence[Mapping[str, Any]], done: int) -> None:
        val = [r for r in records if r["split"] == "val" and "mAP" in r]
        if not self.select_on_val or not val:
            return
        score = float(sum(float(r["mAP"]) for r in val) / len(val))
        if self.best is not None and score <= float(self.best["value"]):
            return
        self.best = {"metric": "val/mAP", "value": score, "epoch": done, "iteration": self.trainer.iter}
        path = self.checkpointer.save_weights(BEST_NAME, best=self.best)
        logger.info("New best validation mAP %.2f at epoch %d: saved %s", score, done, path)


class MetricsLogger(HookBase):
    """Log lines, ``metrics.jsonl`` (+ TensorBoard) and a tqdm progress bar with the ETA.

    Every `period` steps (and at each epoch end) one line and one "train" record give the
    means over the window of the step values (loss terms, head statistics, lr, grad norm),
    images/s and the ETA. The ETA averages over everything this process has trained so far:
    one window is too short a sample (a slow first batch or an evaluation make it swing).
    Evaluation records (``trainer.eval_records``) and other hooks' records
    (``trainer.log_records``) are written after each epoch.
    """

    def __init__(self, output_dir: str, period: int, enabled: bool, progress: bool) -> None:
        self.output_dir, self.period = output_dir, max(1, int(period))
        self.enabled, self.progress = bool(enabled), bool(progress) and bool(enabled)
        self.metrics: Optional[MetricsWriter] = None
        self._bars = contextlib.ExitStack()
        self._bar: Any = None
        self._written = self._written_other = 0
        self._reset_window()

    def _reset_window(self) -> None:
        self._sums: Dict[str, Any] = {}
        self._count = 0
        self._t_window = time.perf_counter()

    def before_train(self) -> None:
        t = self.trainer
        # A resumed run trains again what came after its checkpoint: those records go (one per iteration).
        self.metrics = MetricsWriter(self.output_dir, enabled=self.enabled, resume_at=t.iter,
                                     redo_epoch_end=t.start_batch >= t.iters_per_epoch)
        self._t0, self._iter0 = time.perf_counter(), self.trainer.iter
        self._written = len(self.trainer.eval_records)
        self._written_other = len(getattr(self.trainer, "log_records", ()))

    def before_epoch(self) -> None:
        t = self.trainer
        self._reset_window()
        if self.progress:
            self._bar = self._bars.enter_context(progress_bar(
                t.iters_per_epoch, f"epoch {t.epoch + 1}/{t.max_epoch}", initial=min(t.start_batch, t.iters_per_epoch),
                leave=False))

    def after_step(self) -> None:
        t = self.trainer
        for k, v in t.last_metrics.items():
            self._sums[k] = self._sums.get(k, 0.0) + v
        self._count += 1
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix(loss=f"{t.last_metrics['loss']:.3f}", refresh=False)
        if t.iter % self.period == 0 or t.start_batch == t.iters_per_epoch:
            self._write_window()

    def _write_window(self) -> None:
        t = self.trainer
        elapsed = time.perf_counter() - self._t_window
        sums = {k: float(v) for k, v in self._sums.items()}  # device tensors (grad_norm) sync here, once
        means = {k: v / self._count for k, v in sums.items() if k not in ("images", "grad_norm", "grad_norm_steps")}
        if sums.get("grad_norm_steps", 0.0) > 0:
            means["grad_norm"] = sums["grad_norm"] / sums["grad_norm_steps"]
        done_here = t.iter - self._iter0
        sec_per_iter = (time.perf_counter() - self._t0) / done_here if done_here else elapsed / self._count
        eta = (t.max_iter - t.iter) * sec_per_iter
        images_per_s = sums.get("images", 0.0) / max(elapsed, 1e-9)
        terms = sorted(k for k in means if k.startswith("loss_"))
        # Head statistics: s_p and s_n first (the ones every cosine head reports), then others.
        stats = sorted((k for k in means if k not in terms and k not in ("loss", "lr", "grad_norm")),
                       key=lambda k: ({"s_p": 0, "s_n": 1}.get(k, 2), k))
        shown = terms + stats + [k for k in ("grad_norm",) if k in means]
        self.metrics.write({"type": "train", "epoch": t.epoch + 1, "iter": t.iter, "lr": means["lr"],
                            "loss": means["loss"], **{k: means[k] for k in shown},
                            "images_per_s": images_per_s, "time": time.perf_counter() - self._t0, "eta_s": eta})
        self._reset_window()
        if not self.enabled:
            return
        parts = [f"epoch {t.epoch + 1}/{t.max_epoch}", f"iter {t.start_batch}/{t.iters_per_epoch}",
                 f"(total {t.iter}/{t.max_iter})", f"loss {means['loss']:.4f}"]
        parts += [f"{k} {means[k]:.4f}" for k in terms] + [f"{k} {means[k]:.3f}" for k in stats]
        if "grad_norm" in means:
            parts.append(f"grad_norm {means['grad_norm']:.2f}")
        parts += [f"lr {means['lr']:.2e}", f"{images_per_s:.1f} img/s", f"eta {format_duration(eta)}"]
        logger.info("  ".join(parts))

    def _write_eval_records(self) -> None:
        t = self.trainer
        others = list(getattr(t, "log_records", ()))  # a loop of another make may not have them
        for rec in others[self._written_other:] + t.eval_records[self._written:]:
            self.metrics.write(rec)
        self._written, self._written_other = len(t.eval_records), len(others)

    def after_epoch(self) -> None:
        self._bars.close()
        self._bar = None
        self._write_eval_records()

    def after_train(self) -> None:
        self._bars.close()
        self._bar = None
        if self.metrics is not None:
            self._write_eval_records()
            self.metrics.close()


__all__ = ["EvalFn", "EvalHook", "FreezeBackbone", "LRSchedule", "MetricsLogger", "PeriodicCheckpoint",
           "SeedEachEpoch", "StopOnSignal"]
