"""Head registry, published defaults and ``build_head``."""
from __future__ import annotations

import logging
import math
from typing import Dict, Optional, Tuple

from torch import nn

from reid.utils.registry import Registry

from .amsoftmax import AMSoftmaxHead
from .arcface import ArcFaceHead
from .base import CosineHead
from .circle import CircleHead
from .curricular import CurricularFaceHead
from .linear import LinearHead
from .normface import NormFaceHead

logger = logging.getLogger(__name__)

HEAD_REGISTRY = Registry("head")
HEAD_REGISTRY.register("linear")(LinearHead)
HEAD_REGISTRY.register("normface")(NormFaceHead)
HEAD_REGISTRY.register("amsoftmax")(AMSoftmaxHead)
HEAD_REGISTRY.register("cosface")(AMSoftmaxHead)  # same loss under CosFace's name
HEAD_REGISTRY.register("arcface")(ArcFaceHead)
HEAD_REGISTRY.register("circle")(CircleHead)
HEAD_REGISTRY.register("curricularface")(CurricularFaceHead)

# name -> {"scale": s, "margin": m}: the published defaults, read from the classes so
# there is one source. The linear head has neither (None).
HEAD_DEFAULTS: Dict[str, Dict[str, Optional[float]]] = {
    name: {
        "scale": HEAD_REGISTRY.get(name).DEFAULT_SCALE,
        "margin": HEAD_REGISTRY.get(name).DEFAULT_MARGIN,
    }
    for name in HEAD_REGISTRY.names()
}

# Derived from the classes, so a new head is listed where it belongs without editing a list.
# Heads whose logits are functions of cosines against L2-normalised class weights.
COSINE_HEADS: Tuple[str, ...] = tuple(n for n in HEAD_REGISTRY.names() if issubclass(HEAD_REGISTRY.get(n), CosineHead))
# Heads with a margin: label smoothing changes their objective, keep it off by default.
MARGIN_HEADS: Tuple[str, ...] = tuple(
    n for n in COSINE_HEADS if "margin" not in getattr(HEAD_REGISTRY.get(n), "FIXED_PARAMS", ())
)

# name -> {extra keyword: default} accepted by build_head besides scale and margin.
HEAD_EXTRA_KWARGS: Dict[str, Dict[str, object]] = {
    name: dict(HEAD_REGISTRY.get(name).EXTRA_KWARGS) for name in HEAD_REGISTRY.names()
}
_ALL_EXTRA_KWARGS = sorted({k for kw in HEAD_EXTRA_KWARGS.values() for k in kw})


def _resolve(
    name: str, what: str, value: Optional[float], default: Optional[float]
) -> Optional[float]:
    """None or a negative value -> the head's default; otherwise a checked float.

    A head that has no such parameter (linear: scale and margin; normface: margin) keeps its
    own, so code may pass scale/margin to every head; the value is ignored loudly, not silently.
    """
    if value is None or float(value) < 0:
        return default
    value = float(value)
    if what in getattr(HEAD_REGISTRY.get(name), "FIXED_PARAMS", ()) and value != (default or 0.0):
        with_param = ", ".join(n for n, d in HEAD_DEFAULTS.items() if what not in getattr(HEAD_REGISTRY.get(n), "FIXED_PARAMS", ()))
        logger.warning(
            "Head %r has no %s: %s=%s is ignored (heads with a %s: %s).", name, what, what, value, what, with_param
        )
        return default
    if not math.isfinite(value):
        raise ValueError(f"Head {name!r}: {what} must be finite, got {value}.")
    if what == "scale" and value == 0:
        raise ValueError(
            f"Head {name!r}: scale must be > 0 (or -1 for the default {default}), got 0."
        )
    return value


def _split_extra_kwargs(name: str, kwargs: Dict[str, object]) -> Dict[str, object]:
    """Keep the keywords this head takes; reject unknown ones and non-default foreign ones.

    A keyword that belongs to another head (e.g. ``momentum`` for ``circle``) is accepted
    at its default value, so callers can pass every config value; a non-default value
    would be silently ignored, so it is an error.
    """
    own = HEAD_EXTRA_KWARGS[name]
    kept: Dict[str, object] = {}
    for key, value in kwargs.items():
        if key in own:
            kept[key] = value
            continue
        if key not in _ALL_EXTRA_KWARGS:
            valid = ", ".join(["scale", "margin"] + sorted(own)) if own else "scale, margin"
            raise TypeError(
                f"build_head got an unknown keyword {key!r} for head {name!r}. "
                f"Valid keywords: {valid} (and {', '.join(_ALL_EXTRA_KWARGS)} at their defaults)."
            )
        users = [n for n, kw in HEAD_EXTRA_KWARGS.items() if key in kw]
        default = HEAD_EXTRA_KWARGS[users[0]][key]
        if value is not None and value != default:
            raise ValueError(
                f"{key}={value!r} has no effect on head {name!r}; it applies only to "
                f"{', '.join(users)}. Remove it or set it to its default {default!r}."
            )
    return kept


def build_head(
    name: str,
    in_features: int,
    num_classes: int,
    scale: Optional[float] = None,
    margin: Optional[float] = None,
    **kwargs,
) -> nn.Module:
    """Build an identity head by name.

    Args:
        name: one of ``HEAD_REGISTRY.names()`` (case-insensitive): linear, normface,
            amsoftmax (alias cosface), arcface, circle, curricularface.
        in_features: feature width D.
        num_classes: number of training identities C (>= 2).
        scale: logit scale s (gamma for circle); None or < 0 = ``HEAD_DEFAULTS[name]``.
        margin: margin m; None or < 0 = ``HEAD_DEFAULTS[name]``.
        **kwargs: ``easy_margin`` (arcface, curricularface), ``momentum`` (curricularface),
            ``bias`` (linear).
            Keywords of other heads are accepted only at their default values.

    Returns:
        The head; ``head(features, targets)`` gives logits ``[B, C]`` for cross-entropy.

    Raises:
        KeyError: unknown name (the message lists the valid names).
        TypeError: unknown keyword.
        ValueError: a scale/margin/keyword value the head cannot use.
    """
    cls = HEAD_REGISTRY.get(name)
    key = str(name).lower()
    extra = _split_extra_kwargs(key, kwargs)
    defaults = HEAD_DEFAULTS[key]
    scale = _resolve(key, "scale", scale, defaults["scale"])
    margin = _resolve(key, "margin", margin, defaults["margin"])
    if cls is LinearHead:
        return cls(in_features, num_classes, **extra)
    return cls(in_features, num_classes, scale=scale, margin=margin, **extra)
