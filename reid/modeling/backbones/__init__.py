"""Backbones: ``BACKBONE`` registry keyed by ``MODEL.BACKBONE.NAME``.

Every builder takes the config and returns an ``nn.Module`` whose ``forward`` maps
normalised images to a feature map and which exposes ``out_channels``.
"""
from __future__ import annotations

from functools import partial

from torch import nn

from reid.utils.registry import Registry

from .ibn import IBN
from .non_local import NonLocalBlock
from .osnet import OSNET_NAMES, OSNetBackbone, osnet_name_from_state
from .pretrained import PretrainedWeightsError
from .resnet import RESNET_NAMES, STEM_POOLS, ResNetBackbone, set_stage_stride

BACKBONE = Registry("MODEL.BACKBONE.NAME")


def _build_resnet(name: str, cfg) -> ResNetBackbone:
    bb = cfg.MODEL.BACKBONE
    return ResNetBackbone(
        name,
        last_stride=int(bb.LAST_STRIDE),
        pretrained=bool(bb.PRETRAINED),
        pretrained_path=str(bb.PRETRAINED_PATH),
        stem_pool=str(bb.STEM_POOL),
        non_local=list(bb.NON_LOCAL),
        non_local_embed=int(bb.NON_LOCAL_EMBED),
    )


def _build_osnet(name: str, cfg) -> OSNetBackbone:
    bb = cfg.MODEL.BACKBONE
    if any(int(c) for c in bb.NON_LOCAL):
        raise ValueError(f"MODEL.BACKBONE.NON_LOCAL is for ResNet backbones; {name} has none: set it to [0, 0, 0, 0].")
    return OSNetBackbone(name, pretrained=bool(bb.PRETRAINED), pretrained_path=str(bb.PRETRAINED_PATH))


for _name in RESNET_NAMES:
    BACKBONE.register(_name)(partial(_build_resnet, _name))
for _name in OSNET_NAMES:
    BACKBONE.register(_name)(partial(_build_osnet, _name))


def build_backbone(cfg) -> nn.Module:
    """Build ``cfg.MODEL.BACKBONE.NAME``; unknown names raise a KeyError listing valid ones."""
    return BACKBONE.get(cfg.MODEL.BACKBONE.NAME)(cfg)


__all__ = [
    "BACKBONE",
    "IBN",
    "NonLocalBlock",
    "OSNET_NAMES",
    "OSNetBackbone",
    "PretrainedWeightsError",
    "RESNET_NAMES",
    "STEM_POOLS",
    "ResNetBackbone",
    "build_backbone",
    "osnet_name_from_state",
    "set_stage_stride",
]
