"""TransReID checkpoints onto this toolkit's TransReID models: recognition, key mapping, strict checks.

TransReID (github.com/damo-cv/TransReID) saves ``model.state_dict()`` bare. Its models:

* without JPM (``build_transformer``): the ViT under ``base.`` (``cls_token``, ``pos_embed``,
  ``sie_embed`` with SIE, ``patch_embed.proj``, ``blocks.<i>``, ``norm``, and an unused
  ImageNet-sized ``fc``), a BNNeck ``bottleneck`` and a bias-free ``classifier``: here a Baseline
  with a ``vit_*_transreid`` backbone, ``NECK bnneck``, a ``linear`` head without bias;
* with JPM (``build_transformer_local``): the same plus the branches ``b1`` / ``b2`` (a block and a
  norm each) and ``bottleneck_<i>`` / ``classifier_<i>`` for the k local features: here the
  ``transreid`` meta architecture.

``base.<key>`` -> ``backbone.<key>``, ``b1.*``/``b2.*`` as they are, ``bottleneck.*`` -> ``neck.*``,
``bottleneck_<i>.*`` -> ``local_necks.<i-1>.*``, ``classifier.*`` -> ``head.*``,
``classifier_<i>.*`` -> ``local_heads.<i-1>.*``. ``base.fc`` (TransReID builds its ViT with a
1000-class classifier that no forward uses) is dropped with a note. Every other tensor of the file
must fit, and every tensor of the model must come from the file; the identity heads load when the
model has linear heads of the file's class count, and are otherwise dropped with a note.

PersonViT (github.com/hustvl/PersonViT) fine-tunes with a copy of TransReID's code, so its files
have this layout too and load here; its recipe's files (no SIE, no JPM, stride 16) are pointed to
``configs/<Dataset>/vit_*_personvit.yml``. Its "ics" variant (a convolutional stem,
``base.patch_embed.conv.*``) and its optional ``fcneck`` (``MODEL.REDUCE_FEAT_DIM``) have no
counterpart in this toolkit and are refused in one line.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from functools import partial
from typing import Mapping

import torch
from torch import nn

from ..backbones import VIT_SPECS
from ..backbones.vit import PATCH_SIZE
from .base import (ConvertedWeights, ForeignWeightsError, Target, WeightsFormat, classifier_rows, dropped, map_state,
                   refusal, rename_by_rules, settings_text, vit_description, vit_settings)

LABEL = "TransReID"
#: Input sizes TransReID trains people at, tried in order to explain a position-embedding length.
_SIZES = ((256, 128), (384, 128), (128, 64))
_MSMT17_CLASSES = (1041,)
#: Prefixes of tensors that PersonViT's / TransReID-SSL's code can add and this toolkit lacks -> what they are.
_UNSUPPORTED = {"base.patch_embed.conv.": "the convolutional stem of an \"ics\" model (MODEL.STEM_CONV)",
                "fcneck.": "a feature-reduction layer (MODEL.REDUCE_FEAT_DIM)"}


class TransReIDWeightsError(ForeignWeightsError):
    """A TransReID checkpoint does not fit the model it is loaded into (one-line message)."""


def is_transreid_state(state: Mapping[str, object]) -> bool:
    """Whether a state dict (no ``module.`` prefix) was written by TransReID, by its key names."""
    return "base.patch_embed.proj.weight" in state and "bottleneck.weight" in state


def _parts(state: Mapping[str, torch.Tensor]) -> int:
    return len({m.group(1) for k in state for m in [re.match(r"^bottleneck_(\d+)\.", k)] if m})


def transreid_architecture(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, object]":
    """The config settings under which our model has exactly the file's tensors."""
    settings: "OrderedDict[str, object]" = OrderedDict()
    parts = _parts(state)
    settings["MODEL.META_ARCHITECTURE"] = "transreid" if parts else "baseline"
    width = int(state["base.cls_token"].shape[-1]) if "base.cls_token" in state else 0
    names = {spec.embed_dim: name for name, spec in VIT_SPECS.items()}  # the families differ in width
    settings["MODEL.BACKBONE.NAME"] = names.get(width, f"(a ViT of width {width} this toolkit lacks)")
    pos = state.get("base.pos_embed")
    vit_settings(settings, "MODEL.TRANSREID", int(pos.shape[1]) - 1 if pos is not None else -1, _SIZES,
                 range(PATCH_SIZE, 7, -1), state.get("base.sie_embed"), patch=PATCH_SIZE)
    if parts:
        settings["MODEL.TRANSREID.JPM_PARTS"] = parts
    settings["MODEL.HEADS.NECK"] = "bnneck"
    return settings


