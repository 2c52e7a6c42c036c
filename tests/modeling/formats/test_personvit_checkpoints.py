"""PersonViT checkpoints in the tools: the features of PersonViT's own model code, one-line errors.

The reference features in tests/fixtures/personvit_reference.npz were computed by PersonViT's own
code (its ``make_model`` and ``load_param``, torchvision's test transform on PNG files) by
``benchmarks/compare_personvit.py --fixture``; the fixture holds each variant's state-dict layout
and the features, no weights: the checkpoints and the crops are rebuilt here from the seeds of
``benchmarks/compare_transreid.py``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests._tools import load_benchmark, load_fixture, load_tool

TOL = 1e-4  # the criterion: max abs difference of the (L2-normalised) features, fp32


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _bench():
    return load_benchmark("compare_personvit")


def _lineage():
    return load_benchmark("compare_transreid")


def _reference():
    return load_fixture("personvit_reference")


def _size():
    return tuple(int(v) for v in _reference()["size"])


def _checkpoint(tmp_path, name, extra=None):
    """PersonViT's seeded state dict of `name` (plus `extra` tensors), saved bare as its training saves it."""
    layout = load_benchmark("compare_fastreid").layout_from(_reference(), name)
    state = _lineage().synthesize_state(layout)
    state.update(extra or {})
    path = tmp_path / f"{name}.pth"
    torch.save(state, path)
    return path


def _normed(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _extract_error(tmp_path, capsys, weights, *opts):
    """The error lines of tools/extract.py with the ViT-S PersonViT config, `weights` and `opts`."""
    h, w = _size()
    argv = ["--config-file", _bench().CONFIG, "--weights", str(weights), "--input", str(tmp_path), "--output",
            str(tmp_path / "x.npz"), "--device", "cpu", "MODEL.BACKBONE.PRETRAINED", "False",
            "INPUT.SIZE_TRAIN", f"[{h},{w}]", "INPUT.SIZE_TEST", f"[{h},{w}]", *opts]
    assert load_tool("extract").main(argv) == 1
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]


def test_fixture_covers_every_variant_with_personvits_shapes():
    ref = _reference()
    assert {k.split("/")[0] for k in ref if "/" in k} == set(_bench().ARCHS)
    layout = dict(load_benchmark("compare_fastreid").layout_from(ref, "vit_small"))
    # PersonViT's ViT-S is DeiT-S's shape (384 wide, 12 blocks, qkv bias), which vit_small_transreid has.
    assert layout["base.cls_token"] == (1, 1, 384) and layout["base.blocks.11.attn.qkv.bias"] == (1152,)
    assert ref["vit_small/features"].shape == (4, 384) and ref["vit_small_sie_jpm/features"].shape == (4, 5 * 384)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_small", "vit_base", "vit_small_sie_jpm"])
def test_personvit_files_give_personvit_features_through_weights_and_extract(tmp_path, name):
    family = _bench().PERSONVIT
    weights = _checkpoint(tmp_path, name)
    _, sizes, ext = _lineage().SMALL
    paths = load_benchmark("compare_torchreid").write_crops(str(tmp_path / "images"), sizes, ext)
    listing = _lineage().write_list(str(tmp_path), paths)
    camids = [_lineage().camera_of(i) for i in range(len(paths))]
    theirs = _reference()[f"{name}/features"]
    ours = _lineage().our_features(name, str(weights), _size(), paths, camids, family)
    assert np.abs(ours - theirs).max() <= TOL * max(1.0, float(np.abs(theirs).max()))
    extracted = _lineage().extract_features(name, str(weights), _size(), listing, str(tmp_path / "f.npz"), family)
    assert np.abs(extracted - _normed(theirs)).max() <= TOL
    if family.archs[name]["theirs"].get("SIE_CAMERA"):  # the comparison can fail: other cameras, other features
        wrong = _lineage().our_features(name, str(weights), _size(), paths, [0] * len(paths), family)
        assert np.abs(_normed(wrong) - _normed(theirs)).max() > 100 * TOL


@pytest.mark.slow
def test_a_file_that_does_not_fit_the_personvit_config_is_one_line(tmp_path, capsys):
    weights = _checkpoint(tmp_path, "vit_base")
    err = _extract_error(tmp_path, capsys, weights)  # a ViT-B file, the ViT-S config
    assert len(err) == 1 and "TransReID checkpoint" in err[0] and "(1, 1, 768)" in err[0]
    assert "MODEL.BACKBONE.NAME vit_base_transreid" in err[0] and "vit_base_personvit.yml" in err[0]
    # A 128x64 patch grid (33 positions) in a model built for 256x128 (129): names the sizes it needs.
    weights = _checkpoint(tmp_path, "vit_small")
    err = _extract_error(tmp_path, capsys, weights, "INPUT.SIZE_TRAIN", "[256,128]", "INPUT.SIZE_TEST", "[256,128]")
    assert len(err) == 1 and "base.pos_embed has shape (1, 33, 384)" in err[0]
    assert "INPUT.SIZE_TEST [128,64]" in err[0]
    # PersonViT's "ics" models (a convolutional stem before the patch projection) have no counterpart here.
    stem = {"base.patch_embed.conv.0.weight": torch.zeros(64, 3, 7, 7)}
    err = _extract_error(tmp_path, capsys, _checkpoint(tmp_path, "vit_small", stem))
    assert len(err) == 1 and "base.patch_embed.conv.0.weight has no counterpart" in err[0]
