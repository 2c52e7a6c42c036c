"""CLIP-ReID checkpoints onto this toolkit's ``clipreid`` models: recognition, key mapping, strict checks.

CLIP-ReID (github.com/Syliz517/CLIP-ReID; Li et al., AAAI 2023) saves ``model.state_dict()`` of its
``build_transformer`` bare: the CLIP image encoder under ``image_encoder.`` (OpenAI's names), the
SIE table ``cv_embed`` ``[cameras, 768]`` (ViT with ``MODEL.SIE_CAMERA``), the BNNecks
``bottleneck`` / ``bottleneck_proj`` and the bias-free classifiers ``classifier`` /
``classifier_proj``; files of its two-stage training also hold the text side (``prompt_learner.*``:
the learned identity prompts and the tokenised template; ``text_encoder.*``: CLIP's text
transformer), which image features do not use. BoxMOT's ``clip_*.pt`` re-ID files are these
checkpoints.

``image_encoder.<key>`` -> ``backbone.<key>``, ``cv_embed`` -> ``backbone.sie_embed``,
``bottleneck.*`` -> ``neck.*``, ``bottleneck_proj.*`` -> ``neck_proj.*``, ``classifier.*`` ->
``head.*``, ``classifier_proj.*`` -> ``proj_head.*`` (loaded when the model has linear heads of the
file's class count, otherwise dropped with a note); the text side is dropped with a note. Every
other tensor must fit, and every tensor of the model must come from the file.

What a file cannot say: SIE's coefficient (CLIP-ReID's README trains its SIE models with
``SIE_COE 1.0``, which the suggested settings assume) and the pixel normalisation (0.5 / 0.5 for
its ViT configs, ImageNet's for RN50: the shipped configs set each).
"""
from __future__ import annotations

from collections import OrderedDict
from functools import partial
from typing import Mapping

import torch
from torch import nn

from reid.config.sie_keys import sie_prefix

from .base import (ConvertedWeights, ForeignWeightsError, Target, WeightsFormat, classifier_rows, dropped, map_state,
                   refusal, rename_by_rules, settings_text, vit_description, vit_settings)

LABEL = "CLIP-ReID"
#: Input sizes CLIP-ReID trains at (people; vehicles), tried in order to explain a position table.
_SIZES = ((256, 128), (256, 256), (384, 128), (320, 320), (224, 224), (128, 64))
_MSMT17_CLASSES = (1041,)
_TEXT_NOTE = ("the text side (prompt_learner.*, text_encoder.*: CLIP-ReID's learned prompts and CLIP's text "
              "encoder) not loaded: image features do not use it")


class ClipReIDWeightsError(ForeignWeightsError):
    """A CLIP-ReID checkpoint does not fit the model it is loaded into (one-line message)."""


def is_clipreid_state(state: Mapping[str, object]) -> bool:
    """Whether a state dict (no ``module.`` prefix) was written by CLIP-ReID, by its key names."""
    return "image_encoder.conv1.weight" in state and "bottleneck_proj.weight" in state


def _is_vit(state: Mapping[str, torch.Tensor]) -> bool:
    return "image_encoder.class_embedding" in state


def clipreid_architecture(state: Mapping[str, torch.Tensor]) -> "OrderedDict[str, object]":
    """The config settings under which our model has exactly the file's tensors."""
    settings: "OrderedDict[str, object]" = OrderedDict()
    settings["MODEL.META_ARCHITECTURE"] = "clipreid"
    vit = _is_vit(state)
    settings["MODEL.BACKBONE.NAME"] = "clip_vit_b16" if vit else "clip_rn50"
    node = sie_prefix(str(settings["MODEL.BACKBONE.NAME"]))
    key = "image_encoder.positional_embedding" if vit else "image_encoder.attnpool.positional_embedding"
    table = state.get(key)
    positions = int(table.shape[0]) - 1 if isinstance(table, torch.Tensor) and table.dim() == 2 else -1
    # ViT: 16-pixel patches, any stride; RN50: a 16-pixel grid (last stride 1).
    vit_settings(settings, node, positions, _SIZES, range(16, 7, -1) if vit else (16,), state.get("cv_embed"),
                 stride=vit)
    if "cv_embed" in state:
        settings[f"{node}.SIE_COEF"] = 1.0
    settings["MODEL.HEADS.NECK"] = "bnneck"
    return settings


