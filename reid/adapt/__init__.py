"""Adapting a re-ID model to a site from its own videos, without labels (tools/adapt.py, docs/adapt.md).

Track with the model, turn the tracks into unlabelled crops, train on them without labels, track
again, and report what changed: :func:`run_recipe` with an :class:`AdaptRequest`.
"""
from .recipe import DEFAULT_EPOCHS, STAGES, AdaptRequest, run_recipe
from .report import summary_line
from .stages import ModelSpec, StageStopped

__all__ = ["AdaptRequest", "DEFAULT_EPOCHS", "ModelSpec", "STAGES", "StageStopped", "run_recipe", "summary_line"]
