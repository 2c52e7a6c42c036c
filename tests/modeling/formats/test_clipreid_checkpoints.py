"""CLIP-ReID checkpoints in the tools: the features of CLIP-ReID's own model code, one-line errors.

The reference features in tests/fixtures/clipreid_reference.npz were computed by CLIP-ReID's own
code (its ``make_model`` of ``make_model_clipreid.py`` and of the baseline's ``make_model.py``,
``load_param``, torchvision's test transform on PNG files, camera ids as ``cam_label`` with SIE)
by ``benchmarks/compare_clipreid.py --fixture``; the fixture holds each variant's state-dict
layout and the features, no weights: the checkpoints and the crops are rebuilt here from the
script's seeds.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("open_clip", reason="CLIP-ReID models need open_clip (pip install 'circle-reid[clip]')")

from reid.config import load_config  # noqa: E402
from reid.engine.checkpoint_files import load_checkpoint  # noqa: E402
from reid.modeling import build_model  # noqa: E402
from reid.modeling.formats import detect_format  # noqa: E402
from reid.modeling.formats.base import vit_description  # noqa: E402
from reid.modeling.formats.clipreid import clipreid_architecture, suggest_config  # noqa: E402
from tests._tools import load_benchmark, load_fixture, load_tool  # noqa: E402

TOL = 1e-5  # the criterion: max abs difference of the features, fp32


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _bench():
    return load_benchmark("compare_clipreid")


def _lineage():
    return load_benchmark("compare_transreid")


def _reference():
    return load_fixture("clipreid_reference")


def _size():
    return tuple(int(v) for v in _reference()["size"])


def _layout(name):
    return load_benchmark("compare_fastreid").layout_from(_reference(), name)


def _checkpoint(tmp_path, name):
    """CLIP-ReID's seeded state dict of `name`, saved bare as its training saves it."""
    path = tmp_path / f"{name}.pth"
    torch.save(_bench().synthesize_state(_layout(name)), path)
    return path


def _crops(tmp_path):
    _, sizes, ext = _lineage().SMALL
    paths = load_benchmark("compare_torchreid").write_crops(str(tmp_path / "images"), sizes, ext)
    return paths, _lineage().write_list(str(tmp_path), paths)


def _normed(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_fixture_covers_every_variant():
    assert {k.split("/")[0] for k in _reference() if "/" in k} == set(_bench().ARCHS)


def test_the_file_says_which_model_it_needs():
    layouts = {name: dict(_layout(name)) for name in _bench().ARCHS}
    plain = {k: torch.empty(s) for k, s in layouts["vit_clipreid"].items()}
    sie = {k: torch.empty(s) for k, s in layouts["vit_clipreid_sie_olp"].items()}
    rn50 = {k: torch.empty(s) for k, s in layouts["rn50_clipreid"].items()}
    assert all(detect_format(s).label == "CLIP-ReID" for s in (plain, sie, rn50))
    h, w = _size()
    assert clipreid_architecture(plain) == {
        "MODEL.META_ARCHITECTURE": "clipreid", "MODEL.BACKBONE.NAME": "clip_vit_b16", "INPUT.SIZE_TRAIN": [h, w],
        "INPUT.SIZE_TEST": [h, w], "MODEL.CLIP.STRIDE_SIZE": [16, 16], "MODEL.CLIP.SIE_CAMERA": False,
        "MODEL.HEADS.NECK": "bnneck"}
    got = clipreid_architecture(sie)
    assert got["MODEL.CLIP.STRIDE_SIZE"] == [12, 12] and got["MODEL.CLIP.NUM_CAMERAS"] == 6
    assert got["MODEL.CLIP.SIE_COEF"] == 1.0
    assert vit_description(got) == ["clip_vit_b16", "stride 12", "SIE 6 cameras"]  # read from MODEL.CLIP
    assert clipreid_architecture(rn50)["MODEL.BACKBONE.NAME"] == "clip_rn50"
    assert "configs/Market1501/clip_rn50_baseline.yml" in suggest_config(rn50)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit_clipreid", "vit_clipreid_sie_olp", "rn50_clipreid", "vit_baseline"])
def test_clipreid_files_give_clipreid_features_through_weights_and_extract(tmp_path, name):
    weights = _checkpoint(tmp_path, name)
    paths, listing = _crops(tmp_path)
    camids = [_lineage().camera_of(i) for i in range(len(paths))]
    theirs = _reference()[f"{name}/features"]
    family = _bench().CLIPREID
    ours = _lineage().our_features(name, str(weights), _size(), paths, camids, family)
    assert np.abs(ours - theirs).max() <= TOL * max(1.0, float(np.abs(theirs).max()))
    assert np.abs(_normed(ours) - _normed(theirs)).max() <= TOL
    extracted = _lineage().extract_features(name, str(weights), _size(), listing, str(tmp_path / "f.npz"), family)
    assert np.abs(extracted - _normed(theirs)).max() <= TOL
    if _bench().ARCHS[name]["theirs"].get("SIE_CAMERA"):  # the comparison can fail: other cameras, other features
        wrong = _lineage().our_features(name, str(weights), _size(), paths, [0] * len(paths), family)
        assert np.abs(_normed(wrong) - _normed(theirs)).max() > 100 * TOL


@pytest.mark.slow
def test_classifiers_load_the_text_side_is_noted_and_a_wrong_config_is_one_line(tmp_path, capsys, caplog):
    weights = _checkpoint(tmp_path, "vit_clipreid_sie_olp")
    state = torch.load(weights, weights_only=True)
    h, w = _size()
    opts = _lineage().arch_opts("vit_clipreid_sie_olp", (h, w), _bench().CLIPREID) + ["MODEL.HEADS.NUM_CLASSES", 16]
    model = build_model(load_config(_bench().CONFIG, opts))
    with caplog.at_level("INFO"):
        load_checkpoint(str(weights), model=model)
    torch.testing.assert_close(model.head.weight, state["classifier.weight"])
    torch.testing.assert_close(model.proj_head.weight, state["classifier_proj.weight"])
    torch.testing.assert_close(model.backbone.sie_embed, state["cv_embed"])
    torch.testing.assert_close(model.neck_proj.running_var, state["bottleneck_proj.running_var"])
    assert "prompt_learner" in caplog.text and "not loaded" in caplog.text
    assert "cv_embed's 6 rows are read as one per camera id" in caplog.text  # SIE_VIEW files cannot be told apart
    # The shipped config (stride 16, no SIE) for the SIE + overlapping-patch file: one line.
    argv = ["--config-file", _bench().CONFIG, "--weights", str(weights), "--input", str(tmp_path), "--output",
            str(tmp_path / "x.npz"), "--device", "cpu", "INPUT.SIZE_TRAIN", f"[{h},{w}]", "INPUT.SIZE_TEST", f"[{h},{w}]"]
    assert load_tool("extract").main(argv) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and "CLIP-ReID checkpoint" in err[0], err
    assert "MODEL.CLIP.STRIDE_SIZE [12,12]" in err[0] and "MODEL.CLIP.SIE_CAMERA True" in err[0]
    assert "configs/Market1501/clip_vit_b16_sie_olp.yml" in err[0]
