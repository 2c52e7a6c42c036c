"""The catalogue of published weights: well-formed entries, and for every entry a file in its publisher's layout
that loads into the model its config builds.

The files cannot be downloaded here, so each entry's file is made from the model: the model's tensors renamed
into the publisher's key names and shapes (the inverse of reid/modeling/formats/*), with random values, the
identity classifier the publisher saves (its training identities; the catalogue's configs have no head, so the
loader drops it with a note) and the tensors the loader leaves out on purpose (fast-reid's pixel statistics,
TransReID's unused ImageNet classifier, CLIP-ReID's text side). It is saved as the publisher saves it and loaded
through the path of ``--weights FILE`` (reid.inference.loading), and every tensor the model holds afterwards must
be the file's.
"""
from __future__ import annotations

import os
import re
from typing import Callable, Dict, Set, Tuple

import pytest
import torch

from reid.config import load_config
from reid.engine.checkpoint_files import load_checkpoint, model_state, read_checkpoint
from reid.hub.catalogue import ENTRIES, FAMILIES, UnknownModelError, by_name, entry, publishers, suggest
from reid.inference.loading import check_model_fits_weights, inference_opts
from reid.modeling import build_model
from reid.modeling.formats import FORMAT_REGISTRY, convert_foreign_state
from reid.modeling.formats.fastreid import MGN_FEATURES

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
State = Dict[str, torch.Tensor]


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


# --------------------------------------------------------------------------- the entries themselves
def test_names_are_unique_lowercase_and_name_their_publisher():
    names = [e.name for e in ENTRIES]
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9]+/[a-z0-9_]+", n) for n in names), [n for n in names if "/" not in n]
    assert set(publishers()) == {"torchreid", "fastreid", "transreid", "clipreid"}
    assert len({e.filename for e in ENTRIES}) == len(ENTRIES)  # one cache file per entry


def test_sources_families_formats_and_configs_are_known():
    formats = set(FORMAT_REGISTRY.names())
    for e in ENTRIES:
        assert e.urls and all(u.split("://", 1)[0] in ("https", "gdrive", "hf") for u in e.urls), e.name
        assert all(re.fullmatch(r"gdrive://[A-Za-z0-9_-]{25,}", u) for u in e.urls if u.startswith("gdrive://"))
        assert e.family in FAMILIES and e.format in formats, e.name
        assert os.path.isfile(os.path.join(ROOT, e.config)), (e.name, e.config)
        assert e.filename.endswith(".pth") and e.dataset and e.source.startswith("https://"), e.name
        assert all(0 < v <= 100 for v in e.reported.values()), e.name
        assert (e.sha256 is None or re.fullmatch(r"[0-9a-f]{64}", e.sha256)) and (e.size is None or e.size > 0)


def test_the_two_known_hashes_are_torchreids_x0_25_files():
    msmt, market = entry("torchreid/osnet_x0_25_msmt17"), entry("torchreid/osnet_x0_25_market1501")
    assert msmt.sha256 == "6f57607fed9f502b9efed546108132ee715df5a5b6e6932c6269bacb47f59f99" and msmt.size == 3057863
    assert market.sha256 == "c0ff09177a21417a19bc73bbf5af4eb5d2b097c2074ed35e67819ee6cd93612c"
    assert market.size == 2462783 and msmt.urls == ("gdrive://1sSwXSUlj4_tHZequ_iZ8w_Jh0VaRQMqF",)
    assert msmt.reported == {"R-1": 61.4, "mAP": 29.5} and msmt.config == "configs/MSMT17/osnet_x0_25_torchreid.yml"
    assert sum(e.sha256 is not None for e in ENTRIES) == 2


def test_docs_list_every_name():
    with open(os.path.join(ROOT, "docs", "model_zoo.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Published weights by name"):]
    assert [e.name for e in ENTRIES if f"`{e.name}`" not in section] == []


