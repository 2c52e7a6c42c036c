"""Which config node holds a model's patch stride and camera embedding (SIE): ``MODEL.CLIP`` for
CLIP's image encoders (backbones ``clip_*``), ``MODEL.TRANSREID`` for everything else.

Configs and checkpoints of the previous layout set the TRANSREID keys for a CLIP model too: they
load, each such key read as its MODEL.CLIP twin, with one warning line saying which to rename.
"""
from __future__ import annotations

import copy
import logging
from typing import Any, Iterable, List, Optional, Tuple

from yacs.config import CfgNode

from .errors import ConfigError

logger = logging.getLogger(__name__)

CLIP_PREFIX = "clip_"
CLIP_NODE = "MODEL.CLIP"
TRANSREID_NODE = "MODEL.TRANSREID"
#: The keys both nodes have (TransReID's JPM keys stay TransReID's own).
SIE_KEYS = ("STRIDE_SIZE", "SIE_CAMERA", "SIE_COEF", "NUM_CAMERAS")


def sie_prefix(backbone: str) -> str:
    """``"MODEL.CLIP"`` or ``"MODEL.TRANSREID"``: the node holding the stride and SIE keys of a
    model whose ``MODEL.BACKBONE.NAME`` is `backbone` (for readers of a settings mapping)."""
    return CLIP_NODE if str(backbone).lower().startswith(CLIP_PREFIX) else TRANSREID_NODE


def is_clip(cfg: CfgNode) -> bool:
    """Whether `cfg`'s backbone is one of CLIP's image encoders."""
    return sie_prefix(cfg.MODEL.BACKBONE.NAME) == CLIP_NODE


def sie_node(cfg: CfgNode) -> Tuple[CfgNode, str]:
    """``(node, its key prefix)`` holding `cfg`'s model's stride and SIE settings."""
    prefix = sie_prefix(cfg.MODEL.BACKBONE.NAME)
    return cfg.MODEL[prefix.split(".")[1]], prefix


def either_key(key: str, value: Optional[str] = None) -> str:
    """`key` of both nodes, for a message about a model whose backbone is not known where it is
    raised: ``"MODEL.TRANSREID.KEY [value] (MODEL.CLIP.KEY [value] for a clip_* backbone)"``."""
    shown = "" if value is None else f" {value}"
    return f"{TRANSREID_NODE}.{key}{shown} ({CLIP_NODE}.{key}{shown} for a {CLIP_PREFIX}* backbone)"


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def _where(sources: Iterable[str]) -> str:
    return " and ".join(dict.fromkeys(sources))


def move_clip_keys(cfg: CfgNode, defaults: CfgNode, source: str, overrides: Iterable[str] = ()) -> List[str]:
    """For a CLIP model, TRANSREID stride/SIE keys set away from their defaults (or named on the
    command line) move to MODEL.CLIP (the TRANSREID key goes back to its default) with one warning
    line; returns the keys moved.

    `source` names where `cfg` was read from (a config file, a checkpoint); `overrides` are the
    keys the command line set, named as "command line" instead. A key set in both nodes to
    different values is a one-line ConfigError.
    """
    if not is_clip(cfg):
        return []
    overridden = {str(k) for k in overrides}

    def origin(key: str) -> str:
        return "command line" if key in overridden else source

    moved = []
    for key in SIE_KEYS:
        old_key, new_key = f"{TRANSREID_NODE}.{key}", f"{CLIP_NODE}.{key}"
        old, new = _plain(cfg.MODEL.TRANSREID[key]), _plain(cfg.MODEL.CLIP[key])
        # Files are judged by value: a checkpoint's config and a run's config.yaml hold every key, at
        # its default too. A key named on the command line was set even at its default value
        # (``MODEL.TRANSREID.SIE_CAMERA False`` over a config with SIE must not be ignored).
        if old == _plain(defaults.MODEL.TRANSREID[key]) and old_key not in overridden:
            continue
        if new != _plain(defaults.MODEL.CLIP[key]) and new != old:
            raise ConfigError(f"{_where([origin(old_key), origin(new_key)])}: {old_key} {old!r} and {new_key} "
                              f"{new!r} set the same setting of {cfg.MODEL.BACKBONE.NAME} to different values; keep "
                              f"{new_key} only (CLIP models read {CLIP_NODE}).")
        cfg.MODEL.CLIP[key] = cfg.MODEL.TRANSREID[key]
        cfg.MODEL.TRANSREID[key] = copy.deepcopy(defaults.MODEL.TRANSREID[key])  # not the defaults' own list
        moved.append(key)
    if moved:
        logger.warning("%s: %s keys of earlier versions read as %s's %s keys; rename %s (%s is TransReID's ViT's).",
                       _where(origin(f"{TRANSREID_NODE}.{k}") for k in moved), TRANSREID_NODE,
                       cfg.MODEL.BACKBONE.NAME, CLIP_NODE,
                       ", ".join(f"{TRANSREID_NODE}.{k} to {CLIP_NODE}.{k}" for k in moved), TRANSREID_NODE)
    return moved


__all__ = ["CLIP_NODE", "CLIP_PREFIX", "SIE_KEYS", "TRANSREID_NODE", "either_key", "is_clip", "move_clip_keys",
           "sie_node", "sie_prefix"]
