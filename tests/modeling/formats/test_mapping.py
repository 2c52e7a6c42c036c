"""The steps every checkpoint format shares: a rule table, map_state, and the one per-key check (misfit).

A made-up format with OpenAI-CLIP-like names maps onto a tiny model here: a prefix rename, q/k/v
pieces of one fused projection, a transposed projection, a dropped tensor, the classifier.
"""
from __future__ import annotations

from functools import partial

import pytest
import torch
from torch import nn

from reid.modeling.backbones.pretrained import fit_problem
from reid.modeling.formats.base import (ConvertedWeights, ForeignWeightsError, Target, dropped, map_state, misfit,
                                        part_of, refusal, rename_by_rules)


class _Tiny(nn.Module):
    """backbone (Linear + BatchNorm1d), a fused qkv projection, a projection, an optional head."""

    def __init__(self, classes: int = 0) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
        self.qkv = nn.Linear(2, 6)  # weight [6, 2]: q, k, v rows of 2 each
        self.proj = nn.Linear(6, 3, bias=False)  # weight [3, 6]; the file keeps it [6, 3] (x @ proj)
        if classes:
            self.head = nn.Linear(3, classes, bias=False)


class _Error(ForeignWeightsError):
    pass


RULES = rename_by_rules([
    (r"image_encoder\.logit_scale", dropped("logit_scale (CLIP's text-image temperature) not loaded")),
    (r"classifier\.(.+)", Target(r"head.\1", head=True)),
    (r"image_encoder\.(q|k|v)_proj\.(weight|bias)",
     lambda m: Target(f"qkv.{m[2]}", part="qkv".index(m[1]), pieces=("q", "k", "v"), whole="projections")),
    (r"image_encoder\.proj", Target("proj.weight", adapt=lambda value, ours: value.t())),
    (r"image_encoder\.(.+)", r"backbone.\1"),
])


def _file(classes: int = 0, **replaced: torch.Tensor) -> dict:
    torch.manual_seed(0)
    state = {f"image_encoder.{k}": v.clone() for k, v in nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6))
             .state_dict().items()}
    for name in "qkv":
        state[f"image_encoder.{name}_proj.weight"] = torch.randn(2, 2)
        state[f"image_encoder.{name}_proj.bias"] = torch.randn(2)
    state["image_encoder.proj"] = torch.randn(6, 3)
    state["image_encoder.logit_scale"] = torch.tensor(4.6)
    if classes:
        state["classifier.weight"] = torch.randn(classes, 3)
    for key, value in replaced.items():
        state[key.replace("__", ".")] = value
    return state


def _convert(state: dict, model: nn.Module) -> ConvertedWeights:
    fail = partial(refusal, _Error, "CLIP-ish", "tiny.pth", "ViT-T")
    return map_state(state, model, RULES, lambda what: fail(what, "MODEL.BACKBONE.NAME tiny"),
                     ConvertedWeights(state={}, label="CLIP-ish"))


def test_a_rule_table_renames_by_the_first_pattern_that_matches_the_whole_key():
    assert RULES("image_encoder.0.weight") == Target("backbone.0.weight")
    assert RULES("classifier.weight") == Target("head.weight", head=True)
    assert RULES("image_encoder.k_proj.bias").key == "qkv.bias" and RULES("image_encoder.k_proj.bias").part == 1
    assert RULES("image_encoder.logit_scale").key == ""  # dropped, before the catch-all rule
    assert RULES("text_encoder.x") is None and RULES("xclassifier.weight") is None  # whole keys only


def test_map_state_places_every_tensor_assembles_pieces_and_adapts_layouts():
    state, model = _file(classes=5), _Tiny(classes=5)
    converted = _convert(state, model)
    ours = converted.state
    assert torch.equal(ours["backbone.0.weight"], state["image_encoder.0.weight"])
    qkv = [state[f"image_encoder.{n}_proj.weight"] for n in "qkv"]
    assert torch.equal(ours["qkv.weight"], torch.cat(qkv))
    assert torch.equal(ours["proj.weight"], state["image_encoder.proj"].t())
    assert torch.equal(ours["head.weight"], state["classifier.weight"])
    pairs = dict(converted.mapping)
    assert pairs["image_encoder.k_proj.weight"] == "qkv.weight[2:4]" and pairs["image_encoder.v_proj.bias"] == "qkv.bias[4:6]"
    assert pairs["classifier.weight"] == "head.weight" and "image_encoder.logit_scale" not in pairs
    assert converted.notes == ["logit_scale (CLIP's text-image temperature) not loaded"]
    model.load_state_dict(ours, strict=True)  # every tensor of the model, in its layout


