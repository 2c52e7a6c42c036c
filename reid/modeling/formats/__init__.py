"""Checkpoints of other toolkits: one module per format, recognised through ``FORMAT_REGISTRY``.

A new format is a new module (recognition, key mapping, suggested config; see
``base.WeightsFormat``) and one ``FORMAT_REGISTRY.register`` line below. Loading code
(``reid.engine.checkpoint_files``, ``reid.inference.loading``, ``tools/convert_weights.py``) only
calls :func:`detect_format` and :func:`convert_foreign_state`.
"""
from __future__ import annotations

import logging
from typing import Mapping, Optional

from torch import nn

from reid.utils.registry import Registry

from . import clipreid, fastreid, torchreid, transreid
from .base import ConvertedWeights, ForeignWeightsError, State, WeightsFormat, mapping_table

logger = logging.getLogger(__name__)

FORMAT_REGISTRY = Registry("checkpoint format")
FORMAT_REGISTRY.register("fastreid")(fastreid.FORMAT)
FORMAT_REGISTRY.register("torchreid")(torchreid.FORMAT)
FORMAT_REGISTRY.register("transreid")(transreid.FORMAT)
FORMAT_REGISTRY.register("clipreid")(clipreid.FORMAT)


def detect_format(state: Mapping[str, object]) -> Optional[WeightsFormat]:
    """The registered format whose key names `state` has, or None (this toolkit's own files)."""
    return next((fmt for fmt in map(FORMAT_REGISTRY.get, FORMAT_REGISTRY) if fmt.detect(state)), None)


def known_markers() -> str:
    """Each format's identifying key names, for messages about files that are none of them."""
    return "; ".join(f"{FORMAT_REGISTRY.get(n).label}: {FORMAT_REGISTRY.get(n).markers}" for n in FORMAT_REGISTRY)


def convert_foreign_state(model: nn.Module, state: State, source: str = "",
                          log: bool = True) -> Optional[ConvertedWeights]:
    """Map a foreign state dict onto `model` (loads nothing); None when `state` is no foreign format.

    Raises the format's :class:`ForeignWeightsError` (one line) when the file does not fit.
    With `log`, a line says what was recognised and each note (dropped classifier, ...) follows.
    """
    fmt = detect_format(state)
    if fmt is None:
        return None
    converted = fmt.convert(state, model, source)
    if log:
        logger.info("%s: %s, %d tensors mapped.", source or "weights", converted.description, len(converted.mapping))
        for note in converted.notes:
            logger.info("note: %s", note)
    return converted


__all__ = [
    "FORMAT_REGISTRY",
    "ConvertedWeights",
    "ForeignWeightsError",
    "WeightsFormat",
    "convert_foreign_state",
    "detect_format",
    "known_markers",
    "mapping_table",
]
