"""Which config node holds a model's patch stride and camera embedding (SIE): ``MODEL.CLIP`` for
CLIP's image encoders (backbones ``clip_*``), ``MODEL.TRANSREID`` for everything else.

Configs and checkpoints of the previous layout set the TRANSREID keys for a CLIP model too: they
load, each such key read as its MODEL.CLIP twin, with one warning line saying which to rename.
"""
from __future__ import annotations

import logging
from typing import Any, List, Tuple

from yacs.config import CfgNode

from .errors import ConfigError

logger = logging.getLogger(__name__)

CLIP_PREFIX = "clip_"
#: The keys both nodes have (TransReID's JPM keys stay TransReID's own).
SIE_KEYS = ("STRIDE_SIZE", "SIE_CAMERA", "SIE_COEF", "NUM_CAMERAS")


def is_clip(cfg: CfgNode) -> bool:
    """Whether `cfg`'s backbone is one of CLIP's image encoders."""
    return str(cfg.MODEL.BACKBONE.NAME).lower().startswith(CLIP_PREFIX)


def sie_node(cfg: CfgNode) -> Tuple[CfgNode, str]:
    """``(node, its key prefix)`` holding `cfg`'s model's stride and SIE settings."""
    return (cfg.MODEL.CLIP, "MODEL.CLIP") if is_clip(cfg) else (cfg.MODEL.TRANSREID, "MODEL.TRANSREID")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def move_clip_keys(cfg: CfgNode, defaults: CfgNode, source: str) -> List[str]:
    """For a CLIP model, TRANSREID stride/SIE keys set away from their defaults move to MODEL.CLIP
    (the TRANSREID key goes back to its default) with one warning line; returns the keys moved.
    A key set in both nodes to different values is a one-line ConfigError."""
    if not is_clip(cfg):
        return []
    moved = []
    for key in SIE_KEYS:
        old, new, default = (_plain(n[key]) for n in (cfg.MODEL.TRANSREID, cfg.MODEL.CLIP, defaults.MODEL.TRANSREID))
        if old == default:
            continue
        if new != _plain(defaults.MODEL.CLIP[key]) and new != old:
            raise ConfigError(f"{source}: MODEL.TRANSREID.{key} {old!r} and MODEL.CLIP.{key} {new!r} both set the "
                              f"CLIP model's {key.lower()}; keep MODEL.CLIP.{key} only.")
        cfg.MODEL.CLIP[key] = cfg.MODEL.TRANSREID[key]
        cfg.MODEL.TRANSREID[key] = defaults.MODEL.TRANSREID[key]
        moved.append(key)
    if moved:
        logger.warning("%s: %s set the CLIP backbone %s and are read as %s; rename them (MODEL.TRANSREID.* "
                       "sets TransReID's ViT).", source, ", ".join(f"MODEL.TRANSREID.{k}" for k in moved),
                       cfg.MODEL.BACKBONE.NAME, ", ".join(f"MODEL.CLIP.{k}" for k in moved))
    return moved


__all__ = ["CLIP_PREFIX", "SIE_KEYS", "is_clip", "move_clip_keys", "sie_node"]
