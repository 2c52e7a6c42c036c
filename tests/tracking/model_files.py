"""A tiny random re-ID model for the tracking tests."""
from __future__ import annotations

import os


def tiny_checkpoint(folder: str, name: str = "tiny.pth") -> str:
    """A ResNet18 checkpoint with random weights (seed 0), 32x16 input, no flip, storing its config."""
    import torch

    from reid.config import get_cfg
    from reid.engine.checkpoint_files import save_checkpoint
    from reid.modeling import build_model

    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.BACKBONE.PRETRAINED, cfg.MODEL.DEVICE = "resnet18", False, "cpu"
    cfg.MODEL.HEADS.NUM_CLASSES = 0
    cfg.INPUT.SIZE_TEST = [32, 16]
    cfg.TEST.FLIP = False
    torch.manual_seed(0)
    weights = os.path.join(str(folder), name)
    save_checkpoint(weights, model=build_model(cfg).state_dict(), cfg=cfg.dump())
    return weights
