"""Build an inference model from a run folder, a config + weights, or a checkpoint alone.

:func:`resolve_model` is the one place that turns the ways a user names a model (``--run``,
``--weights``, ``--config-file`` + ``KEY VALUE`` overrides: docs/getting_started.md) into a
config and a weights file; every tool and :func:`reid.inference.load_predictor` go through it.

The model is always built without an identity head (``MODEL.HEADS.NUM_CLASSES = 0``):
search and export only need the eval-mode feature, and the head's class count is a
property of the training data, which the user may not have at hand. Weights are loaded by
the engine's checkpoint code, which skips the head's tensors and refuses every other
mismatch: a silently half-loaded backbone gives plausible-looking but useless features.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from yacs.config import CfgNode

from reid.config import load_config, load_config_from_text
from reid.engine.checkpoint_files import CheckpointError, load_checkpoint, model_state, read_checkpoint
from reid.modeling import build_model
from reid.modeling.formats import detect_format
from reid.utils.device import resolve_device
from reid.utils.path_kinds import WrongPathKindError, check_folder, file_problem, is_missing

RUN_CONFIG = "config.yaml"
RUN_WEIGHTS = "model_final.pth"
#: A run that selected on a validation split (TEST.VAL_IDS) keeps its result here.
RUN_BEST_WEIGHTS = "model_best.pth"

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


# A model may need at most this much memory beyond twice its weights file's tensors: the config
# that describes it may come from someone else (a checkpoint's, a downloaded run's) and could
# otherwise describe a model of terabytes, allocated before any weight is compared.
_MODEL_SLACK = 64 << 20


def _tensor_bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def check_model_fits_weights(cfg: CfgNode, data: Dict[str, Any], source: str) -> None:
    """Refuse `cfg`'s model when it would be far larger than the weights in checkpoint `data`.

    The model is first built on the meta device (no memory), so a config that describes an
    absurd model (a 10^9-wide layer, say) is refused in one line before anything is allocated.
    """
    state_bytes = _tensor_bytes(model_state(data, source).values())
    with torch.device("meta"):
        skeleton = build_model(cfg)
    model_bytes = _tensor_bytes(list(skeleton.parameters()) + list(skeleton.buffers()))
    if model_bytes > 2 * state_bytes + _MODEL_SLACK:
        raise CheckpointError(
            f"The config for {source} describes a model of {model_bytes / 2**20:,.0f} MB, but the file holds "
            f"{state_bytes / 2**20:,.0f} MB of weights: they do not belong together. Use the config the checkpoint "
            "was trained with."
        )


def load_weights(model: nn.Module, path: PathLike) -> nn.Module:
    """Load the ``"model"`` state dict of checkpoint `path` into `model` (in place).

    Uses the engine's checks (``reid.engine.checkpoint_files.load_checkpoint``, which also
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
    data = read_checkpoint(weights) if weights else None
    if data is not None:
        check_model_fits_weights(cfg, data, weights)
    model = build_model(cfg)
    if data is not None:
        load_checkpoint(weights, model=model, data=data)
    dev = resolve_device(cfg.MODEL.DEVICE if device is None else str(device))
    return model.to(dev).eval()


def run_weights(run_dir: PathLike) -> Optional[str]:
    """The result of the training run in `run_dir`: ``model_best.pth`` when the run selected
    one on its validation split, else ``model_final.pth``; None when neither exists."""
    for name in (RUN_BEST_WEIGHTS, RUN_WEIGHTS):
        path = os.path.join(os.fspath(run_dir), name)
        if os.path.isfile(path):
            return path
    return None


def config_from_run(run_dir: PathLike, weights: Optional[PathLike] = None,
                    opts: Optional[Sequence[Any]] = None) -> Tuple[CfgNode, str]:
    """The inference config of a run folder and the weights file to load.

    `weights` defaults to the run's result (:func:`run_weights`: ``model_best.pth`` of a run
    that selected on a validation split, else ``model_final.pth``); a relative `weights` is
    looked up in `run_dir` first. `opts` are ``KEY VALUE`` overrides applied after the run's config.
    """
    run_dir = check_folder(os.fspath(run_dir), "Run folder", "pass the OUTPUT_DIR of a training run (it holds "
                           "config.yaml and model_final.pth).")
    config_file = os.path.join(run_dir, RUN_CONFIG)
    problem = file_problem(config_file)
    if is_missing(problem):
        raise FileNotFoundError(
            f"Run folder {run_dir!r} has no {RUN_CONFIG}; pass the OUTPUT_DIR of a training run, "
            "or use a config file and a weights file instead."
        )
    if problem:
        raise WrongPathKindError(f"{config_file!r} {problem}; a run's {RUN_CONFIG} is the config file its "
                                 "training wrote.")
    if weights is None:
        weights = run_weights(run_dir) or os.path.join(run_dir, RUN_WEIGHTS)
    else:
        weights = os.fspath(weights)
        in_run = os.path.join(run_dir, weights)
        if not os.path.isabs(weights) and os.path.lexists(in_run):
            weights = in_run
    problem = file_problem(weights)
    if is_missing(problem):
        found = sorted(f for f in os.listdir(run_dir) if f.endswith(".pth"))
        hint = f"checkpoints there: {', '.join(found)}" if found else "it holds no .pth files"
        raise FileNotFoundError(
            f"Weights file {weights!r} not found ({hint}). Finish training, or pass one of the "
            "checkpoints explicitly."
        )
    if problem:
        raise WrongPathKindError(f"Weights file {weights!r} {problem}; pass a checkpoint (.pth) of the run.")
    cfg = load_config(config_file, list(opts or []) + inference_opts(weights), allow_bases=False)
    return cfg, weights


