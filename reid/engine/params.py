"""Which parameters are identity-head, normalisation or bias parameters.

The optimizer (learning-rate / weight-decay groups) and the checkpoint loader (dropping the
head when fine-tuning on other identities) must agree on what "the head" is, so both ask
this module.
"""
from __future__ import annotations

from typing import Dict, Iterator, Set, Tuple

from torch import nn

# BatchNorm*/SyncBatchNorm/InstanceNorm share _NormBase; GroupNorm and LayerNorm do not.
_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm, nn.LocalResponseNorm)


def _is_head_name(module_name: str) -> bool:
    """True when a component of the dotted module path is "head"/"heads"/"*_head(s)"."""
    return any(
        part in ("head", "heads") or part.endswith(("_head", "_heads")) for part in module_name.split(".")
    )


def is_head_key(key: str) -> bool:
    """Whether state-dict `key` names a head tensor by the naming rule alone (no model needed)."""
    return _is_head_name(key.rsplit(".", 1)[0]) if "." in key else False


def _is_norm_module(module: nn.Module) -> bool:
    """Normalisation layers, plus GeM pooling whose exponent p is tuned like a norm scale."""
    return isinstance(module, _NORM_TYPES) or "gem" in type(module).__name__.lower()


def head_names(model: nn.Module) -> Set[str]:
    """State-dict names (parameters and buffers) that belong to the identity head(s).

    A model may say what its head is by defining ``head_parameters()`` (an iterable of
    parameters); otherwise every module whose dotted name has a component "head", "heads",
    "*_head" or "*_heads" counts (``model.head`` in Baseline, ``model.heads`` in MGN).
    Buffers of head modules (CurricularFace's running t) are included because they are
    fitted to the same classes.
    """
    names: Set[str] = set()
    custom = getattr(model, "head_parameters", None)
    if callable(custom):
        wanted = {id(p) for p in custom()}
        names.update(n for n, p in model.named_parameters() if id(p) in wanted)
        for m_name, module in model.named_modules():  # the buffers of the modules holding them
            if m_name and any(id(p) in wanted for p in module.parameters(recurse=False)):
                names.update(f"{m_name}.{b_name}" for b_name, _ in module.named_buffers(recurse=False))
        return names
    for m_name, module in model.named_modules():
        if _is_head_name(m_name):
            own = [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]
            names.update(f"{m_name}.{name}" for name, _ in own)
    return names


def classify_parameters(model: nn.Module) -> Iterator[Tuple[str, nn.Parameter, Dict[str, bool]]]:
    """Yield ``(name, param, {"head", "norm", "bias"})`` for every trainable parameter once.

    Frozen parameters (``requires_grad=False``, e.g. the BNNeck shift) are skipped: giving
    them to the optimizer would only let weight decay move them.
    """
    heads = head_names(model)
    seen: Set[int] = set()
    for m_name, module in model.named_modules():
        is_norm = _is_norm_module(module)
        for p_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))  # shared (tied) parameters go into one group only
            full = f"{m_name}.{p_name}" if m_name else p_name
            yield full, param, {"head": full in heads, "norm": is_norm, "bias": p_name == "bias"}


__all__ = ["classify_parameters", "head_names", "is_head_key"]