def classifier_classes(state: Mapping[str, torch.Tensor]) -> int:
    """Classes of the file's identity classifier (0 when it has none)."""
    return classifier_rows(state, "classifier.weight")


def suggest_config(state: Mapping[str, torch.Tensor]) -> str:
    """"KEY VALUE ..." settings the file needs, and the shipped config for TransReID's full model."""
    settings = transreid_architecture(state)
    text = settings_text(settings)
    dataset = "MSMT17" if classifier_classes(state) in _MSMT17_CLASSES else "Market1501"
    name = str(settings["MODEL.BACKBONE.NAME"])
    if name not in VIT_SPECS:
        return text
    plain = (settings["MODEL.META_ARCHITECTURE"] == "baseline" and not settings["MODEL.TRANSREID.SIE_CAMERA"]
             and settings.get("MODEL.TRANSREID.STRIDE_SIZE") == [16, 16])
    if plain:  # PersonViT's recipe is this model: its configs need the fewest overrides
        name = name.replace("_transreid", "_personvit")
    return f"{text} (e.g. --config-file configs/{dataset}/{name}.yml with these overrides)"


def _describe(state: Mapping[str, torch.Tensor]) -> str:
    settings = transreid_architecture(state)
    what = vit_description(settings)
    if settings.get("MODEL.TRANSREID.JPM_PARTS"):
        what.append("JPM")
    return ", ".join(what)


def _fail(state: Mapping[str, torch.Tensor], source: str, what: str, settings: bool = True) -> TransReIDWeightsError:
    """The one-line error; with `settings`, followed by the settings under which the file fits."""
    return refusal(TransReIDWeightsError, LABEL, source, _describe(state), what,
                   suggest_config(state) if settings else "")


#: TransReID's names -> ours (the module docstring); identity heads first, then the rest.
_RENAME = rename_by_rules([
    (r"base\.fc\..+", dropped("base.fc (an ImageNet-sized classifier that TransReID's forward never uses) not loaded")),
    (r"classifier_(\d+)\.(.*)", lambda m: Target(f"local_heads.{int(m[1]) - 1}.{m[2]}", head=True)),
    (r"classifier\.(.*)", Target(r"head.\1", head=True)),
    (r"base\.(.*)", r"backbone.\1"),
    (r"bottleneck_(\d+)\.(.*)", lambda m: f"local_necks.{int(m[1]) - 1}.{m[2]}"),
    (r"bottleneck\.(.*)", r"neck.\1"),
    (r".*", r"\g<0>"),  # b1.*, b2.*
])


def convert_transreid_state(state: Mapping[str, torch.Tensor], model: nn.Module, source: str = "") -> ConvertedWeights:
    """Map TransReID state dict `state` onto `model` (a Baseline with a TransReID ViT, or a TransReID model).

    Raises :class:`TransReIDWeightsError` (one line: the first key that does not fit, and the
    settings the file needs) when the architectures differ in any way.
    """
    # Before any key-by-key check: with another key order the first misfit would be a tensor these
    # parts reshape (a 64-channel patch projection, a reduced BNNeck), and its suggested config cannot work.
    for key in state:
        unsupported = [what for prefix, what in _UNSUPPORTED.items() if key.startswith(prefix)]
        if unsupported:
            raise _fail(state, source, f"{key} has no counterpart in this model: it belongs to {unsupported[0]}, "
                                       "which this toolkit does not implement; use a file without it", settings=False)
    result = ConvertedWeights(state={}, architecture=_describe(state), label=LABEL)
    return map_state(state, model, _RENAME, partial(_fail, state, source), result)


FORMAT = WeightsFormat(label=LABEL, detect=is_transreid_state, convert=convert_transreid_state,
                       suggest_config=suggest_config, classifier_classes=classifier_classes,
                       markers="base.patch_embed.proj.weight, base.pos_embed, bottleneck.weight")


__all__ = [
    "FORMAT",
    "TransReIDWeightsError",
    "classifier_classes",
    "convert_transreid_state",
    "is_transreid_state",
    "suggest_config",
    "transreid_architecture",
]
