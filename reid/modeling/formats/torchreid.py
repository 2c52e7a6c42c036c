"""torchreid checkpoints onto this toolkit's Baseline: recognition, key mapping, strict checks.

torchreid (github.com/KaiyangZhou/deep-person-reid) trains one module per model: the
backbone's layers at the top level (OSNet ``conv1`` .. ``conv5``, plus ``pool2`` / ``pool3`` in
OSNet-AIN; ResNet ``conv1``, ``bn1``, ``layer1`` .. ``layer4``), an optional embedding ``fc``
(``fc.0`` Linear, ``fc.1`` BatchNorm1d, then a ReLU; 512-d in OSNet and resnet50_fc512) and a
``classifier`` Linear with a bias. Its test-time feature is the output of ``fc`` (after the
ReLU), or the pooled map when there is none. Files are a bare state dict or
``{"state_dict", "epoch", "rank1", "optimizer"}``, often with a ``module.`` prefix
(``reid.engine.checkpoint_files`` unwraps both).

Here the same model is a Baseline with ``MODEL.HEADS.POOLING avg``, ``FC_DIM`` = fc's width,
``NECK none`` and (to load the classifier) a ``linear`` head with ``BIAS True``: ``<key>`` ->
``backbone.<key>``, ``fc.<i>.*`` -> ``embedding.<i>.*``, ``classifier.*`` -> ``head.*``. Every
tensor of the file must fit, and every tensor of the model must come from the file, except
the identity head (loaded when its class count matches, else dropped with a note) and a
BNNeck, which torchreid models do not have: it keeps its initialisation, with a note (a fresh
BatchNorm at eval divides by sqrt(1 + 1e-5), which L2 normalisation undoes).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from functools import partial
from typing import Mapping, Optional, Tuple

import torch
from torch import nn

from ..backbones import OSNET_NAMES, osnet_name_from_state
from .base import (ConvertedWeights, ForeignWeightsError, Target, WeightsFormat, classifier_rows, keep_counters,
                   map_state, refusal, rename_by_rules, settings_text)

LABEL = "torchreid"

#: Backbones with a shipped ``configs/<dataset>/<name>_torchreid.yml``; the others are named
#: as an override of the config of their family (tests/modeling/test_torchreid_weights.py
#: checks that every file exists and builds that backbone).
CONFIG_NAMES: Tuple[str, ...] = ("osnet_x1_0", "osnet_x0_75", "osnet_x0_5", "osnet_x0_25", "osnet_ibn_x1_0",
                                 "osnet_ain_x1_0")
#: Training class counts of torchreid's MSMT17 files (train split; combineall = train + test ids).
_MSMT17_CLASSES = (1041, 4101)


class TorchreidWeightsError(ForeignWeightsError):
    """A torchreid checkpoint does not fit the model it is loaded into (one-line message)."""


def is_torchreid_state(state: Mapping[str, object]) -> bool:
    """Whether a state dict (no ``module.`` prefix) was written by torchreid, by its key names."""
    keys = [str(k) for k in state]
    if not keys or any(k.startswith(("backbone.", "trunk.", "heads.")) for k in keys):
        return False  # this toolkit's and fast-reid's files
    if "conv1.conv.weight" in state:  # OSNet
        return True
    return "layer1.0.conv1.weight" in state and any(k.startswith("classifier.") for k in keys)  # ResNet


def _backbone_name(state: Mapping[str, torch.Tensor]) -> Optional[str]:
    backbone = {k: v for k, v in state.items() if not k.startswith(("fc.", "classifier."))}
    name = osnet_name_from_state(backbone)
    if name:
        return name
    bottleneck = "layer1.0.conv3.weight" in state
    blocks = {int(m.group(1)) for k in state for m in [re.match(r"^layer3\.(\d+)\.", k)] if m}
    return "resnet50" if bottleneck and blocks and max(blocks) == 5 else None


def torchreid_architecture(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, object]":
    """The config settings under which our model has exactly the file's tensors."""
    settings: "OrderedDict[str, object]" = OrderedDict()
    settings["MODEL.META_ARCHITECTURE"] = "baseline"
    settings["MODEL.BACKBONE.NAME"] = _backbone_name(state) or "(an OSNet or ResNet50 variant this toolkit lacks)"
    fc = state.get("fc.0.weight")
    if settings["MODEL.BACKBONE.NAME"] == "resnet50":
        # torchreid's resnet50 keeps ResNet's last stride 2; its resnet50_fc512 uses 1.
        settings["MODEL.BACKBONE.LAST_STRIDE"] = 1 if fc is not None else 2
    settings["MODEL.HEADS.POOLING"] = "avg"
    settings["MODEL.HEADS.FC_DIM"] = int(fc.shape[0]) if fc is not None else 0
    settings["MODEL.HEADS.NECK"] = "none"
    return settings