def classifier_classes(state: Mapping[str, torch.Tensor]) -> int:
    """Classes of the file's identity classifiers (0 when it has none)."""
    return classifier_rows(state, "classifier.weight", "classifier_proj.weight")


def suggest_config(state: Mapping[str, torch.Tensor]) -> str:
    """"KEY VALUE ..." settings the file needs, and the shipped config to start from."""
    settings = clipreid_architecture(state)
    dataset = "MSMT17" if classifier_classes(state) in _MSMT17_CLASSES else "Market1501"
    name = "clip_vit_b16_sie_olp" if "cv_embed" in state else (
        "clip_vit_b16_baseline" if _is_vit(state) else "clip_rn50_baseline")
    return f"{settings_text(settings)} (e.g. --config-file configs/{dataset}/{name}.yml with these overrides)"


def _describe(state: Mapping[str, torch.Tensor]) -> str:
    settings = clipreid_architecture(state)
    what = vit_description(settings)
    if any(k.startswith("prompt_learner.") for k in state):
        what.append("two-stage")
    return ", ".join(what)


def _fail(state: Mapping[str, torch.Tensor], source: str, what: str) -> ClipReIDWeightsError:
    return refusal(ClipReIDWeightsError, LABEL, source, _describe(state), what, suggest_config(state))


#: CLIP-ReID's names -> ours (the module docstring).
_RENAME = rename_by_rules([
    (r"(prompt_learner|text_encoder)\..+", dropped(_TEXT_NOTE)),
    (r"classifier_proj\.(.*)", Target(r"proj_head.\1", head=True)),
    (r"classifier\.(.*)", Target(r"head.\1", head=True)),
    (r"image_encoder\.(.*)", r"backbone.\1"),
    (r"cv_embed", "backbone.sie_embed"),
    (r"bottleneck_proj\.(.*)", r"neck_proj.\1"),
    (r"bottleneck\.(.*)", r"neck.\1"),
])


def convert_clipreid_state(state: Mapping[str, torch.Tensor], model: nn.Module, source: str = "") -> ConvertedWeights:
    """Map CLIP-ReID state dict `state` onto `model` (a ``clipreid`` model).

    Raises :class:`ClipReIDWeightsError` (one line: the first key that does not fit, and the
    settings the file needs) when the architectures differ in any way.
    """
    result = ConvertedWeights(state={}, architecture=_describe(state), label=LABEL)
    map_state(state, model, _RENAME, partial(_fail, state, source), result)
    if "cv_embed" in state:
        # Its SIE_VIEW option indexes the table by camera * views + view; nothing in the file says so.
        result.notes.append(f"cv_embed's {state['cv_embed'].shape[0]} rows are read as one per camera id (MODEL.SIE_CAMERA); "
                            "a file trained with CLIP-ReID's MODEL.SIE_VIEW has one per (camera, view) pair and "
                            "gives other features here")
    return result


FORMAT = WeightsFormat(label=LABEL, detect=is_clipreid_state, convert=convert_clipreid_state,
                       suggest_config=suggest_config, classifier_classes=classifier_classes,
                       markers="image_encoder.conv1.weight, bottleneck_proj.weight")


__all__ = [
    "FORMAT",
    "ClipReIDWeightsError",
    "classifier_classes",
    "clipreid_architecture",
    "convert_clipreid_state",
    "is_clipreid_state",
    "suggest_config",
]
