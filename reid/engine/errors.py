"""The ways training ends early on purpose: a stop signal, a loss that is not finite, a setting that
cannot go on (which keeps the weights trained so far for ``--resume``)."""
from __future__ import annotations

import signal
from typing import Optional


class TrainingInterrupted(Exception):
    """Training stopped on SIGINT, SIGTERM or SIGUSR1 after saving a checkpoint.

    ``exit_code`` is the shell convention 128 + signal number (130 for Ctrl-C, 143 for
    SIGTERM, 138 for SIGUSR1), which a scheduler's script reads as "requeue, then resume";
    ``checkpoint`` is the file to resume from (None on ranks other than 0).
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
    """A loss term became NaN or infinite; nothing was stepped or saved for that iteration.

    ``checkpoint`` (the last good one) is filled in by whoever knows it (the trainer) before
    the message is shown; the message is built when it is read.
    """

    def __init__(self, term: str, value: float, iteration: int, epoch: int, batch: int,
                 checkpoint: Optional[str] = None) -> None:
        super().__init__(term, value)
        self.term = term
        self.value = value
        self.iteration = iteration
        self.epoch = epoch
        self.batch = batch
        self.checkpoint = checkpoint

    def __str__(self) -> str:
        last = (
            f"The last good checkpoint is {self.checkpoint} (resume from it with --resume)."
            if self.checkpoint
            else "No checkpoint was written before it."
        )
        return (
            f"Loss term {self.term} is {self.value} at iteration {self.iteration} (epoch {self.epoch + 1}, "
            f"batch {self.batch}); training stopped. {last} Try a lower SOLVER.BASE_LR, a longer "
            "SOLVER.WARMUP_ITERS, SOLVER.CLIP_GRAD_NORM > 0, or SOLVER.AMP off."
        )


class ResumableError(ValueError):
    """Training cannot go on with its current settings (e.g. clustering found too few pseudo-identities).

    :class:`~reid.engine.hooks.PeriodicCheckpoint` saves the weights trained so far before the run
    ends and fills in ``checkpoint``, so the message says where ``--resume`` continues once the
    setting the message names is changed.
    """

    checkpoint: Optional[str] = None

    def __str__(self) -> str:
        text = super().__str__()
        if self.checkpoint:
            text += (f" The weights trained so far are saved in {self.checkpoint}: change the setting and run the "
                     "same command with --resume (and the new setting) to continue.")
        return text


__all__ = ["NonFiniteLossError", "ResumableError", "TrainingInterrupted"]