def test_our_counters_the_file_lacks_are_kept_and_a_classifier_that_does_not_fit_is_dropped():
    state = _file(classes=5)
    del state["image_encoder.1.num_batches_tracked"]
    converted = _convert(state, _Tiny(classes=7))
    assert converted.state["backbone.1.num_batches_tracked"] == 0  # the model's own
    assert converted.head_dropped and "head.weight" not in converted.state
    assert any("7 classes" in n and "5" in n for n in converted.notes)


@pytest.mark.parametrize("replaced, fragment", [
    ({"image_encoder__1__weight": torch.ones(7)},
     "image_encoder.1.weight has shape (7,) in the checkpoint but backbone.1.weight has (6,) in this model"),
    ({"image_encoder__k_proj__weight": torch.ones(3, 2)},
     "image_encoder.k_proj.weight has shape (3, 2) in the checkpoint but qkv.weight[2:4] has (2, 2) in this model"),
    ({"image_encoder__extra": torch.ones(1)}, "image_encoder.extra has no counterpart in this model (no backbone.extra)"),
    ({"text_encoder__x": torch.ones(1)}, "text_encoder.x has no counterpart in this model"),
    ({"image_encoder__0__bias": [0.0] * 6}, "image_encoder.0.bias is not a tensor"),
])
def test_the_first_key_that_does_not_fit_is_one_line_with_what_the_file_needs(replaced, fragment):
    with pytest.raises(_Error) as info:
        _convert(_file(**replaced), _Tiny())
    message = str(info.value)
    assert message == (f"CLIP-ish checkpoint tiny.pth (ViT-T) does not fit this model: {fragment}. "
                       "It needs MODEL.BACKBONE.NAME tiny.")


def test_missing_pieces_and_unfilled_tensors_of_ours_are_named():
    state = _file()
    del state["image_encoder.k_proj.bias"]
    with pytest.raises(_Error, match=r"qkv\.bias needs all 3 projections but k's is missing\."):
        _convert(state, _Tiny())
    state = _file()
    del state["image_encoder.0.bias"]
    with pytest.raises(_Error, match=r"this model's backbone\.0\.bias has no counterpart in the checkpoint\."):
        _convert(state, _Tiny())


def test_misfit_is_one_clause_with_the_key_both_shapes_or_what_is_missing():
    own = {"neck.weight": torch.zeros(8), "w": torch.zeros(2, 3), "neck.num_batches_tracked": torch.tensor(0)}
    assert misfit("w", torch.ones(2, 3), "w", own) == ""
    assert misfit("w", torch.ones(3, 2), "w", own, file="the file", model="the model") == \
        "w has shape (3, 2) in the file but (2, 3) in the model"
    assert misfit("base.w", torch.ones(3), "w", own) == \
        "base.w has shape (3,) in the checkpoint but w has (2, 3) in this model"
    assert misfit("x", torch.ones(1), "x", own, model="the model") == "x has no counterpart in the model"
    assert misfit("b.x", torch.ones(1), "x", own) == "b.x has no counterpart in this model (no x)"
    assert misfit("b.x", torch.ones(1), None, own, model="this toolkit's MGN") == "b.x has no counterpart in this toolkit's MGN"
    assert misfit("b2.w", torch.ones(4), "neck.weight", own, part=(1, 2)) == ""
    assert misfit("b2.w", torch.ones(3), "neck.weight", own, part=(1, 2)) == \
        "b2.w has shape (3,) in the checkpoint but neck.weight[4:8] has (4,) in this model"
    assert misfit("b2.n", torch.tensor(5), "neck.num_batches_tracked", own, part=(1, 2)) == ""  # 0-d: whole
    assert part_of("neck.weight", own["neck.weight"], (0, 4)) == ("neck.weight[0:2]", (2,))


def test_pretrained_files_use_the_same_check():
    own = {"a": torch.zeros(2), "b": torch.zeros(3)}
    assert fit_problem({"a": torch.zeros(2), "b": torch.zeros(3)}, own) == ""
    assert fit_problem({"a": torch.zeros(4), "b": torch.zeros(3)}, own) == \
        "a has shape (4,) in the file but (2,) in the model"
    assert fit_problem({"a": torch.zeros(2)}, own) == "b is missing from the file"
    assert fit_problem({"a": torch.zeros(2)}, own, optional=("b",)) == ""
    assert fit_problem({**own, "c": torch.zeros(1)}, own) == "c has no counterpart in the model"
