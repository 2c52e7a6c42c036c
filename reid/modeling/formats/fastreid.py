"""fast-reid checkpoints onto this toolkit's modules: recognition, key mapping, strict checks.

fast-reid (github.com/JDAI-CV/fast-reid) saves ``{"model": state_dict, "optimizer": ...,
"iteration": ...}``. Its state dicts come in two namings:

* v1.x (2021 on; the ``fastreid`` 1.4.0 package): Baseline heads ``heads.pool_layer.p``
  (GeM), ``heads.bottleneck.0.*`` (BNNeck), ``heads.weight`` (classifier); MGN heads
  ``b1_head.pool_layer.p``, ``b1_head.bottleneck.0.weight`` (1x1 conv),
  ``b1_head.bottleneck.1.*`` (BN), ``b1_head.weight``.
* v0.x (2020; the published model-zoo files): ``pixel_mean`` / ``pixel_std`` in the state,
  Baseline ``heads.bnneck.*`` and ``heads.classifier.weight``; MGN ``b1_pool.{0 pool,
  1 conv, 2 BN}`` and ``b1_head.bnneck.*`` / ``b1_head.classifier.weight``.

Backbones are fast-reid's ResNet / ResNet-IBN-a (torchvision names, so ``backbone.*``
maps one to one; non-local blocks ``backbone.NL_k.i.{theta,phi,g,W.0,W.1}`` go to
``backbone.non_local.(k-1).i.{theta,phi,g,out_conv,out_bn}``). MGN's shared trunk
``backbone.{0..6}`` is our ``trunk.{0..6}`` and its branches ``b1``/``b2``/``b3`` are
``branch_global``/``branch_part2``/``branch_part3`` (their ``.0.j`` blocks, fast-reid's
renumbered copy of ``layer3[1:]``, are our ``.0.(j+1)``). Its 8 features b1, b2, b3, b21, b22,
b31, b32, b33 are our features 0..7 in that order; their 8 per-feature BatchNorms
(256 channels each) are the 8 slices of our single neck over the 2048-d concatenation.

The conversion is strict: every tensor of the file must land somewhere and fit exactly,
and every tensor of the model (bar the identity head) must come from the file. The first
key that does not fit raises :class:`FastReIDWeightsError` with one line naming it and the
config settings the file needs. The identity classifier is loaded when the model has
matching heads, and otherwise dropped with a note (evaluation does not use it).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from .base import ConvertedWeights, ForeignWeightsError, WeightsFormat, format_value, head_modules, place_classifier

LABEL = "fast-reid"

#: MGN's feature names in fast-reid, in the order of our 8 features.
MGN_FEATURES: Tuple[str, ...] = ("b1", "b2", "b3", "b21", "b22", "b31", "b32", "b33")
_BRANCHES = {"b1": "branch_global", "b2": "branch_part2", "b3": "branch_part3"}
_FEATURE = "|".join(MGN_FEATURES)

#: Keys only fast-reid writes (our own checkpoints never have them).
_MARKER = re.compile(
    rf"^(heads\.(weight|bottleneck\.|bnneck\.|classifier\.|pool_layer\.)|({_FEATURE})_(head|pool)\.|backbone\.NL_\d)"
)

#: Shipped configs that build a fast-reid architecture, with the settings that identify it.
#: tests/modeling/formats/test_fastreid.py checks these against the YAML files.
SHIPPED_CONFIGS: Tuple[Tuple[str, Dict[str, object]], ...] = (
    ("configs/Market1501/bot_resnet50.yml",
     {"MODEL.META_ARCHITECTURE": "baseline", "MODEL.BACKBONE.NAME": "resnet50",
      "MODEL.BACKBONE.NON_LOCAL": [0, 0, 0, 0], "MODEL.HEADS.POOLING": "avg"}),
    ("configs/Market1501/bot_resnet50_ibn.yml",
     {"MODEL.META_ARCHITECTURE": "baseline", "MODEL.BACKBONE.NAME": "resnet50_ibn_a",
      "MODEL.BACKBONE.NON_LOCAL": [0, 0, 0, 0], "MODEL.HEADS.POOLING": "avg"}),
    ("configs/Market1501/sbs_resnet50.yml",
     {"MODEL.META_ARCHITECTURE": "baseline", "MODEL.BACKBONE.NAME": "resnet50",
      "MODEL.BACKBONE.NON_LOCAL": [0, 2, 3, 0], "MODEL.BACKBONE.NON_LOCAL_EMBED": 1,
      "MODEL.HEADS.POOLING": "gem"}),
    ("configs/Market1501/sbs_resnet50_ibn.yml",
     {"MODEL.META_ARCHITECTURE": "baseline", "MODEL.BACKBONE.NAME": "resnet50_ibn_a",
      "MODEL.BACKBONE.NON_LOCAL": [0, 2, 3, 0], "MODEL.BACKBONE.NON_LOCAL_EMBED": 1,
      "MODEL.HEADS.POOLING": "gem"}),
    ("configs/Market1501/mgn_fastreid_resnet50_ibn.yml",
     {"MODEL.META_ARCHITECTURE": "mgn", "MODEL.BACKBONE.NAME": "resnet50_ibn_a",
      "MODEL.MGN.POOLING": "gem", "MODEL.MGN.REDUCTION": "conv", "MODEL.MGN.REDUCTION_DIM": 256}),
)


class FastReIDWeightsError(ForeignWeightsError):
    """A fast-reid checkpoint does not fit the model it is loaded into (one-line message)."""


def is_fastreid_state(state: Mapping[str, object]) -> bool:
    """Whether a state dict was written by fast-reid (by its key names)."""
    return any(_MARKER.match(str(k)) for k in state)


# ------------------------------------------------------------------ architecture from the keys
def _count(state: Mapping[str, torch.Tensor], pattern: str) -> int:
    """1 + the largest integer captured by `pattern` over the keys, 0 when none matches."""
    regex = re.compile(pattern)
    found = [int(m.group(1)) for k in state for m in [regex.match(k)] if m]
    return max(found) + 1 if found else 0


def _backbone_name(state: Mapping[str, torch.Tensor], mgn: bool) -> str:
    if mgn:
        layer3 = 1 + _count(state, r"^b1\.0\.(\d+)\.")
        bottleneck = any(k.startswith("backbone.4.0.conv3.") for k in state)
    else:
        layer3 = _count(state, r"^backbone\.layer3\.(\d+)\.")
        bottleneck = any(k.startswith("backbone.layer1.0.conv3.") for k in state)
    depth = {2: 18, 6: 50 if bottleneck else 34, 23: 101, 36: 152}.get(layer3, 0)
    name = f"resnet{depth}" if depth else f"a ResNet with {layer3} blocks in stage 3"
    return name + "_ibn_a" if depth and any(".bn1.IN." in k for k in state) else name


def fastreid_architecture(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, object]":
    """The config settings under which our model has exactly the file's tensors.

    Only what the tensors reveal (or what fast-reid's configs always set) is listed; the
    stem pooling (``MODEL.BACKBONE.STEM_POOL``) and the input size are not stored in a
    checkpoint, and come from the config.
    """
    mgn = any(k.startswith(("b1_head.", "b1_pool.")) for k in state)
    settings: "OrderedDict[str, object]" = OrderedDict()
    settings["MODEL.META_ARCHITECTURE"] = "mgn" if mgn else "baseline"
    settings["MODEL.BACKBONE.NAME"] = _backbone_name(state, mgn)
    if mgn:
        gem = any(k.endswith("pool_layer.p") or re.match(rf"^({_FEATURE})_pool\.0\.p$", k) for k in state)
        settings["MODEL.MGN.POOLING"] = "gem" if gem else "avg"
        settings["MODEL.MGN.STRIPES"] = "chunk"
        settings["MODEL.MGN.GLOBAL_DOWNSAMPLE"] = False
        v0 = "b1_pool.2.weight" in state
        settings["MODEL.MGN.REDUCTION"] = "conv_bn_relu" if v0 else "conv"
        conv = state.get("b1_pool.1.weight" if v0 else "b1_head.bottleneck.0.weight")
        if conv is not None:
            settings["MODEL.MGN.REDUCTION_DIM"] = int(conv.shape[0])
        if any(k.startswith(("b1_head.weight", "b1_head.classifier.")) for k in state):
            settings["MODEL.MGN.LOSS_LAYOUT"] = "per_branch"
        return settings
    counts = [_count(state, rf"^backbone\.NL_{k}\.(\d+)\.") for k in range(1, 5)]
    settings["MODEL.BACKBONE.NON_LOCAL"] = counts
    theta = next((v for k, v in state.items() if re.match(r"^backbone\.NL_\d\.\d+\.theta\.weight$", k)), None)
    if theta is not None:
        half = theta.shape[1] // 2
        settings["MODEL.BACKBONE.NON_LOCAL_EMBED"] = 0 if theta.shape[0] == half else int(theta.shape[0])
    settings["MODEL.HEADS.POOLING"] = "gem" if "heads.pool_layer.p" in state else "avg"
    neck = any(k.startswith(("heads.bottleneck.0.", "heads.bnneck.")) for k in state)
    settings["MODEL.HEADS.NECK"] = "bnneck" if neck else "none"
    return settings


def suggest_config(state: Mapping[str, torch.Tensor]) -> str:
    """"KEY VALUE ..." settings the file needs, and a shipped config that has them, if any."""
    settings = fastreid_architecture(state)
    text = " ".join(f"{k} {format_value(v)}" for k, v in settings.items())
    for path, fixed in SHIPPED_CONFIGS:
        if all(k not in fixed or fixed[k] == v for k, v in settings.items()) and all(
            k in settings or k == "MODEL.BACKBONE.NON_LOCAL_EMBED" for k in fixed
        ):
            return f"{text} (e.g. --config-file {path})"
    return text


# ------------------------------------------------------------------ key rules
@dataclass(frozen=True)
class _Target:
    key: str                   # our key
    part: Optional[int] = None  # which of `parts` equal slices (dim 0) of our tensor this is
    parts: int = 1
    head: bool = False


def _non_local_target(key: str) -> Optional[str]:
    m = re.match(r"^backbone\.NL_(\d)\.(\d+)\.(theta|phi|g|W\.0|W\.1)\.(.+)$", key)
    if not m:
        return None
    stage, index, part, rest = int(m.group(1)) - 1, m.group(2), m.group(3), m.group(4)
    name = {"W.0": "out_conv", "W.1": "out_bn"}.get(part, part)
    return f"backbone.non_local.{stage}.{index}.{name}.{rest}"


def _baseline_target(key: str) -> Optional[_Target]:
    nl = _non_local_target(key)
    if nl:
        return _Target(nl)
    if key.startswith("backbone."):
        return _Target(key)
    if key == "heads.pool_layer.p":
        return _Target("pool.p")
    m = re.match(r"^heads\.(bottleneck\.0|bnneck)\.(.+)$", key)
    if m:
        return _Target(f"neck.{m.group(2)}")
    if key in ("heads.weight", "heads.classifier.weight"):
        return _Target("head.weight", head=True)
    return None


def _mgn_target(key: str) -> Optional[_Target]:
    m = re.match(r"^backbone\.(\d+)\.(.+)$", key)
    if m:
        return _Target(f"trunk.{m.group(1)}.{m.group(2)}")
    m = re.match(r"^(b[123])\.0\.(\d+)\.(.+)$", key)
    if m:  # res_conv4_2.. : fast-reid renumbers layer3[1:] from 0, our slice keeps layer3's indices
        return _Target(f"{_BRANCHES[m.group(1)]}.0.{int(m.group(2)) + 1}.{m.group(3)}")
    m = re.match(r"^(b[123])\.1\.(.+)$", key)
    if m:
        return _Target(f"{_BRANCHES[m.group(1)]}.1.{m.group(2)}")
    m = re.match(rf"^({_FEATURE})_(head|pool)\.(.+)$", key)
    if not m:
        return None
    i, kind, rest = MGN_FEATURES.index(m.group(1)), m.group(2), m.group(3)
    if kind == "pool":  # v0.x: Sequential(pool, conv, BN, ReLU)
        if rest.startswith("0."):
            return _Target(f"pools.{i}.{rest[2:]}")
        if rest.startswith(("1.", "2.")):
            return _Target(f"reductions.{i}.{int(rest[0]) - 1}.{rest[2:]}")
        return None
    if rest.startswith("pool_layer."):
        return _Target(f"pools.{i}.{rest[len('pool_layer.'):]}")
    if rest.startswith("bottleneck.0."):  # v1.x: 1x1 conv, then its BN is our neck's slice
        return _Target(f"reductions.{i}.0.{rest[len('bottleneck.0.'):]}")
    for neck in ("bottleneck.1.", "bnneck."):
        if rest.startswith(neck):
            return _Target(f"neck.{rest[len(neck):]}", part=i, parts=len(MGN_FEATURES))
    if rest in ("weight", "classifier.weight"):
        return _Target(f"heads.{i}.weight", head=True)
    return None


def _unsupported(state: Mapping[str, torch.Tensor]) -> Optional[str]:
    """The first key of a fast-reid feature this toolkit does not have, described; else None."""
    for key, value in state.items():
        if ".se." in key:
            return f"{key} belongs to a squeeze-and-excitation block (fast-reid MODEL.BACKBONE.WITH_SE)"
        if key == "heads.bottleneck.0.weight" and getattr(value, "dim", lambda: 1)() == 4:
            return (f"{key} is an embedding convolution in the head (fast-reid MODEL.HEADS.EMBEDDING_DIM > 0), "
                    "which this toolkit's Baseline does not have")
    return None


# ------------------------------------------------------------------ conversion
class _Fail:
    """Builds the one-line error: what did not fit, then what the file needs."""

    def __init__(self, state: Mapping[str, torch.Tensor], source: str, architecture: str) -> None:
        self.state, self.source, self.architecture = state, source, architecture

    def __call__(self, what: str) -> FastReIDWeightsError:
        where = f"fast-reid checkpoint {self.source}" if self.source else "fast-reid checkpoint"
        return FastReIDWeightsError(
            f"{where} ({self.architecture}) does not fit this model: {what}. It needs "
            f"{suggest_config(self.state)}."
        )


def _check_pixel_stats(model: nn.Module, key: str, value: torch.Tensor, fail: _Fail) -> None:
    own = getattr(getattr(model, "preprocess", None), key, None)
    config_key = "MODEL." + key.upper()
    if own is None or value.numel() != own.numel():
        raise fail(f"{key} of shape {tuple(value.shape)} does not fit {config_key}")
    if not torch.allclose(value.reshape(-1).float().cpu(), own.reshape(-1).float().cpu(), atol=1e-3):
        wanted = "[" + ", ".join(f"{float(v):g}" for v in value.reshape(-1)) + "]"
        raise fail(f"its {key} {wanted} differs from this config's {config_key}; set {config_key} {wanted}")


def convert_fastreid_state(state: Mapping[str, torch.Tensor], model: nn.Module, source: str = "") -> ConvertedWeights:
    """Map fast-reid state dict `state` onto `model` (a Baseline or MGN of this toolkit).

    Returns the converted tensors, the key mapping and notes. Raises
    :class:`FastReIDWeightsError` (one line: the first key that does not fit, and the
    settings the file needs) when the file and the model's architecture differ in any way.
    `source` (the file name) is used in messages only.
    """
    mgn = any(k.startswith(("b1_head.", "b1_pool.")) for k in state)
    architecture = "MGN" if mgn else "Baseline"
    naming = "v0.x" if any(k == "pixel_mean" or ".bnneck." in k or "classifier." in k or k.startswith("b1_pool.")
                           for k in state) else "v1.x"
    fail = _Fail(state, source, f"{architecture}, {naming} naming")
    own = model.state_dict()
    rule = _mgn_target if mgn else _baseline_target
    result = ConvertedWeights(state={}, naming=naming, architecture=architecture, label=LABEL)
    parts: Dict[str, List[Optional[torch.Tensor]]] = {}
    classifier: Dict[str, Tuple[str, torch.Tensor]] = {}

    unsupported = _unsupported(state)
    if unsupported:
        raise fail(unsupported)
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise fail(f"{key} is not a tensor")
        if key in ("pixel_mean", "pixel_std"):
            _check_pixel_stats(model, key, value, fail)
            continue
        target = rule(key)
        if target is None:
            raise fail(f"{key} has no counterpart in this toolkit's {architecture}")
        if target.head:
            classifier[target.key] = (key, value)
            continue
        if target.key not in own:
            ours = "" if target.key == key else f" (no {target.key})"
            raise fail(f"{key} has no counterpart in this model{ours}")
        wanted = own[target.key]
        if target.parts > 1:
            slot = parts.setdefault(target.key, [None] * target.parts)
            slot[target.part] = value
            slice_len = wanted.shape[0] // target.parts if wanted.dim() else 0
            fits = value.shape == wanted.shape if wanted.dim() == 0 else (
                value.dim() == 1 and wanted.shape[0] % target.parts == 0 and value.shape[0] == slice_len)
            shown = target.key if wanted.dim() == 0 else (
                f"{target.key}[{target.part * slice_len}:{(target.part + 1) * slice_len}]")
            if not fits:
                raise fail(f"{key} has shape {tuple(value.shape)} in the checkpoint but {shown} in this model "
                           f"is {tuple(wanted[:slice_len].shape) if wanted.dim() else ()}")
            result.mapping.append((key, shown))
            continue
        if value.shape != wanted.shape:
            # GeM's p: fast-reid keeps it as a 1-element vector, this toolkit as a scalar.
            if not (target.key.endswith(".p") and value.numel() == wanted.numel() == 1):
                raise fail(f"{key} has shape {tuple(value.shape)} in the checkpoint but {target.key} has "
                           f"{tuple(wanted.shape)} in this model")
            value = value.reshape(wanted.shape)
        result.state[target.key] = value
        result.mapping.append((key, target.key))

    for key, pieces in parts.items():
        if any(p is None for p in pieces):
            absent = MGN_FEATURES[pieces.index(None)]
            raise fail(f"{key} needs all 8 per-feature BatchNorms but {absent}'s is missing")
        # num_batches_tracked is one counter per BatchNorm; the 8 counted the same steps.
        result.state[key] = pieces[0].clone() if own[key].dim() == 0 else torch.cat(pieces)

    head_prefixes = tuple(head_modules(model))
    unfilled = [k for k in own if k not in result.state and not k.startswith(head_prefixes)
                and not k.endswith("num_batches_tracked")]
    for key in unfilled:
        if key.endswith("pool.p") or re.match(r"^pools\.\d+\.p$", key):
            # fast-reid's fixed-exponent GeneralizedMeanPooling stores no p; ours keeps MODEL.HEADS.GEM_P.
            result.notes.append(f"{key}: the checkpoint stores no GeM exponent; kept MODEL.HEADS.GEM_P "
                                f"({float(own[key]):g}), as fast-reid's fixed-p GeneralizedMeanPooling")
            continue
        raise fail(f"this model's {key} has no counterpart in the checkpoint")
    place_classifier(model, classifier, own, result, LABEL)
    return result


def classifier_classes(state: Mapping[str, torch.Tensor]) -> int:
    """Classes of the file's identity classifier (0 when it has none)."""
    for key in ("heads.weight", "heads.classifier.weight", "b1_head.weight", "b1_head.classifier.weight"):
        if key in state:
            return int(state[key].shape[0])
    return 0


FORMAT = WeightsFormat(label=LABEL, detect=is_fastreid_state, convert=convert_fastreid_state,
                       suggest_config=suggest_config, classifier_classes=classifier_classes,
                       markers="heads.weight, heads.bottleneck.0.weight, b1_head.*")


__all__ = [
    "FORMAT",
    "FastReIDWeightsError",
    "MGN_FEATURES",
    "SHIPPED_CONFIGS",
    "classifier_classes",
    "convert_fastreid_state",
    "fastreid_architecture",
    "is_fastreid_state",
    "suggest_config",
]
