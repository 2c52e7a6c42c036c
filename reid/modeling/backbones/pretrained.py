"""ImageNet state dicts for the backbones: unwrapping a saved file, and its error type."""
from __future__ import annotations

from typing import Dict

import torch


class PretrainedWeightsError(RuntimeError):
    """ImageNet weights were requested but could not be obtained or do not fit."""


def unwrap_state_dict(obj: object, path: str, expected: str) -> Dict[str, torch.Tensor]:
    """Return the tensor mapping inside a saved file (plain or wrapped in a dict).

    `expected` names the file that should have been given (for the error message).
    """
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} does not hold a state dict of tensors. "
            f"Point it to {expected}."
        )
    # Checkpoints saved from DataParallel/DDP prefix every key with "module.".
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in obj.items()}


__all__ = ["PretrainedWeightsError", "unwrap_state_dict"]
