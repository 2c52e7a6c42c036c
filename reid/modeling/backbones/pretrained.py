"""Pretrained (ImageNet, or self-supervised) state dicts for the backbones: reading a saved file, checking its values, its error type."""
from __future__ import annotations

import pickle
from typing import Dict, Mapping

import torch
from torch import nn

from reid.utils.file_signatures import file_kind
from reid.utils.path_kinds import file_problem, is_missing
from reid.utils.value_checks import weight_problem

from ..state_fit import misfit


class PretrainedWeightsError(RuntimeError):
    """ImageNet weights were requested but could not be obtained or do not fit."""


def _strip_module(state: Mapping[str, object]) -> Dict[str, object]:
    """Checkpoints saved from DataParallel/DDP prefix every key with "module."."""
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def _fine_tuned(obj: Mapping[str, object]) -> bool:
    """Whether a file is a whole re-ID model rather than backbone weights: this toolkit's checkpoints
    (a ``model`` entry with ``backbone.*`` keys) or TransReID's / PersonViT's (``base.*`` keys beside a BNNeck)."""
    model = obj.get("model")
    if isinstance(model, dict) and any(str(k).startswith(("backbone.", "module.backbone.")) for k in model):
        return True
    keys = _strip_module(obj)
    return "bottleneck.weight" in keys and any(str(k).startswith("base.") for k in keys)


def unwrap_state_dict(obj: object, path: str, expected: str) -> Dict[str, torch.Tensor]:
    """Return the tensor mapping inside a saved file (plain or wrapped in a dict).

    `expected` names the file that should have been given (for the error message).
    """
    if isinstance(obj, dict) and _fine_tuned(obj):
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} is a fine-tuned re-ID checkpoint (a whole model, not backbone "
            "weights); load it with MODEL.WEIGHTS (--weights), or point PRETRAINED_PATH to "
            f"{expected}.")
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
        else:  # self-supervised (DINO-style) files, e.g. PersonViT's: the teacher's backbone is the model
            teacher = obj.get("teacher")
            if isinstance(teacher, dict):
                inner = {k.split("backbone.", 1)[1]: v for k, v in teacher.items() if "backbone." in k}
                obj = inner or teacher  # a teacher saved without its projection head has no "backbone." prefix
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise PretrainedWeightsError(
            f"MODEL.BACKBONE.PRETRAINED_PATH={path!r} does not hold a state dict of tensors. "
            f"Point it to {expected}."
        )
    return _strip_module(obj)


def read_pretrained(path: str, expected: str) -> Dict[str, torch.Tensor]:
    """The state dict in weights file `path` (``weights_only=True``); one error line when the file
    cannot be read or holds no state dict. `expected` names the file that should have been given."""
    key = f"MODEL.BACKBONE.PRETRAINED_PATH={path!r}"
    problem = file_problem(path)  # a FIFO would block torch.load forever
    if is_missing(problem):
        raise PretrainedWeightsError(
            f"{key} {problem}; download {expected} and point it there, or set MODEL.BACKBONE.PRETRAINED False."
        )
    if problem:
        raise PretrainedWeightsError(f"{key} {problem}; point it to {expected}.")
    kind = file_kind(path)
    if not kind.startswith("a torch checkpoint") and kind != "a zip archive":
        raise PretrainedWeightsError(f"{key} is {kind}, not a weights file written by torch.save; point it to "
                                     f"{expected}.")
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # damaged, or Python objects besides tensors (never unpickled: unsafe)
        raise PretrainedWeightsError(
            f"{key} is damaged or holds Python objects besides tensors (e.g. a "
            "training checkpoint that saved its arguments), which are not loaded from files; save its state "
            "dict alone (docs/transformers.md, 'Files with Python objects') and point it to that."
        ) from None
    except Exception as e:  # truncated or foreign
        raise PretrainedWeightsError(
            f"{key} cannot be read as a weights file written by torch.save "
            f"({type(e).__name__}); point it to {expected}."
        ) from None
    return unwrap_state_dict(obj, path, expected)


def check_pretrained(state: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor], source: str,
                     expected: str) -> None:
    """Refuse weights that would load but give meaningless features (reid.utils.value_checks)."""
    problem = weight_problem({k: v for k, v in state.items() if k in own}, own)
    if problem:
        raise PretrainedWeightsError(f"Weights in {source} cannot be used: {problem}. Use an intact copy of {expected}.")


def file_misfit(key: str, value: torch.Tensor, own: Mapping[str, torch.Tensor]) -> str:
    """Why the pretrained file's tensor `key` does not fit the model's tensor of that name ("" when it
    does): :func:`reid.modeling.state_fit.misfit`, naming "the file" and "the model"."""
    return misfit(key, value, key, own, file="the file", model="the model")


def fit_problem(state: Mapping[str, torch.Tensor], own: Mapping[str, torch.Tensor], optional: tuple = ()) -> str:
    """The first reason `state` does not fit a model whose state dict is `own` ("" when it fits):
    a shape that differs, a model tensor the file lacks (keys starting with `optional` may be
    absent), or a file tensor the model lacks."""
    shapes = (file_misfit(key, value, own) for key, value in state.items() if key in own)
    problem = next((p for p in shapes if p), "")
    if problem:
        return problem
    for key in own:
        if key not in state and not (optional and key.startswith(tuple(optional))):
            return f"{key} is missing from the file"
    return next((file_misfit(key, value, own) for key, value in state.items() if key not in own), "")


def load_fitting(module: nn.Module, state: Mapping[str, torch.Tensor], source: str, name: str, expected: str,
                 optional: tuple = ()) -> None:
    """Load `state` into `module` (model `name`) when it fits (:func:`fit_problem`, keys starting with
    `optional` may be absent) and its values are usable (:func:`check_pretrained`); else one error line
    naming the file `source` and the `expected` one."""
    own = module.state_dict()
    problem = fit_problem(state, own, optional=optional)
    if problem:
        raise PretrainedWeightsError(f"Weights in {source} do not fit {name}: {problem}. Use {expected}.")
    check_pretrained(state, own, source, expected)
    module.load_state_dict(state, strict=False)


__all__ = ["PretrainedWeightsError", "check_pretrained", "file_misfit", "fit_problem", "load_fitting",
           "read_pretrained", "unwrap_state_dict"]
