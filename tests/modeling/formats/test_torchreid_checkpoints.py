"""torchreid checkpoints in the tools: the features of torchreid's own model and extractor, one-line errors.

The reference features were computed by torchreid 0.2.5's code (its models and its
``FeatureExtractor`` on PNG files; tests/_torchreid.py); the checkpoints and the files are
rebuilt here from the same seeds in torchreid's file format.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from reid.config import load_config
from reid.data.image_io import read_image
from reid.data.transforms import build_transforms
from reid.engine.checkpoint_files import load_checkpoint
from reid.modeling import build_model
from tests import _torchreid as tr
from tests._tools import TINY_DATA, load_tool

TOL = 1e-5  # the criterion: max abs difference of the features


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _model(name, num_classes=0, extra=()):
    cfg = load_config(tr.config(name), tr.opts(name) + ["MODEL.HEADS.NUM_CLASSES", num_classes] + list(extra))
    return build_model(cfg), cfg


def _error_line(stderr):
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _extract(name, weights, folder, out, extra=()):
    h, w = tr.size()
    argv = ["--config-file", tr.config(name), "--weights", str(weights), "--input", str(folder), "--output", str(out),
            "--device", "cpu", "--quiet", "--num-workers", "0", *map(str, tr.bench().ARCHS[name]["opts"]),
            "INPUT.SIZE_TEST", f"[{h},{w}]", *extra]
    assert load_tool("extract").main(argv) == 0
    with np.load(out) as data:
        return data["feats"]


def _normalised(name):
    theirs = tr.features(name)
    return theirs / np.linalg.norm(theirs, axis=1, keepdims=True)


def test_fixture_covers_the_required_architectures():
    assert set(tr.bench().REQUIRED) <= set(tr.arch_names())


# --------------------------------------------------------------------------- identical features
# The reference features were computed with the pinned versions (torch kernels, Pillow's resize):
# these comparisons run with those (`make test`); the minimum-versions run differs by ~1e-3.
@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n.startswith("resnet") else n
                                  for n in tr.arch_names()])
def test_model_weights_load_torchreid_checkpoints_with_torchreids_features(name, tmp_path):
    path = tr.write_checkpoint(tmp_path / "model.pth.tar-60", name)
    model, cfg = _model(name, num_classes=16)  # the file's classifier has 16 classes: it is loaded too
    load_checkpoint(path, model=model)
    transform = build_transforms(cfg, is_train=False)
    images = torch.stack([transform(read_image(p)) for p in tr.write_images(tmp_path / "images")])
    with torch.no_grad():
        ours = model.eval()(images).numpy()
    result = tr.compare(ours, tr.features(name))
    assert result["max_abs_diff"] <= TOL, result
    assert torch.equal(model.head.bias, tr.torchreid_state(name)["classifier.bias"])


@pytest.mark.slow
@pytest.mark.parametrize("name", tr.bench().REQUIRED)
def test_extract_tool_with_torchreid_weights_gives_torchreids_features(name, tmp_path):
    path = tr.write_checkpoint(tmp_path / "model.pth.tar-60", name)
    folder = tmp_path / "images"
    tr.write_images(folder)
    result = tr.compare(_extract(name, path, folder, tmp_path / "f.npz"), _normalised(name))
    assert result["max_abs_diff"] <= TOL, result


@pytest.mark.slow
def test_model_zoo_style_file_legacy_format_module_prefix_bare_state_dict(tmp_path):
    path = tmp_path / "osnet_x0_25_msmt17.pt"
    state = {f"module.{k}": v for k, v in tr.torchreid_state("osnet_x0_25").items()}
    torch.save(state, path, _use_new_zipfile_serialization=False)
    folder = tmp_path / "images"
    tr.write_images(folder)
    result = tr.compare(_extract("osnet_x0_25", path, folder, tmp_path / "f.npz"), _normalised("osnet_x0_25"))
    assert result["max_abs_diff"] <= TOL, result


def test_the_comparison_can_fail_opencvs_resize_is_caught(tmp_path):
    # Negative control: the same weights with OpenCV's resize instead of Pillow's (torchreid's).
    path = tr.write_checkpoint(tmp_path / "model.pth.tar-60", "osnet_ain_x1_0", legacy=True)
    folder = tmp_path / "images"
    tr.write_images(folder)
    feats = _extract("osnet_ain_x1_0", path, folder, tmp_path / "f.npz", ["INPUT.INTERPOLATION", "cv2"])
    assert tr.compare(feats, _normalised("osnet_ain_x1_0"))["max_abs_diff"] > 10 * TOL


# --------------------------------------------------------------------------- errors
def test_wrong_width_fails_in_one_line_naming_key_and_config(tmp_path, capsys):
    path = tr.write_checkpoint(tmp_path / "osnet_x1_0.pth", "osnet_x1_0")
    folder = tmp_path / "images"
    tr.write_images(folder)
    rc = load_tool("extract").main(["--config-file", tr.config("osnet_x0_25"), "--weights", path, "--input",
                                    str(folder), "--output", str(tmp_path / "f.npz"), "--device", "cpu", "--quiet"])
    assert rc == 1
    err = _error_line(capsys.readouterr().err)
    assert "torchreid checkpoint" in err and "conv1.conv.weight has shape (64, 3, 7, 7)" in err
    assert "configs/Market1501/osnet_x1_0_torchreid.yml" in err


def test_weights_alone_of_a_torchreid_file_ask_for_the_config(tmp_path, capsys):
    path = tr.write_checkpoint(tmp_path / "ain.pth", "osnet_ain_x1_0")
    folder = tmp_path / "images"
    tr.write_images(folder)
    rc = load_tool("extract").main(["--weights", path, "--input", str(folder), "--output", str(tmp_path / "f.npz")])
    assert rc == 1
    err = _error_line(capsys.readouterr().err)
    assert "torchreid checkpoint" in err and "--config-file configs/Market1501/osnet_ain_x1_0_torchreid.yml" in err


# --------------------------------------------------------------------------- converter and fine-tuning


@pytest.mark.slow
def test_converter_writes_our_format_and_gives_the_same_features(tmp_path, capsys):
    src = tr.write_checkpoint(tmp_path / "osnet_ibn.pth", "osnet_ibn_x1_0")
    dst = tmp_path / "osnet_ibn_converted.pth"
    h, w = tr.size()
    rc = load_tool("convert_weights").main([src, str(dst), "--config-file", tr.config("osnet_ibn_x1_0"),
                                            "INPUT.SIZE_TEST", f"[{h},{w}]"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "torchreid osnet_ibn_x1_0 checkpoint" in printed and "classifier loaded (16 classes)" in printed
    assert "fc.1.running_var" in printed and "-> embedding.1.running_var" in printed
    folder = tmp_path / "images"
    tr.write_images(folder)
    out = tmp_path / "f.npz"
    assert load_tool("extract").main(["--weights", str(dst), "--input", str(folder), "--output", str(out),
                                      "--device", "cpu", "--quiet", "--num-workers", "0"]) == 0
    with np.load(out) as feats:
        assert tr.compare(feats["feats"], _normalised("osnet_ibn_x1_0"))["max_abs_diff"] <= TOL


@pytest.mark.slow
@pytest.mark.parametrize("heads", [[], ["MODEL.HEADS.NAME", "circle", "MODEL.HEADS.BIAS", "False",
                                        "MODEL.HEADS.NECK", "bnneck"]], ids=["torchreid-layout", "circle-bnneck"])
def test_fine_tuning_from_a_torchreid_file_drops_the_classifier_and_says_so(heads, tmp_path):
    src = tr.write_checkpoint(tmp_path / "model.pth.tar-60", "osnet_x0_25")
    out = tmp_path / "run"
    rc = load_tool("train").main(["--config-file", tr.config("osnet_x0_25"), "MODEL.WEIGHTS", src,
                                  "OUTPUT_DIR", str(out), "DATASETS.ROOT", str(tmp_path / "data"),
                                  "SOLVER.MAX_EPOCH", "1", "SOLVER.IMS_PER_BATCH", "4", "SOLVER.FREEZE_ITERS", "0",
                                  "TEST.EVAL_PERIOD", "0", "SOLVER.CHECKPOINT_PERIOD", "1",
                                  "MODEL.BACKBONE.PRETRAINED", "False", *heads, *TINY_DATA])
    assert rc == 0 and (out / "model_final.pth").is_file()
    log = (out / "log.txt").read_text()
    assert "torchreid osnet_x0_25 checkpoint" in log and "identity classifier (16 classes) dropped" in log
    assert ("no BNNeck" in log) == bool(heads)


def test_a_dropped_classifier_note_reaches_the_log(tmp_path, caplog):
    path = tr.write_checkpoint(tmp_path / "m.pth", "osnet_x0_25")
    model, _ = _model("osnet_x0_25", num_classes=3)
    with caplog.at_level(logging.INFO, logger="reid.modeling.formats"):
        load_checkpoint(path, model=model)
    assert any("dropped" in r.getMessage() and "3 classes" in r.getMessage() for r in caplog.records)