def classifier_classes(state: Mapping[str, torch.Tensor]) -> int:
    """Classes of the file's identity classifier (0 when it has none)."""
    return classifier_rows(state, "classifier.weight")


def shipped_config(name: str, classes: int = 0) -> str:
    """``--config-file ...`` for backbone `name` (plus the name as an override when no config has it)."""
    dataset = "MSMT17" if classes in _MSMT17_CLASSES else "Market1501"
    if name in CONFIG_NAMES:
        return f"--config-file configs/{dataset}/{name}_torchreid.yml"
    if name in OSNET_NAMES:
        family = "osnet_ain_x1_0" if name.startswith("osnet_ain_") else "osnet_x1_0"
        return f"--config-file configs/{dataset}/{family}_torchreid.yml MODEL.BACKBONE.NAME {name}"
    return ""


def suggest_config(state: Mapping[str, torch.Tensor]) -> str:
    """"KEY VALUE ..." settings the file needs, and a shipped config that has them, if any."""
    settings = torchreid_architecture(state)
    text = settings_text(settings)
    config = shipped_config(str(settings["MODEL.BACKBONE.NAME"]), classifier_classes(state))
    return f"{text} (e.g. {config})" if config else text


def _fail(state: Mapping[str, torch.Tensor], source: str, what: str) -> TorchreidWeightsError:
    name = _backbone_name(state) or "unknown backbone"
    return refusal(TorchreidWeightsError, LABEL, source, name, what, suggest_config(state))


#: torchreid's names -> ours (the module docstring).
_RENAME = rename_by_rules([
    (r"classifier\.(.+)", Target(r"head.\1", head=True)),
    (r"fc\.(.+)", r"embedding.\1"),
    (r".+", r"backbone.\g<0>"),
])
_NO_NECK = ("torchreid models have no BNNeck: this model's neck keeps its initialisation "
            "(MODEL.HEADS.NECK none gives torchreid's own model)")


def _keep(key: str, ours: torch.Tensor) -> Optional[str]:
    """Counters are absent from files of torch < 0.4.1; the neck from every torchreid model."""
    return _NO_NECK if key.startswith("neck.") else keep_counters(key, ours)


def convert_torchreid_state(state: Mapping[str, torch.Tensor], model: nn.Module, source: str = "") -> ConvertedWeights:
    """Map torchreid state dict `state` onto `model` (a Baseline of this toolkit).

    Raises :class:`TorchreidWeightsError` (one line: the first key that does not fit, and the
    settings and config the file needs) when the architectures differ in any way.
    """
    result = ConvertedWeights(state={}, architecture=_backbone_name(state) or "unknown", label=LABEL)
    return map_state(state, model, _RENAME, partial(_fail, state, source), result, keep=_keep)


FORMAT = WeightsFormat(label=LABEL, detect=is_torchreid_state, convert=convert_torchreid_state,
                       suggest_config=suggest_config, classifier_classes=classifier_classes,
                       markers="conv1.conv.weight, fc.0.weight, classifier.weight")


__all__ = [
    "CONFIG_NAMES",
    "FORMAT",
    "TorchreidWeightsError",
    "classifier_classes",
    "convert_torchreid_state",
    "is_torchreid_state",
    "shipped_config",
    "suggest_config",
    "torchreid_architecture",
]