def test_a_misspelt_name_gets_the_right_suggestion():
    assert suggest("torchreid/osnet_x0_25_msmt")[0] == "torchreid/osnet_x0_25_msmt17"
    assert suggest("osnet_x0_25_msmt17")[0] == "torchreid/osnet_x0_25_msmt17"  # the publisher left out
    assert suggest("fastreid/market_bot_r5")[0] == "fastreid/market_bot_r50"
    assert suggest("transreid/vit_transreid_market")[0] == "transreid/vit_transreid_market1501"


def test_an_unknown_name_is_one_line_with_the_nearest_names():
    with pytest.raises(UnknownModelError) as e:
        entry("torchreid/osnet_x0_25_msmt")
    assert "\n" not in str(e.value) and "Did you mean torchreid/osnet_x0_25_msmt17" in str(e.value)
    with pytest.raises(UnknownModelError) as e:
        entry("nobody/nothing")
    assert "\n" not in str(e.value) and "Did you mean" not in str(e.value)
    assert by_name()["fastreid/market_bot_r50"].filename == "market_bot_R50.pth"


# --------------------------------------------------------------------------- files in each publisher's layout
#: Training identities of each dataset (the rows of the classifier the publisher saves); the multi-source
#: files' counts are not published: any count is dropped alike.
CLASSES = {"Market-1501": 751, "DukeMTMC-reID": 702, "MSMT17": 1041, "MSMT17 (train + test identities)": 4101,
           "Occluded-Duke": 702, "VeRi-776": 576, "VehicleID": 13164, "VERI-Wild": 30671}
FASTREID_PIXELS = {"pixel_mean": [123.675, 116.28, 103.53], "pixel_std": [58.395, 57.12, 57.375]}


def _classifier(rows: int, width: int) -> torch.Tensor:
    """A classifier of `rows` x `width` that costs no memory (the loader only reads its shape)."""
    return torch.full((1, 1), 0.01).expand(rows, width)


def _torchreid_file(ours: State, e, cfg) -> Tuple[object, State, Set[str]]:
    """torchreid: backbone at the top level, fc.*, classifier.*; saved bare with DDP's prefix, legacy format."""
    state = {}
    for key, value in ours.items():
        state[re.sub(r"^(backbone\.|embedding\.)", lambda m: "" if m[1] == "backbone." else "fc.", key)] = value
    width = int(cfg.MODEL.HEADS.FC_DIM)
    rows = CLASSES.get(e.dataset, 1000)
    head = {"classifier.weight": _classifier(rows, width), "classifier.bias": torch.zeros(rows)}
    state.update(head)
    return {f"module.{k}": v for k, v in state.items()}, state, set(head)


def _fastreid_file(ours: State, e, cfg) -> Tuple[object, State, Set[str]]:
    """fast-reid: {"model": state}; v0.x names (2020) for people, the 2021 names for vehicles."""
    state: State = {}
    vehicle = e.family == "vehicle"
    if cfg.MODEL.META_ARCHITECTURE == "mgn":
        branches = {"branch_global": "b1", "branch_part2": "b2", "branch_part3": "b3"}
        for key, value in ours.items():
            m = re.match(r"(branch_\w+)\.0\.(\d+)\.(.+)", key)
            if key.startswith("trunk."):
                state["backbone." + key[len("trunk."):]] = value
            elif m:  # fast-reid numbers its copy of layer3[1:] from 0
                state[f"{branches[m[1]]}.0.{int(m[2]) - 1}.{m[3]}"] = value
            elif re.match(r"branch_\w+\.1\.", key):
                branch, rest = key.split(".", 1)
                state[f"{branches[branch]}.{rest}"] = value
            elif (m := re.match(r"pools\.(\d)\.p", key)):
                state[f"{MGN_FEATURES[int(m[1])]}_pool.0.p"] = value.reshape(1)
            elif (m := re.match(r"reductions\.(\d)\.([01])\.(.+)", key)):
                state[f"{MGN_FEATURES[int(m[1])]}_pool.{int(m[2]) + 1}.{m[3]}"] = value
            elif key.startswith("neck."):  # our one neck is the 8 features' BNNecks side by side
                name = key[len("neck."):]
                for i, f in enumerate(MGN_FEATURES):
                    piece = value if value.dim() == 0 else value[256 * i: 256 * (i + 1)]
                    state[f"{f}_head.bnneck.{name}"] = piece.clone()
            else:
                raise AssertionError(f"no fast-reid name for {key}")
        head = {f"{f}_head.classifier.weight": _classifier(CLASSES[e.dataset], 256) for f in MGN_FEATURES}
    else:
        parts = {"out_conv": "W.0", "out_bn": "W.1"}
        neck = "heads.bottleneck.0." if vehicle else "heads.bnneck."
        for key, value in ours.items():
            m = re.match(r"backbone\.non_local\.(\d)\.(\d+)\.(\w+)\.(.+)", key)
            if m:
                state[f"backbone.NL_{int(m[1]) + 1}.{m[2]}.{parts.get(m[3], m[3])}.{m[4]}"] = value
            elif key.startswith("backbone."):
                state[key] = value
            elif key == "pool.p":
                if cfg.MODEL.HEADS.POOLING == "gem":  # a learned p; fast-reid's fixed-p pooling stores none
                    state["heads.pool_layer.p"] = value.reshape(1)
            elif key.startswith("neck."):
                state[neck + key[len("neck."):]] = value
            else:
                raise AssertionError(f"no fast-reid name for {key}")
        head = {"heads.classifier.weight": _classifier(CLASSES[e.dataset], 2048)}
    pixels = {k: torch.tensor(v).view(1, 3, 1, 1) for k, v in FASTREID_PIXELS.items()}
    state.update(head)
    state.update(pixels)
    return {"model": state}, state, set(head) | set(pixels)