def config_from_checkpoint(weights: PathLike, opts: Optional[Sequence[Any]] = None) -> CfgNode:
    """The inference config stored in a checkpoint's ``"cfg"`` entry (a YAML string).

    The stored config may not name other files: ``_BASE_`` is refused and the keys of
    ``reid.config.FILE_KEYS`` keep their defaults unless `opts` set them.
    """
    weights = os.fspath(weights)
    data = read_checkpoint(weights)  # CheckpointError names a missing/corrupt file
    text = data.get("cfg")
    state = model_state(data, weights)
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
    # Validated like a file, but self-contained: no _BASE_, and no key that names a file or
    # folder is taken from it (reid.config.merge_from_text); errors name the checkpoint.
    return load_config_from_text(text, f"Checkpoint {weights}", list(opts or []) + inference_opts(weights))


def config_from_file(config_file: PathLike, weights: PathLike,
                     opts: Optional[Sequence[Any]] = None) -> CfgNode:
    """The inference config from a YAML config file plus a weights file."""
    return load_config(os.fspath(config_file), list(opts or []) + inference_opts(os.fspath(weights)))


def config_for_exported(file: Any, opts: Optional[Sequence[Any]] = None) -> CfgNode:
    """The inference config of an exported file run on its own (`file`: its opened
    ``reid.export.exported.ExportedModel``): the defaults, `opts`, and the file's input size (an
    override naming another size is refused: the graph takes only its own); no weights file."""
    cfg = load_config(None, list(opts or []) + inference_opts(""))
    size = [int(s) for s in file.input_size]
    if list(cfg.INPUT.SIZE_TEST) != size and "INPUT.SIZE_TEST" in [str(k) for k in list(opts or [])[::2]]:
        raise ValueError(f"{file.path} takes {size[0]}x{size[1]} images (its graph's fixed size), and INPUT.SIZE_TEST "
                         f"asks for {cfg.INPUT.SIZE_TEST[0]}x{cfg.INPUT.SIZE_TEST[1]}; leave INPUT.SIZE_TEST out, or "
                         "export the model again at that size.")
    cfg.defrost()
    cfg.INPUT.SIZE_TEST = size
    cfg.TEST.FLIP = False  # the file returns normalised features: a flipped pass cannot be averaged as PyTorch does
    cfg.freeze()
    return cfg


def weights_override(opts: Sequence[Any]) -> Optional[str]:
    """The value of a ``MODEL.WEIGHTS`` override in `opts` (the last one), if any."""
    found = [str(value) for key, value in zip(opts[::2], opts[1::2]) if str(key) == "MODEL.WEIGHTS"]
    return found[-1] if found else None


def resolve_model(run: Optional[PathLike] = None, config_file: Optional[PathLike] = None,
                  weights: Optional[PathLike] = None,
                  opts: Optional[Sequence[Any]] = None) -> Tuple[CfgNode, str]:
    """The inference config and weights file of a model named in any of the supported ways.

    * `run`: a training run folder: its ``config.yaml`` and its result (:func:`run_weights`),
      or `weights` (a relative name is looked up in the folder first);
    * `config_file` (+ `opts`) and a weights file: `weights`, else ``MODEL.WEIGHTS`` of the
      overrides or the config, else the result of the run folder the config file sits in
      (a run's ``config.yaml`` next to its ``model_final.pth``);
    * `weights` alone: a checkpoint that stores its config (every tools/train.py checkpoint;
      a fast-reid file stores none and is answered with the config to use).

    The config gets :func:`inference_opts` (no identity head, no ImageNet download, the weights).
    Raises ValueError / FileNotFoundError naming what is missing and how to name a model.
    """
    opts = list(opts or [])
    override = weights_override(opts)
    if weights is not None and override is not None and os.fspath(weights) != override:
        raise ValueError(f"Two weights files given: --weights {os.fspath(weights)!r} and MODEL.WEIGHTS "
                         f"{override!r}; pass one of them.")
    if run is not None:
        if config_file is not None:
            raise ValueError("Pass either a run folder (--run) or a config file (--config-file), not both: "
                             "the run has its own config.yaml (add KEY VALUE overrides to change it).")
        return config_from_run(run, weights if weights is not None else override, opts)
    if config_file is not None:
        config_file = os.fspath(config_file)
        chosen = os.fspath(weights) if weights is not None else override
        if not chosen:
            chosen = str(load_config(config_file, opts).MODEL.WEIGHTS) or run_weights(os.path.dirname(config_file))
        if not chosen:
            raise ValueError(
                f"Config file {config_file!r} given without weights, and no {RUN_WEIGHTS} sits next to it: "
                "pass the checkpoint with --weights FILE (or name a training run's folder with --run DIR)."
            )
        return config_from_file(config_file, chosen, opts), chosen
    if weights is not None or override is not None:
        chosen = os.fspath(weights) if weights is not None else str(override)
        return config_from_checkpoint(chosen, opts), chosen
    raise ValueError(
        "No model given: pass --run DIR (a training run's OUTPUT_DIR), --weights FILE (a checkpoint; "
        "add --config-file when it stores no config) or --config-file FILE with --weights."
    )


__all__ = [
    "build_inference_model",
    "config_for_exported",
    "config_from_checkpoint",
    "config_from_file",
    "config_from_run",
    "inference_opts",
    "load_weights",
    "resolve_model",
    "run_weights",
    "weights_override",
]
