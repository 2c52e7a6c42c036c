"""fast-reid checkpoints in the tools: the features of fast-reid's own model, one-line errors.

The reference features were computed by fast-reid 1.4.0's code (tests/_fastreid.py); the
checkpoints are rebuilt here from the same seed in fast-reid's file format.
"""
from __future__ import annotations

import json
import logging
import os

import cv2
import numpy as np
import pytest
import torch

from reid.config import load_config
from reid.engine.checkpoint_files import load_checkpoint
from reid.modeling import build_model
from tests import _fastreid as fr
from tests._tools import TINY_DATA, load_tool

MIN_COSINE = 0.9999


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _model(name, num_classes=0, extra=()):
    cfg = load_config(fr.config(name), fr.opts(name) + ["MODEL.HEADS.NUM_CLASSES", num_classes] + list(extra))
    return build_model(cfg)


def _assert_fastreid_features(ours, name, normalised=False):
    theirs = fr.features(name)
    if normalised:
        theirs = theirs / np.linalg.norm(theirs, axis=1, keepdims=True)
    result = fr.compare(ours, theirs)
    assert result["min_cosine"] >= MIN_COSINE, result
    # The image-to-image variation too (the raw cosine forgives a common offset; see compare()).
    assert result["min_centred_cosine"] >= 0.999, result
    return result


def _error_line(stderr):
    """The tool's ``error:`` line (one line by contract); other tests' stale log handlers may add noise."""
    lines = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, stderr
    return lines[0]


def _write_images(folder, name):
    os.makedirs(folder, exist_ok=True)
    for i, img in enumerate(fr.images(name).permute(0, 2, 3, 1).numpy()):
        cv2.imwrite(os.path.join(folder, f"{i:02d}.png"), img[:, :, ::-1])  # PNG: lossless, BGR on disk
    return str(folder)


# --------------------------------------------------------------------------- identical features
@pytest.mark.slow
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n.startswith("mgn") else n
                                  for n in fr.ARCH_NAMES])
def test_model_weights_load_fastreid_checkpoints_with_fastreids_features(name, tmp_path):
    path = fr.write_checkpoint(tmp_path / f"{name}.pth", name)
    model = _model(name, num_classes=16)  # the file's classifier has 16 classes: it is loaded too
    load_checkpoint(path, model=model)
    model.eval()
    with torch.no_grad():
        ours = model(fr.images(name)).numpy()
    _assert_fastreid_features(ours, name)
    state = fr.fastreid_state(name)
    if name.startswith("mgn"):
        assert torch.equal(model.heads[3].weight, state["b21_head.weight"])
    else:
        assert torch.equal(model.head.weight, state["heads.weight"])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bot_R50-ibn", "sbs_R50", pytest.param("mgn_R50-ibn", marks=pytest.mark.slow)])
def test_extract_tool_with_fastreid_weights_gives_fastreids_features(name, tmp_path):
    path = fr.write_checkpoint(tmp_path / "fastreid.pth", name)
    folder = _write_images(tmp_path / "images", name)
    out = tmp_path / "feats.npz"
    h, w = fr.size(name)
    argv = ["--config-file", fr.config(name), "--weights", path, "--input", folder, "--output", str(out),
            "--device", "cpu", "--quiet", "--num-workers", "0", *map(str, fr.bench().ARCHS[name]["opts"]),
            "INPUT.SIZE_TEST", f"[{h},{w}]"]
    assert load_tool("extract").main(argv) == 0
    with np.load(out) as data:
        _assert_fastreid_features(data["feats"], name, normalised=True)


def _v0_naming(state):
    """The same tensors under fast-reid v0.x names (the published model-zoo files)."""
    renamed = {}
    for key, value in state.items():
        key = key.replace("heads.bottleneck.0.", "heads.bnneck.").replace("heads.weight", "heads.classifier.weight")
        renamed[key] = value
    renamed["pixel_mean"] = torch.tensor([123.675, 116.28, 103.53]).view(1, 3, 1, 1)
    renamed["pixel_std"] = torch.tensor([58.395, 57.12, 57.375]).view(1, 3, 1, 1)
    return renamed


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bot_R50", "sbs_R50-ibn"])
def test_v0_naming_of_the_same_tensors_gives_the_same_features(name, tmp_path):
    path = fr.write_checkpoint(tmp_path / "v0.pth", name, edit=_v0_naming)
    model = _model(name, num_classes=16)
    load_checkpoint(path, model=model)
    model.eval()
    with torch.no_grad():
        _assert_fastreid_features(model(fr.images(name)).numpy(), name)


