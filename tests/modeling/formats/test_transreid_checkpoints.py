"""TransReID checkpoints in the tools: the features of TransReID's own model code, one-line errors.

The reference features in tests/fixtures/transreid_reference.npz were computed by TransReID's own
code (its ``make_model`` and ``load_param``, torchvision's test transform on PNG files, camera
ids passed as ``cam_label``) by ``benchmarks/compare_transreid.py --fixture``; the fixture holds
each variant's state-dict layout and the features, no weights: the checkpoints and the crops are
rebuilt here from the script's seeds.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from reid.config import load_config
from reid.engine.checkpoint_files import load_checkpoint
from reid.modeling import build_model
from tests._tools import load_benchmark, load_fixture, load_tool

TOL = 1e-4  # the criterion: max abs difference of the (L2-normalised) features, fp32


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _bench():
    return load_benchmark("compare_transreid")


def _reference():
    return load_fixture("transreid_reference")


def _size():
    return tuple(int(v) for v in _reference()["size"])


def _checkpoint(tmp_path, name):
    """TransReID's seeded state dict of `name`, saved bare as its training saves it."""
    layout = load_benchmark("compare_fastreid").layout_from(_reference(), name)
    path = tmp_path / f"{name}.pth"
    torch.save(_bench().synthesize_state(layout), path)
    return path


def _crops(tmp_path):
    _, sizes, ext = _bench().SMALL
    paths = load_benchmark("compare_torchreid").write_crops(str(tmp_path / "images"), sizes, ext)
    return paths, _bench().write_list(str(tmp_path), paths)


def _normed(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_fixture_covers_every_variant():
    assert {k.split("/")[0] for k in _reference() if "/" in k} == set(_bench().ARCHS)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_base", "vit_sie", "vit_jpm", "vit_transreid_stride", "deit_small"])
def test_transreid_files_give_transreid_features_through_weights_and_extract(tmp_path, name):
    weights = _checkpoint(tmp_path, name)
    paths, listing = _crops(tmp_path)
    camids = [_bench().camera_of(i) for i in range(len(paths))]
    theirs = _reference()[f"{name}/features"]
    ours = _bench().our_features(name, str(weights), _size(), paths, camids)
    assert np.abs(_normed(ours) - _normed(theirs)).max() <= TOL
    assert np.abs(ours - theirs).max() <= TOL * max(1.0, float(np.abs(theirs).max()))
    extracted = _bench().extract_features(name, str(weights), _size(), listing, str(tmp_path / "f.npz"))
    assert np.abs(extracted - _normed(theirs)).max() <= TOL
    if _bench().ARCHS[name]["theirs"].get("SIE_CAMERA"):  # the comparison can fail: other cameras, other features
        wrong = _bench().our_features(name, str(weights), _size(), paths, [0] * len(paths))
        assert np.abs(_normed(wrong) - _normed(theirs)).max() > 100 * TOL


@pytest.mark.slow
def test_classifiers_load_when_the_heads_fit_and_a_wrong_config_is_one_line(tmp_path, capsys):
    weights = _checkpoint(tmp_path, "vit_jpm")
    state = torch.load(weights, weights_only=True)
    h, w = _size()
    cfg = load_config(_bench().CONFIG, _bench().arch_opts("vit_jpm", (h, w)) + ["MODEL.HEADS.NUM_CLASSES", 16])
    model = build_model(cfg)
    load_checkpoint(str(weights), model=model)
    torch.testing.assert_close(model.head.weight, state["classifier.weight"])
    torch.testing.assert_close(model.local_heads[2].weight, state["classifier_3.weight"])
    torch.testing.assert_close(model.local_necks[3].running_var, state["bottleneck_4.running_var"])
    # The full TransReID config (stride 12, SIE) for a stride-16 JPM file without SIE: one line.
    argv = ["--config-file", _bench().CONFIG, "--weights", str(weights), "--input", str(tmp_path), "--output",
            str(tmp_path / "x.npz"), "--device", "cpu", "INPUT.SIZE_TRAIN", f"[{h},{w}]", "INPUT.SIZE_TEST", f"[{h},{w}]"]
    assert load_tool("extract").main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "TransReID checkpoint" in err[0] and "base.pos_embed has shape (1, 33, 768)" in err[0]
    assert "MODEL.TRANSREID.STRIDE_SIZE [16,16]" in err[0] and "MODEL.TRANSREID.SIE_CAMERA False" in err[0]
