"""The identity of a model's weights: the same for the same weights whatever file they came from,
different for any other weights; what an exported file records of it."""
import hashlib
import json
import shutil

import numpy as np
import pytest
import torch

import tests._fastreid as fr
from reid.config import get_cfg
from reid.engine.checkpoint_files import save_checkpoint
from reid.export.identity import (
    file_hash,
    recorded_identity,
    state_hash,
    weights_hash,
    weights_identity,
)
from reid.inference.loading import build_inference_model
from reid.modeling import build_model


def _cfg():
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.NUM_CLASSES = 0
    cfg.MODEL.DEVICE = "cpu"
    return cfg


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(_cfg()).eval()


def reference_hash(state):
    """The documented definition, written out with numpy's bytes (not the module's tensor views)."""
    digest = hashlib.sha256()
    for key in sorted(k for k in state if not k.endswith("num_batches_tracked")):
        t = state[key]
        digest.update(f"{key}\0{t.dtype}\0{list(t.shape)}\0".encode())
        digest.update(t.detach().cpu().numpy().tobytes())
    return "sha256:" + digest.hexdigest()


def test_the_hash_follows_its_definition_and_not_the_order_of_the_keys(model):
    state = model.state_dict()
    assert weights_hash(model) == reference_hash(state)
    assert state_hash(dict(reversed(list(state.items())))) == weights_hash(model)
    # BatchNorm's step counter changes no feature: left out.
    counted = {k: (v + 5 if k.endswith("num_batches_tracked") else v) for k, v in state.items()}
    assert state_hash(counted) == weights_hash(model)


def test_any_change_of_a_weight_changes_the_hash(model):
    state = model.state_dict()
    key = "backbone.conv1.weight"
    nudged = dict(state)
    nudged[key] = state[key].clone()
    nudged[key].view(-1)[7] = torch.nextafter(nudged[key].view(-1)[7], torch.tensor(1.0))  # one ulp
    assert state_hash(nudged) != weights_hash(model)
    renamed = {("x" + k if k == key else k): v for k, v in state.items()}
    assert state_hash(renamed) != weights_hash(model)
    retyped = {k: (v.double() if k == key else v) for k, v in state.items()}
    assert state_hash(retyped) != weights_hash(model)


@pytest.mark.slow
def test_the_same_weights_give_the_same_hash_from_any_file(model, tmp_path):
    path = str(tmp_path / "model_final.pth")
    save_checkpoint(path, model=model.state_dict(), cfg=_cfg().dump())
    shutil.copy(path, tmp_path / "renamed.pth")
    for source in (path, str(tmp_path / "renamed.pth")):
        assert weights_hash(build_inference_model(_cfg(), source)) == weights_hash(model)
    assert weights_identity(model, path) == {"weights_sha256": weights_hash(model), "weights_file": "model_final.pth"}
    assert file_hash(path) == "sha256:" + hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.mark.slow
def test_a_fastreid_file_and_its_conversion_have_one_identity(tmp_path):
    from reid.cli import convert_weights
    from reid.inference import load_predictor

    src = fr.write_checkpoint(str(tmp_path / "fastreid.pth"), "bot_R50")
    out = str(tmp_path / "ours.pth")
    assert convert_weights.main([src, out, "--config-file", fr.config("bot_R50"), *map(str, fr.opts("bot_R50"))]) == 0
    direct = load_predictor(config_file=fr.config("bot_R50"), weights=src, opts=fr.opts("bot_R50"), device="cpu")
    converted = load_predictor(weights=out, device="cpu")
    assert direct.weights_sha256 == converted.weights_sha256 == weights_hash(converted.model)


@pytest.mark.parametrize("text, expected", [
    (None, None),
    ("not json", None),
    (json.dumps({"input": "images"}), None),  # a file exported before identities were written
    (json.dumps({"weights_sha256": "sha256:" + "a" * 64, "weights_file": "run/model.pth"}),
     {"weights_sha256": "sha256:" + "a" * 64, "weights_file": "model.pth"}),
])
def test_what_an_exported_file_records(text, expected):
    assert recorded_identity(text) == expected


@pytest.mark.parametrize("value", ["abc", "sha256:" + "g" * 64, 12, None, True])
def test_a_damaged_recorded_identity_is_refused(value):
    with pytest.raises(ValueError, match="recorded weights identity is damaged"):
        recorded_identity(json.dumps({"weights_sha256": value}))


def test_hashing_reads_every_dtype(model):
    state = {"a": torch.ones(3, dtype=torch.bfloat16), "b": torch.zeros((), dtype=torch.int64),
             "c": torch.empty(0, 4), "d": torch.arange(6.0).reshape(2, 3).t()}  # a non-contiguous view
    digest = state_hash(state)
    assert digest.startswith("sha256:") and len(digest) == 7 + 64
    assert state_hash({**state, "d": state["d"].contiguous()}) == digest
    assert state_hash({**state, "a": torch.ones(3, dtype=torch.float16)}) != digest
    assert np.all(state["d"].numpy() == state["d"].contiguous().numpy())
