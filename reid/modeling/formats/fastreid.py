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
from dataclasses import replace
from typing import Callable, Dict, Mapping, Optional, Tuple

import torch
from torch import nn

from .base import (ConvertedWeights, ForeignWeightsError, Target, WeightsFormat, as_target, classifier_rows, dropped,
                   keep_counters, map_state, refusal, rename_by_rules, settings_text)

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
    ("configs/VehicleID/bot_resnet50_ibn.yml",
     {"MODEL.META_ARCHITECTURE": "baseline", "MODEL.BACKBONE.NAME": "resnet50_ibn_a",
      "MODEL.BACKBONE.NON_LOCAL": [0, 0, 0, 0], "MODEL.HEADS.POOLING": "gem_fixed"}),
)
#: Classifier sizes of fast-reid's vehicle training sets whose bagtricks configs pool with the
#: fixed-exponent GeneralizedMeanPooling (VehicleID 13,164 vehicles, VERI-Wild 30,671): a file
#: stores no tensor for that pooling nor for average pooling, so the class count tells them apart.
_FIXED_GEM_CLASSES = (13164, 30671)


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
    fixed = classifier_classes(state) in _FIXED_GEM_CLASSES
    settings["MODEL.HEADS.POOLING"] = "gem" if "heads.pool_layer.p" in state else ("gem_fixed" if fixed else "avg")
    neck = any(k.startswith(("heads.bottleneck.0.", "heads.bnneck.")) for k in state)
    settings["MODEL.HEADS.NECK"] = "bnneck" if neck else "none"
    return settings


def suggest_config(state: Mapping[str, torch.Tensor]) -> str:
    """"KEY VALUE ..." settings the file needs, and a shipped config that has them, if any."""
    settings = fastreid_architecture(state)
    text = settings_text(settings)
    for path, fixed in SHIPPED_CONFIGS:
        if all(k not in fixed or fixed[k] == v for k, v in settings.items()) and all(
            k in settings or k == "MODEL.BACKBONE.NON_LOCAL_EMBED" for k in fixed
        ):
            return f"{text} (e.g. --config-file {path})"
    return text


# ------------------------------------------------------------------ key rules
_NON_LOCAL_PARTS = {"W.0": "out_conv", "W.1": "out_bn"}


def _non_local(m: "re.Match") -> str:
    """``backbone.NL_k.i.<part>.*`` -> ``backbone.non_local.(k-1).i.<our part>.*``."""
    return f"backbone.non_local.{int(m[1]) - 1}.{m[2]}.{_NON_LOCAL_PARTS.get(m[3], m[3])}.{m[4]}"


def _feature(m: "re.Match") -> int:
    return MGN_FEATURES.index(m[1])


_BASELINE_RULES = rename_by_rules([
    (r"backbone\.NL_(\d)\.(\d+)\.(theta|phi|g|W\.0|W\.1)\.(.+)", _non_local),
    (r"backbone\..+", r"\g<0>"),
    (r"heads\.pool_layer\.p", "pool.p"),
    (r"heads\.(?:bottleneck\.0|bnneck)\.(.+)", r"neck.\1"),
    (r"heads\.(?:classifier\.)?weight", Target("head.weight", head=True)),
])
_MGN_RULES = rename_by_rules([
    (r"backbone\.(\d+)\.(.+)", r"trunk.\1.\2"),
    # res_conv4_2.. : fast-reid renumbers layer3[1:] from 0, our slice keeps layer3's indices
    (r"(b[123])\.0\.(\d+)\.(.+)", lambda m: f"{_BRANCHES[m[1]]}.0.{int(m[2]) + 1}.{m[3]}"),
    (r"(b[123])\.1\.(.+)", lambda m: f"{_BRANCHES[m[1]]}.1.{m[2]}"),
    # v0.x: Sequential(pool, conv, BN, ReLU)
    (rf"({_FEATURE})_pool\.0\.(.+)", lambda m: f"pools.{_feature(m)}.{m[2]}"),
    (rf"({_FEATURE})_pool\.([12])\.(.+)", lambda m: f"reductions.{_feature(m)}.{int(m[2]) - 1}.{m[3]}"),
    # v1.x: the head's pool, 1x1 conv, then its BN, which is our neck's slice
    (rf"({_FEATURE})_head\.pool_layer\.(.+)", lambda m: f"pools.{_feature(m)}.{m[2]}"),
    (rf"({_FEATURE})_head\.bottleneck\.0\.(.+)", lambda m: f"reductions.{_feature(m)}.0.{m[2]}"),
    (rf"({_FEATURE})_head\.(?:bottleneck\.1|bnneck)\.(.+)",
     lambda m: Target(f"neck.{m[2]}", part=_feature(m), pieces=MGN_FEATURES, whole="per-feature BatchNorms")),
    (rf"({_FEATURE})_head\.(?:classifier\.)?weight", lambda m: Target(f"heads.{_feature(m)}.weight", head=True)),
])


