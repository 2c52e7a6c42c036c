"""Build the identity head(s) of a meta architecture from ``MODEL.HEADS``."""
from __future__ import annotations

import logging
from typing import Optional

from torch import nn

from ..heads import build_head

logger = logging.getLogger(__name__)


def build_identity_head(cfg, in_features: int, log: bool = True) -> Optional[nn.Module]:
    """Return the configured head for `in_features`-d features, or None without classes.

    A head is built only when ``MODEL.HEADS.NUM_CLASSES > 0``; ``MODEL.HEADS.SCALE`` /
    ``MARGIN`` of -1 select the head's published default, and the values actually used
    are logged so a run's log shows them (`log=False` silences repeats, e.g. MGN's 8 heads).
    """
    heads = cfg.MODEL.HEADS
    num_classes = int(heads.NUM_CLASSES)
    if num_classes < 0:
        raise ValueError(
            f"MODEL.HEADS.NUM_CLASSES must be >= 0 (0 = no identity head), got {num_classes}."
        )
    if num_classes == 0:  # inference only
        return None
    try:
        head = build_head(
            heads.NAME,
            in_features,
            num_classes,
            scale=float(heads.SCALE),
            margin=float(heads.MARGIN),
            easy_margin=bool(heads.EASY_MARGIN),
            momentum=float(heads.CURRICULAR_MOMENTUM),
            bias=bool(heads.BIAS),
        )
    except (TypeError, ValueError) as exc:
        # build_head speaks in keyword names; point the user at the config keys instead.
        raise type(exc)(
            f"MODEL.HEADS (NAME={heads.NAME!r}): {exc} The keywords come from MODEL.HEADS.SCALE, "
            "MARGIN, EASY_MARGIN (easy_margin), CURRICULAR_MOMENTUM (momentum) and BIAS (bias)."
        ) from exc
    if log:
        logger.info("Identity head %s: %d classes, %d-d features, scale=%s, margin=%s", heads.NAME, num_classes,
                    in_features, getattr(head, "scale", None), getattr(head, "margin", None))
    return head


__all__ = ["build_identity_head"]
