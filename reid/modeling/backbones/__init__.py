"""Backbones: ``BACKBONE_REGISTRY``, keyed by ``MODEL.BACKBONE.NAME``.

Every builder takes the config and returns an ``nn.Module`` whose ``forward`` maps
normalised images to a feature map and which exposes ``out_channels``.
"""
from __future__ import annotations

import logging
from functools import partial

from torch import nn

from reid.config.sie_keys import sie_node
from reid.utils.registry import Registry

from .clip import CLIP_SPECS, ClipResNet, ClipViT
from .ibn import IBN
from .non_local import NonLocalBlock
from .osnet import OSNET_NAMES, OSNetBackbone, osnet_name_from_state
from .pretrained import PretrainedWeightsError
from .resnet import RESNET_NAMES, STEM_POOLS, ResNetBackbone, set_stage_stride
from .timm_backbone import PREFIX as TIMM_PREFIX
from .timm_backbone import TimmBackbone, timm_name
from .vit import VIT_SPECS, ReIDViT

BACKBONE_REGISTRY = Registry("MODEL.BACKBONE.NAME")
logger = logging.getLogger(__name__)


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


def _no_non_local(name: str, cfg) -> None:
    if any(int(c) for c in cfg.MODEL.BACKBONE.NON_LOCAL):
        raise ValueError(f"MODEL.BACKBONE.NON_LOCAL is for ResNet backbones; {name} has none: set it to [0, 0, 0, 0].")


def _build_osnet(name: str, cfg) -> OSNetBackbone:
    bb = cfg.MODEL.BACKBONE
    _no_non_local(name, cfg)
    return OSNetBackbone(name, pretrained=bool(bb.PRETRAINED), pretrained_path=str(bb.PRETRAINED_PATH))


def _build_timm(name: str, cfg) -> TimmBackbone:
    bb = cfg.MODEL.BACKBONE
    _no_non_local(TIMM_PREFIX + name, cfg)
    backbone = TimmBackbone(name, pretrained=bool(bb.PRETRAINED), pretrained_path=str(bb.PRETRAINED_PATH),
                            img_size=list(cfg.INPUT.SIZE_TRAIN), token_feature=str(bb.TOKEN_FEATURE).lower(),
                            drop_path=float(bb.DROP_PATH))
    if hasattr(backbone.model, "patch_embed"):
        _one_grid(TIMM_PREFIX + name, cfg)
    pooling = str(cfg.MODEL.HEADS.POOLING).lower()
    if pooling in ("gem", "gem_fixed") and (backbone.is_tokens or backbone.output_fmt == "NHWC"):
        raise ValueError(f"MODEL.HEADS.POOLING {pooling} needs non-negative feature maps; {TIMM_PREFIX}{name} gives "
                         "normalised tokens (signed): use avg or max.")
    stats = getattr(backbone.model, "pretrained_cfg", None) or {}
    if bb.PRETRAINED and "mean" in stats:
        mean = [round(255 * float(m), 3) for m in stats["mean"]]
        std = [round(255 * float(s), 3) for s in stats["std"]]
        if any(abs(a - float(b)) > 0.01 for a, b in zip(mean + std, list(cfg.MODEL.PIXEL_MEAN) + list(cfg.MODEL.PIXEL_STD))):
            logger.warning("%s%s was pretrained on pixels normalised with mean %s and std %s (0-255 scale), this "
                           "config uses MODEL.PIXEL_MEAN %s and MODEL.PIXEL_STD %s; set them to match the weights.",
                           TIMM_PREFIX, name, mean, std, list(cfg.MODEL.PIXEL_MEAN), list(cfg.MODEL.PIXEL_STD))
    return backbone


def _one_grid(name: str, cfg) -> None:
    if list(cfg.INPUT.SIZE_TRAIN) != list(cfg.INPUT.SIZE_TEST):
        raise ValueError(f"{name} is built for one patch grid: INPUT.SIZE_TEST {list(cfg.INPUT.SIZE_TEST)} must equal "
                         f"INPUT.SIZE_TRAIN {list(cfg.INPUT.SIZE_TRAIN)}.")