@pytest.mark.slow
def test_the_comparison_can_fail_a_wrong_stem_pool_is_caught(tmp_path):
    # Negative control: fast-reid's weights in a model with torchvision's stem pool.
    path = fr.write_checkpoint(tmp_path / "bot.pth", "bot_R50")
    model = _model("bot_R50", extra=["MODEL.BACKBONE.STEM_POOL", "pad"])
    load_checkpoint(path, model=model)
    model.eval()
    with torch.no_grad():
        result = fr.compare(model(fr.images("bot_R50")).numpy(), fr.features("bot_R50"))
    assert result["min_centred_cosine"] < 0.9


# --------------------------------------------------------------------------- errors and notes
@pytest.mark.slow
def test_ibn_weights_in_a_plain_resnet50_config_fail_in_one_line_naming_key_and_config(tmp_path, capsys):
    path = fr.write_checkpoint(tmp_path / "market_bot_R50-ibn.pth", "bot_R50-ibn")
    folder = _write_images(tmp_path / "images", "bot_R50-ibn")
    rc = load_tool("extract").main(["--config-file", fr.config("bot_R50"), "--weights", path, "--input", folder,
                                    "--output", str(tmp_path / "f.npz"), "--device", "cpu", "--quiet"])
    assert rc == 1
    err = _error_line(capsys.readouterr().err)
    assert "backbone.layer1.0.bn1.IN.weight" in err
    assert "MODEL.BACKBONE.NAME resnet50_ibn_a" in err and "configs/Market1501/bot_resnet50_ibn.yml" in err


@pytest.mark.slow
def test_sbs_weights_in_a_bot_config_name_the_non_local_key_and_the_sbs_config(tmp_path):
    path = fr.write_checkpoint(tmp_path / "sbs.pth", "sbs_R50")
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, model=_model("bot_R50"))
    msg = str(err.value)
    assert "backbone.NL_2.0." in msg and "MODEL.BACKBONE.NON_LOCAL [0,2,3,0]" in msg
    assert "configs/Market1501/sbs_resnet50.yml" in msg and "\n" not in msg


@pytest.mark.slow
def test_classifier_of_another_class_count_is_dropped_with_a_note(tmp_path, caplog):
    path = fr.write_checkpoint(tmp_path / "bot.pth", "bot_R50")
    model = _model("bot_R50", num_classes=5)
    before = model.head.weight.detach().clone()
    with caplog.at_level(logging.INFO, logger="reid.modeling.formats"):
        load_checkpoint(path, model=model)
    assert torch.equal(model.head.weight, before)  # the head keeps its initialisation
    notes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("note:")]
    assert any("dropped" in n and "5 classes" in n and "16" in n for n in notes), notes
    # ... and the rest of the model is fast-reid's.
    model.eval()
    with torch.no_grad():
        _assert_fastreid_features(model(fr.images("bot_R50")).numpy(), "bot_R50")


@pytest.mark.slow
def test_weights_alone_of_a_fastreid_file_ask_for_the_config(tmp_path, capsys):
    path = fr.write_checkpoint(tmp_path / "bot.pth", "bot_R50-ibn")
    folder = _write_images(tmp_path / "images", "bot_R50-ibn")
    rc = load_tool("extract").main(["--weights", path, "--input", folder, "--output", str(tmp_path / "f.npz")])
    assert rc == 1
    err = _error_line(capsys.readouterr().err)
    assert "fast-reid checkpoint" in err and "--config-file configs/Market1501/bot_resnet50_ibn.yml" in err


# --------------------------------------------------------------------------- converter and test.py


