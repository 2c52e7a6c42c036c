"""Build an inference model from a run folder, a config + weights, or a checkpoint alone.

The model is always built without an identity head (``MODEL.HEADS.NUM_CLASSES = 0``):
search and export only need the eval-mode feature, and the head's class count is a
property of the training data, which the user may not have at hand. Weights are loaded by
the engine's checkpoint code, which skips the head's tensors and refuses every other
mismatch: a silently half-loaded backbone gives plausible-looking but useless features.
"""
from __future__ import annotations

import os
import tempfile
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from yacs.config import CfgNode

from reid.config import load_config
from reid.engine.checkpoint import load_checkpoint, model_state, read_checkpoint
from reid.modeling import build_model
from reid.modeling.formats import detect_format
from reid.utils.device import resolve_device

RUN_CONFIG = "config.yaml"
RUN_WEIGHTS = "model_final.pth"

PathLike = Union[str, "os.PathLike[str]"]


def inference_opts(weights: str = "") -> list:
    """Overrides every inference config gets: no head, no ImageNet download, these weights."""
    return [
        "MODEL.HEADS.NUM_CLASSES", 0,
        # The trained weights replace the ImageNet ones, so downloading them is pointless
        # (and fails on machines without internet).
        "MODEL.BACKBONE.PRETRAINED", False,
        "MODEL.WEIGHTS", str(weights),
    ]


def load_weights(model: nn.Module, path: PathLike) -> nn.Module:
    """Load the ``"model"`` state dict of checkpoint `path` into `model` (in place).

    Uses the engine's checks (``reid.engine.checkpoint.load_checkpoint``, which also
    recognises and converts fast-reid and torchreid files): identity-head tensors that `model` lacks are
    skipped; any other missing, unexpected or wrongly shaped tensor raises a CheckpointError
    naming the file, as does a missing or corrupt file.
    """
    load_checkpoint(os.fspath(path), model=model)
    return model


def build_inference_model(cfg: CfgNode, weights: Optional[PathLike] = None,
                          device: Optional[Union[str, torch.device]] = None) -> nn.Module:
    """Build ``cfg``'s model without an identity head, load `weights`, move to `device`, eval().

    `weights` defaults to ``cfg.MODEL.WEIGHTS``; ``weights=""`` keeps the random
    initialisation (for tests and export smoke checks). `device` defaults to
    ``cfg.MODEL.DEVICE``.
    """
    cfg = cfg.clone()
    cfg.defrost()
    cfg.MODEL.HEADS.NUM_CLASSES = 0
    cfg.MODEL.BACKBONE.PRETRAINED = False
    weights = cfg.MODEL.WEIGHTS if weights is None else os.fspath(weights)
    model = build_model(cfg)
    if weights:
        load_weights(model, weights)
    dev = resolve_device(cfg.MODEL.DEVICE if device is None else str(device))
    return model.to(dev).eval()


def config_from_run(run_dir: PathLike, weights: Optional[PathLike] = None,
                    opts: Optional[Sequence[Any]] = None) -> Tuple[CfgNode, str]:
    """The inference config of a run folder and the weights file to load.

    `weights` defaults to ``<run_dir>/model_final.pth``; a relative `weights` is looked up in
    `run_dir` first. `opts` are ``KEY VALUE`` overrides applied after the run's config.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise FileNotFoundError(
            f"Run folder {run_dir!r} does not exist; pass the OUTPUT_DIR of a training run "
            "(it holds config.yaml and model_final.pth)."
        )
    config_file = os.path.join(run_dir, RUN_CONFIG)
    if not os.path.isfile(config_file):
        raise FileNotFoundError(
            f"Run folder {run_dir!r} has no {RUN_CONFIG}; pass the OUTPUT_DIR of a training run, "
            "or use a config file and a weights file instead."
        )
    if weights is None:
        weights = os.path.join(run_dir, RUN_WEIGHTS)
    else:
        weights = os.fspath(weights)
        in_run = os.path.join(run_dir, weights)
        if not os.path.isabs(weights) and os.path.isfile(in_run):
            weights = in_run
    if not os.path.isfile(weights):
        found = sorted(f for f in os.listdir(run_dir) if f.endswith(".pth"))
        hint = f"checkpoints there: {', '.join(found)}" if found else "it holds no .pth files"
        raise FileNotFoundError(
            f"Weights file {weights!r} not found ({hint}). Finish training, or pass one of the "
            "checkpoints explicitly."
        )
    cfg = load_config(config_file, list(opts or []) + inference_opts(weights))
    return cfg, weights


def config_from_checkpoint(weights: PathLike, opts: Optional[Sequence[Any]] = None) -> CfgNode:
    """The inference config stored in a checkpoint's ``"cfg"`` entry (a YAML string)."""
    weights = os.fspath(weights)
    data = read_checkpoint(weights)  # CheckpointError names a missing/corrupt file
    text = data.get("cfg")
    state = model_state(data)
    fmt = detect_format(state) if not isinstance(text, str) or not text.strip() else None
    if fmt is not None:
        raise ValueError(
            f"Weights file {weights!r} is a {fmt.label} checkpoint, which stores no config; pass --config-file "
            f"with a config of its architecture: {fmt.suggest_config(state)}."
        )
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            f"Weights file {weights!r} stores no config ('cfg'); pass the run's config.yaml "
            "as well (--config-file)."
        )
    # load_config validates every key and type; it reads files, so hand it a temporary one.
    fd, tmp = tempfile.mkstemp(suffix=".yaml", prefix="ckpt_cfg_")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return load_config(tmp, list(opts or []) + inference_opts(weights))
    finally:
        os.remove(tmp)


def config_from_file(config_file: PathLike, weights: PathLike,
                     opts: Optional[Sequence[Any]] = None) -> CfgNode:
    """The inference config from a YAML config file plus a weights file."""
    return load_config(os.fspath(config_file), list(opts or []) + inference_opts(os.fspath(weights)))


__all__ = [
    "build_inference_model",
    "config_from_checkpoint",
    "config_from_file",
    "config_from_run",
    "inference_opts",
    "load_weights",
]