def _transreid_file(ours: State, e, cfg) -> Tuple[object, State, Set[str]]:
    """TransReID: base.*, bottleneck(_i).*, b1/b2 (JPM), classifier(_i).weight, base.fc.*; saved bare."""
    rules = ((r"backbone\.(.+)", r"base.\1"), (r"local_necks\.(\d+)\.(.+)", None), (r"neck\.(.+)", r"bottleneck.\1"),
             (r"(b[12]\..+)", r"\1"))
    state: State = {}
    for key, value in ours.items():
        for pattern, replacement in rules:
            m = re.fullmatch(pattern, key)
            if m:
                name = f"bottleneck_{int(m[1]) + 1}.{m[2]}" if replacement is None else m.expand(replacement)
                state[name] = value
                break
        else:
            raise AssertionError(f"no TransReID name for {key}")
    width = int(ours["backbone.cls_token"].shape[-1])
    rows = CLASSES[e.dataset]
    parts = int(cfg.MODEL.TRANSREID.JPM_PARTS) if cfg.MODEL.META_ARCHITECTURE == "transreid" else 0
    extra = {"classifier.weight": _classifier(rows, width)}
    extra.update({f"classifier_{i}.weight": _classifier(rows, width) for i in range(1, parts + 1)})
    extra.update({"base.fc.weight": _classifier(1000, width), "base.fc.bias": torch.zeros(1000)})
    state.update(extra)
    return state, state, set(extra)


def _clipreid_file(ours: State, e, cfg) -> Tuple[object, State, Set[str]]:
    """CLIP-ReID: image_encoder.*, cv_embed, bottleneck(_proj).*, classifier(_proj).weight; two-stage files also
    hold the text side (a few of its tensors here: prompt_learner.*, text_encoder.*); saved bare."""
    rules = ((r"backbone\.sie_embed", "cv_embed"), (r"backbone\.(.+)", r"image_encoder.\1"),
             (r"neck_proj\.(.+)", r"bottleneck_proj.\1"), (r"neck\.(.+)", r"bottleneck.\1"))
    state: State = {}
    for key, value in ours.items():
        for pattern, replacement in rules:
            m = re.fullmatch(pattern, key)
            if m:
                state[m.expand(replacement)] = value
                break
        else:
            raise AssertionError(f"no CLIP-ReID name for {key}")
    rows = CLASSES[e.dataset]
    extra = {"classifier.weight": _classifier(rows, int(ours["neck.weight"].shape[0])),
             "classifier_proj.weight": _classifier(rows, int(ours["neck_proj.weight"].shape[0]))}
    if "clipreid" in e.name.split("/")[1]:  # the two-stage models
        extra.update({"prompt_learner.cls_ctx": _classifier(rows * 4, 512).reshape(rows, 4, 512),
                      "prompt_learner.token_prefix": torch.zeros(1, 5, 512),
                      "text_encoder.positional_embedding": torch.zeros(77, 512),
                      "text_encoder.ln_final.weight": torch.ones(512)})
    state.update(extra)
    return state, state, set(extra)