@pytest.mark.slow
def test_converter_writes_our_format_and_gives_the_same_features(tmp_path, capsys):
    src = fr.write_checkpoint(tmp_path / "market_sbs_R50-ibn.pth", "sbs_R50-ibn")
    dst = tmp_path / "sbs_converted.pth"
    h, w = fr.size("sbs_R50-ibn")
    rc = load_tool("convert_weights").main([src, str(dst), "--config-file", fr.config("sbs_R50-ibn"),
                                            "INPUT.SIZE_TEST", f"[{h},{w}]"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "backbone.NL_3.2.W.1.running_var" in printed and "backbone.non_local.2.2.out_bn.running_var" in printed
    assert "heads.pool_layer.p" in printed and "-> pool.p" in printed and "classifier loaded (16 classes)" in printed
    data = torch.load(dst, map_location="cpu", weights_only=True)
    assert set(data) >= {"model", "cfg", "converted_from"} and "head.weight" in data["model"]
    assert not any(k.startswith("heads.") for k in data["model"])  # our names only
    # --weights alone: the converted file stores its config.
    folder = _write_images(tmp_path / "images", "sbs_R50-ibn")
    out = tmp_path / "f.npz"
    assert load_tool("extract").main(["--weights", str(dst), "--input", folder, "--output", str(out),
                                      "--device", "cpu", "--quiet", "--num-workers", "0"]) == 0
    with np.load(out) as feats:
        _assert_fastreid_features(feats["feats"], "sbs_R50-ibn", normalised=True)


@pytest.mark.slow
def test_converter_refuses_our_own_checkpoints_and_a_wrong_config(tmp_path, capsys):
    ours = tmp_path / "ours.pth"
    torch.save({"model": _model("bot_R50").state_dict()}, ours)
    assert load_tool("convert_weights").main([str(ours), str(tmp_path / "o.pth"), "--config-file",
                                              fr.config("bot_R50")]) == 1
    assert "not a checkpoint of another toolkit" in _error_line(capsys.readouterr().err)
    src = fr.write_checkpoint(tmp_path / "mgn.pth", "mgn_R50-ibn")
    assert load_tool("convert_weights").main([src, str(tmp_path / "o.pth"), "--config-file",
                                              fr.config("bot_R50-ibn")]) == 1
    err = _error_line(capsys.readouterr().err)
    assert "MODEL.META_ARCHITECTURE mgn" in err
    assert "configs/Market1501/mgn_fastreid_resnet50_ibn.yml" in err
    assert not (tmp_path / "o.pth").exists()


@pytest.mark.slow
def test_test_tool_gives_the_same_numbers_for_the_fastreid_file_and_its_conversion(tmp_path):
    src = fr.write_checkpoint(tmp_path / "bot.pth", "bot_R50")
    dst = tmp_path / "bot_converted.pth"
    assert load_tool("convert_weights").main([src, str(dst), "--config-file", fr.config("bot_R50")]) == 0
    reports = []
    for weights in (src, str(dst)):
        out = tmp_path / f"test_{os.path.basename(weights)}"
        rc = load_tool("test").main(["--config-file", fr.config("bot_R50"), "MODEL.WEIGHTS", weights,
                                     "DATASETS.ROOT", str(tmp_path / "data"), "OUTPUT_DIR", str(out),
                                     "--output-dir", str(out), *TINY_DATA])
        assert rc == 0
        reports.append(json.loads((out / "metrics.json").read_text())["results"]["synthetic"]["plain"])
    for key in ("R-1", "R-5", "mAP", "mINP"):
        assert reports[0][key] == pytest.approx(reports[1][key], abs=1e-9), key
    assert reports[0]["cmc"] == pytest.approx(reports[1]["cmc"])


@pytest.mark.slow
def test_fine_tuning_starts_from_a_fastreid_file_and_from_its_conversion(tmp_path):
    src = fr.write_checkpoint(tmp_path / "bot.pth", "bot_R50")
    dst = tmp_path / "bot_converted.pth"
    assert load_tool("convert_weights").main([src, str(dst), "--config-file", fr.config("bot_R50")]) == 0
    train = ["DATASETS.ROOT", str(tmp_path / "data"), "SOLVER.MAX_EPOCH", "1", "SOLVER.IMS_PER_BATCH", "4",
             "DATALOADER.NUM_INSTANCE", "2", "SOLVER.WARMUP_ITERS", "1", "TEST.EVAL_PERIOD", "0",
             "SOLVER.CHECKPOINT_PERIOD", "1", "MODEL.BACKBONE.PRETRAINED", "False", *TINY_DATA]
    # The raw fast-reid file: its 16-class classifier does not fit 4 identities, so it is dropped.
    rc = load_tool("train").main(["--config-file", fr.config("bot_R50"), "MODEL.WEIGHTS", src,
                                  "OUTPUT_DIR", str(tmp_path / "raw"), *train])
    assert rc == 0 and (tmp_path / "raw" / "model_final.pth").is_file()
    log = (tmp_path / "raw" / "log.txt").read_text()
    assert "fast-reid Baseline checkpoint" in log and "identity classifier (16 classes) dropped" in log
    # The converted file has a 16-class head too: --drop-head, as for any checkpoint of this toolkit.
    rc = load_tool("train").main(["--config-file", fr.config("bot_R50"), "MODEL.WEIGHTS", str(dst), "--drop-head",
                                  "OUTPUT_DIR", str(tmp_path / "conv"), *train])
    assert rc == 0 and (tmp_path / "conv" / "model_final.pth").is_file()
