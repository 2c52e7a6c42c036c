"""Build the optimizer with per-group learning rates and weight decay (``SOLVER.*``).

Parameters are split by three properties (see :mod:`reid.engine.params`):

* identity head (class weights)  -> learning rate x ``HEADS_LR_FACTOR``
* bias                           -> learning rate x ``BIAS_LR_FACTOR``, decay ``WEIGHT_DECAY_BIAS``
* normalisation layer / GeM p    -> decay ``WEIGHT_DECAY_NORM`` (takes precedence over the bias decay)
* everything else                -> ``BASE_LR`` and ``WEIGHT_DECAY``

Groups are fixed by those properties, not by the resulting values, so the group layout of
a model never depends on the config and an optimizer state dict always fits on resume.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, List, Tuple

import torch
from torch import nn

from .params import classify_parameters

OPTIMIZERS = ("SGD", "Adam", "AMSGrad", "AdamW")


def _group_name(flags: Dict[str, bool]) -> str:
    where = "head" if flags["head"] else "body"
    kind = ("norm." if flags["norm"] else "") + ("bias" if flags["bias"] else "weight")
    return f"{where}.{kind}"


def build_param_groups(cfg, model: nn.Module) -> List[Dict[str, Any]]:
    """Parameter groups for `model` under ``cfg.SOLVER``; each carries ``name`` and ``param_names``.

    Frozen parameters (``requires_grad=False``) are left out. Raises ValueError when the
    model has no trainable parameter at all.
    """
    solver = cfg.SOLVER
    base_lr = float(solver.BASE_LR)
    buckets: Dict[Tuple[bool, bool, bool], Dict[str, Any]] = {}
    for name, param, flags in classify_parameters(model):
        key = (flags["head"], flags["norm"], flags["bias"])
        if key not in buckets:
            lr = base_lr * (float(solver.HEADS_LR_FACTOR) if flags["head"] else 1.0)
            lr *= float(solver.BIAS_LR_FACTOR) if flags["bias"] else 1.0
            decay = float(solver.WEIGHT_DECAY_NORM if flags["norm"] else
                          solver.WEIGHT_DECAY_BIAS if flags["bias"] else solver.WEIGHT_DECAY)
            buckets[key] = {"name": _group_name(flags), "params": [], "lr": lr, "weight_decay": decay}
        # (name, tensor) pairs make torch record "param_names" in the group and the state dict.
        buckets[key]["params"].append((name, param))
    if not buckets:
        raise ValueError(
            "The model has no trainable parameters (every requires_grad is False); "
            "unfreeze some before building the optimizer."
        )
    # A fixed order (body before head, weights before biases) keeps group indices stable.
    return [buckets[k] for k in sorted(buckets)]


def _fused(cls: type, groups: List[Dict[str, Any]]) -> Dict[str, bool]:
    """``{"fused": True}`` when every parameter is a floating CUDA tensor and `cls` has a fused
    kernel: one kernel for all parameters instead of several per tensor, and with fp16 the
    gradient scaler then skips its per-step device-to-host check. CPU runs keep the default
    implementation (and so their results)."""
    params = [p[1] if isinstance(p, tuple) else p for g in groups for p in g["params"]]  # (name, tensor) pairs
    if not params or not all(p.is_cuda and p.is_floating_point() for p in params):
        return {}
    return {"fused": True} if "fused" in inspect.signature(cls.__init__).parameters else {}


def build_optimizer(cfg, model: nn.Module) -> torch.optim.Optimizer:
    """``SOLVER.OPTIMIZER`` ("SGD", "Adam", "AMSGrad", "AdamW") over :func:`build_param_groups`.

    SGD uses ``MOMENTUM`` and ``NESTEROV``; Adam/AMSGrad/AdamW use ``MOMENTUM`` as beta1 and
    ``BETA2``. AMSGrad is Adam with ``amsgrad=True`` (torchreid's OSNet recipe).
    Build it before freezing the backbone for ``FREEZE_ITERS``: frozen parameters are left
    out of the groups, and a temporarily frozen backbone must still be optimised later.
    """
    solver = cfg.SOLVER
    groups = build_param_groups(cfg, model)
    name = str(solver.OPTIMIZER)
    key = name.lower()
    lr = float(solver.BASE_LR)
    if key == "sgd":
        momentum = float(solver.MOMENTUM)
        nesterov = bool(solver.NESTEROV)
        if nesterov and momentum <= 0:
            raise ValueError(
                f"SOLVER.NESTEROV needs SOLVER.MOMENTUM > 0 (got {momentum}); raise the momentum "
                "or set SOLVER.NESTEROV False."
            )
        return torch.optim.SGD(groups, lr=lr, momentum=momentum, nesterov=nesterov, **_fused(torch.optim.SGD, groups))
    if key in ("adam", "amsgrad", "adamw"):
        betas = (float(solver.MOMENTUM), float(solver.BETA2))
        cls = torch.optim.AdamW if key == "adamw" else torch.optim.Adam
        return cls(groups, lr=lr, betas=betas, amsgrad=key == "amsgrad", **_fused(cls, groups))
    raise ValueError(f"Unknown SOLVER.OPTIMIZER {name!r}. Valid names: {', '.join(OPTIMIZERS)}.")


__all__ = ["OPTIMIZERS", "build_optimizer", "build_param_groups"]