def _sie_cameras(cfg) -> int:
    """The SIE camera count of a ViT (TransReID's or CLIP's): 0 without SIE; one error line
    when SIE is on but the data has fewer than 2 cameras."""
    tr, key = sie_node(cfg)
    cameras = int(tr.NUM_CAMERAS) if bool(tr.SIE_CAMERA) else 0
    if bool(tr.SIE_CAMERA) and cameras < 2:
        raise ValueError(f"{key}.SIE_CAMERA needs camera ids from at least 2 cameras, but "
                         f"{key}.NUM_CAMERAS is {cameras} (tools/train.py sets it from the training data; "
                         "data whose images all have one camera id has none): set SIE_CAMERA False, or use data "
                         "with camera ids (list files of 'path pid camid' lines).")
    return cameras


def _build_vit(name: str, cfg) -> ReIDViT:
    bb, (tr, _) = cfg.MODEL.BACKBONE, sie_node(cfg)
    _one_grid(name, cfg)
    vit = ReIDViT(name, img_size=list(cfg.INPUT.SIZE_TRAIN), stride=list(tr.STRIDE_SIZE),
                  drop_path_rate=float(bb.DROP_PATH), num_cameras=_sie_cameras(cfg), sie_coef=float(tr.SIE_COEF))
    if bool(bb.PRETRAINED):
        vit.load_imagenet(str(bb.PRETRAINED_PATH), [int(n) for n in bb.PRETRAINED_GRID])
    return vit


def _build_clip(name: str, cfg) -> nn.Module:
    bb, (tr, key) = cfg.MODEL.BACKBONE, sie_node(cfg)
    spec = CLIP_SPECS[name]
    size = list(cfg.INPUT.SIZE_TRAIN)
    _one_grid(name, cfg)
    if spec.kind == "vit":
        model: nn.Module = ClipViT(name, spec, size, list(tr.STRIDE_SIZE), _sie_cameras(cfg), float(tr.SIE_COEF))
    else:
        if bool(tr.SIE_CAMERA):
            raise ValueError(f"{key}.SIE_CAMERA: {name} has no camera embedding (CLIP-ReID's SIE is the "
                             "ViT's); set it False, or use clip_vit_b16.")
        model = ClipResNet(name, spec, size)
    if bool(bb.PRETRAINED):
        model.load_openai(str(bb.PRETRAINED_PATH))
    return model


def _timm_placeholder(cfg) -> nn.Module:
    raise ValueError(f"MODEL.BACKBONE.NAME {TIMM_PREFIX}<model name> takes a timm model's name, "
                     f"e.g. {TIMM_PREFIX}vit_small_patch16_224 or {TIMM_PREFIX}resnet50.")


# Listed among the valid names of the unknown-name error; build_backbone routes real timm names.
BACKBONE_REGISTRY.register(TIMM_PREFIX + "<model name>")(_timm_placeholder)
for _names, _build in ((RESNET_NAMES, _build_resnet), (OSNET_NAMES, _build_osnet), (VIT_SPECS, _build_vit),
                       (CLIP_SPECS, _build_clip)):
    for _name in _names:
        BACKBONE_REGISTRY.register(_name)(partial(_build, _name))


def build_backbone(cfg) -> nn.Module:
    """Build ``cfg.MODEL.BACKBONE.NAME`` ("timm/<name>": any timm model); unknown names raise a
    KeyError listing valid ones."""
    name = timm_name(cfg.MODEL.BACKBONE.NAME)
    if name is not None and name != "<model name>":
        return _build_timm(name, cfg)
    return BACKBONE_REGISTRY.get(cfg.MODEL.BACKBONE.NAME)(cfg)


__all__ = [
    "BACKBONE_REGISTRY",
    "CLIP_SPECS",
    "ClipResNet",
    "ClipViT",
    "IBN",
    "NonLocalBlock",
    "OSNET_NAMES",
    "OSNetBackbone",
    "PretrainedWeightsError",
    "RESNET_NAMES",
    "ReIDViT",
    "STEM_POOLS",
    "TIMM_PREFIX",
    "TimmBackbone",
    "VIT_SPECS",
    "ResNetBackbone",
    "build_backbone",
    "osnet_name_from_state",
    "set_stage_stride",
    "timm_name",
]