def _gem_p(value: torch.Tensor, ours: torch.Tensor) -> torch.Tensor:
    """GeM's p: fast-reid keeps it as a 1-element vector, this toolkit as a scalar."""
    return value.reshape(ours.shape) if value.numel() == ours.numel() == 1 else value


def _rename(rules: Callable[[str], Optional[Target]]) -> Callable[[str], Optional[Target]]:
    """`rules`, with the checked pixel statistics not loaded and GeM's p reshaped."""

    def rename(key: str) -> Optional[Target]:
        if key in ("pixel_mean", "pixel_std"):
            return dropped()  # checked against the config first (_check_pixel_stats)
        target = as_target(rules(key))
        return replace(target, adapt=_gem_p) if target is not None and target.key.endswith(".p") else target

    return rename


def _keep(key: str, ours: torch.Tensor) -> Optional[str]:
    """fast-reid's fixed-exponent GeneralizedMeanPooling stores no p; ours keeps MODEL.HEADS.GEM_P."""
    if key.endswith("pool.p") or re.match(r"^pools\.\d+\.p$", key):
        return (f"{key}: the checkpoint stores no GeM exponent; kept MODEL.HEADS.GEM_P ({float(ours):g}), "
                "as fast-reid's fixed-p GeneralizedMeanPooling")
    return keep_counters(key, ours)


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
def _fail(state: Mapping[str, torch.Tensor], source: str, architecture: str) -> Callable[[str], FastReIDWeightsError]:
    """Builds the one-line error: what did not fit, then what the file needs."""
    return lambda what: refusal(FastReIDWeightsError, LABEL, source, architecture, what, suggest_config(state))


def _check_pixel_stats(model: nn.Module, key: str, value: torch.Tensor,
                       fail: Callable[[str], FastReIDWeightsError]) -> None:
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
    fail = _fail(state, source, f"{architecture}, {naming} naming")
    unsupported = _unsupported(state)
    if unsupported:
        raise fail(unsupported)
    for key in ("pixel_mean", "pixel_std"):  # v0.x: the normalisation, which the config sets here
        if isinstance(state.get(key), torch.Tensor):
            _check_pixel_stats(model, key, state[key], fail)
    result = ConvertedWeights(state={}, naming=naming, architecture=architecture, label=LABEL)
    # The tensors _keep keeps (step counters, a learnable GeM exponent the file lacks) keep the
    # model's values: a fixed-p file then pools with GEM_P, as fast-reid did.
    map_state(state, model, _rename(_MGN_RULES if mgn else _BASELINE_RULES), fail, result,
              unmapped=f"this toolkit's {architecture}", keep=_keep)
    pooling = fastreid_architecture(state).get("MODEL.HEADS.POOLING")
    if pooling == "gem_fixed" and type(getattr(model, "pool", None)).__name__ == "AvgPool":
        result.notes.append(f"its classifier has {classifier_classes(state)} classes, the size of a vehicle set whose "
                            "fast-reid recipe pools with a fixed-exponent GeM (no tensor in the file), but this model "
                            "averages: set MODEL.HEADS.POOLING gem_fixed if the file was trained that way")
    return result


def classifier_classes(state: Mapping[str, torch.Tensor]) -> int:
    """Classes of the file's identity classifier (0 when it has none)."""
    return classifier_rows(state, "heads.weight", "heads.classifier.weight", "b1_head.weight",
                           "b1_head.classifier.weight")


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
