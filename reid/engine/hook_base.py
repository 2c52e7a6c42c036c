"""The contract of a training hook: the events the loop calls and the state it may checkpoint.

The loop that calls them is :class:`reid.engine.train_loop.TrainLoop` (its docstring has the
order of the events); the built-in hooks are in reid/engine/hooks.py.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping


class HookBase:
    """Base of training hooks: override any of the six events (all do nothing by default).

    ``self.trainer`` is the :class:`~reid.engine.train_loop.TrainLoop`, set when the hook is registered. A hook with
    state to carry across a resume (a best score, averaged weights) returns it from
    ``state_dict()`` (tensors and plain values) and takes it back in ``load_state_dict()``;
    the checkpointer stores it under the hook's ``name``.
    """

    trainer: Any  # the TrainLoop (which imports this module), set on registration

    @property
    def name(self) -> str:
        """Key of this hook's state in a checkpoint (its class name unless overridden)."""
        return type(self).__name__

    def before_train(self) -> None:
        """Before the first step (also on resume)."""

    def after_train(self) -> None:
        """After the last step, a stop, or an error (then ``trainer.error`` is set)."""

    def before_epoch(self) -> None:
        """Before the first step of each epoch (a resumed epoch included)."""

    def after_epoch(self) -> None:
        """After the last step of each epoch."""

    def before_step(self) -> None:
        """Before each step."""

    def after_step(self) -> None:
        """After each step; ``trainer.last_metrics`` holds what it logged."""

    def state_dict(self) -> Dict[str, Any]:
        """State to save in a checkpoint (empty: the hook has none)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Take back the state of ``state_dict()`` on resume."""


__all__ = ["HookBase"]