LAYOUTS: Dict[str, Callable] = {"torchreid": _torchreid_file, "fastreid": _fastreid_file,
                                "transreid": _transreid_file, "clipreid": _clipreid_file}


def _random_like(state: State, seed: int = 0) -> State:
    """Values unlike the model's initialisation, valid where the loader checks them (variances, GeM's p)."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for key, value in state.items():
        if not value.is_floating_point():
            out[key] = value.clone() + 3
        elif key.endswith("running_var"):
            out[key] = torch.rand(value.shape, generator=gen) + 0.5
        elif key.endswith(".p"):
            out[key] = torch.full_like(value, 3.25)
        else:
            out[key] = torch.randn(value.shape, generator=gen) * 0.02
    return out


def _is_heavy(e) -> bool:
    return e.format != "torchreid"  # ResNet50/101(-IBN), MGN, ViT-B and CLIP builds: seconds each on 2 cores


@pytest.mark.parametrize("name", [pytest.param(e.name, marks=pytest.mark.slow) if _is_heavy(e) else e.name
                                  for e in ENTRIES])
def test_the_config_builds_and_a_file_in_the_entrys_layout_loads_with_every_tensor_used(name, tmp_path):
    e = entry(name)
    if e.format == "clipreid":
        pytest.importorskip("open_clip", reason="CLIP-ReID models need open_clip (pip install 'circle-reid[clip]')")
    cfg = load_config(os.path.join(ROOT, e.config), inference_opts() + ["MODEL.DEVICE", "cpu"])
    model = build_model(cfg)
    ours = _random_like(model.state_dict())
    saved, theirs, left_out = LAYOUTS[e.format](ours, e, cfg)
    path = str(tmp_path / e.filename)
    if e.format == "torchreid":
        torch.save(saved, path, _use_new_zipfile_serialization=False)  # torchreid's model-zoo files are legacy
    else:
        torch.save(saved, path)
    del saved, ours
    # The path of --weights FILE (reid.inference.loading.build_inference_model) on the model already built.
    data = read_checkpoint(path)
    check_model_fits_weights(cfg, data, path)
    load_checkpoint(path, model=model, data=data)
    converted = convert_foreign_state(model, model_state(data, path), path, log=False)
    assert converted is not None and FORMAT_REGISTRY.get(e.format).label == converted.label
    used = {theirs_key for theirs_key, _ in converted.mapping}
    assert set(theirs) - used == left_out  # nothing else is left unused ...
    assert not used & left_out
    assert any("classifier" in n for n in converted.notes)  # ... and the dropped classifier is noted
    loaded = model.state_dict()
    for theirs_key, ours_key in converted.mapping:  # every tensor the model holds is the file's
        piece = re.fullmatch(r"(.+)\[(\d+):(\d+)\]", ours_key)
        value = loaded[piece[1]][int(piece[2]):int(piece[3])] if piece else loaded[ours_key]
        if value.dim() == 0 and piece:
            value = loaded[piece[1]]
        assert torch.equal(value.reshape(-1), theirs[theirs_key].reshape(-1)), (theirs_key, ours_key)
    kept = set(loaded) - {k.split("[")[0] for _, k in converted.mapping}  # the model's own values, by design:
    fixed_p = {"pool.p"} if cfg.MODEL.HEADS.POOLING == "gem_fixed" else set()  # fast-reid's fixed-p GeM stores none
    assert {k for k in kept if not k.endswith("num_batches_tracked")} <= fixed_p, sorted(kept)[:5]
