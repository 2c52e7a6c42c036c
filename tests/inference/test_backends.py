"""Inference backends: the exported model run by ONNX Runtime gives PyTorch's features; clear errors."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from reid.config import get_cfg
from reid.inference import Predictor
from reid.export.writer import export_onnx
from reid.inference.backends import _check_size
from reid.modeling import build_model
from tests._tools import load_tool

SIZE = (64, 32)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _model_and_cfg(name="osnet_x0_25"):
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = name
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.FC_DIM = 64
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TEST = list(SIZE)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_var.uniform_(0.5, 1.5)
    return model, cfg


def _images(n=5):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (90, 40, 3), dtype=np.uint8) for _ in range(n)]


@pytest.mark.slow
def test_onnxruntime_backend_gives_pytorchs_features_and_reuses_an_exported_file(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model, cfg = _model_and_cfg()
    reference = Predictor(model, cfg, batch_size=2).extract_arrays(_images())
    ort = Predictor(model, cfg, batch_size=2, backend="onnxruntime")
    assert np.abs(ort.extract_arrays(_images()) - reference).max() < 1e-5
    path = export_onnx(model, tmp_path / "m.onnx", SIZE)
    given = Predictor(model, cfg, batch_size=3, backend="onnxruntime", exported=path)
    assert np.abs(given.extract_arrays(_images()) - reference).max() < 1e-5
    try:  # OpenVINO where installed (not part of the extras): the same file, fp32
        import openvino  # noqa: F401
    except ImportError:
        pass
    else:
        ov = Predictor(model, cfg, batch_size=2, backend="openvino", exported=path)
        assert np.abs(ov.extract_arrays(_images()) - reference).max() < 1e-5
    # A file of another input size: seen from the graph's input shape.
    with pytest.raises(ValueError, match=r"exported for 32x16 images.*resizes to 64x32"):
        _check_size(path, (32, 16), SIZE)


def test_unknown_backend_lists_the_valid_ones():
    model, cfg = _model_and_cfg()
    with pytest.raises(ValueError, match="Unknown inference backend 'tensorrt'. Valid names: torch, onnxruntime"):
        Predictor(model, cfg, backend="tensorrt")


def test_flip_needs_the_torch_backend():
    model, cfg = _model_and_cfg()
    with pytest.raises(ValueError, match="set TEST.FLIP False, or use the torch backend"):
        Predictor(model, cfg, flip=True, backend="onnxruntime")


def test_missing_openvino_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if not installed
    model, cfg = _model_and_cfg()
    with pytest.raises(ImportError, match="pip install openvino"):
        Predictor(model, cfg, backend="openvino")


def test_an_exported_file_needs_a_backend_that_runs_its_format(tmp_path):
    model, cfg = _model_and_cfg()
    with pytest.raises(ValueError, match=r"m.pt2 is a .pt2 program, which runs with torch \(--backend onnxruntime runs ONNX files\)"):
        Predictor(model, cfg, backend="onnxruntime", exported=str(tmp_path / "m.pt2"))


def test_extract_tool_refuses_an_unknown_backend(capsys):
    with pytest.raises(SystemExit):
        load_tool("extract").main(["--weights", "w.pth", "--input", "x", "--output", "g.npz", "--backend", "trt"])
    err = capsys.readouterr().err
    assert "invalid choice: 'trt'" in err and "onnxruntime" in err


@pytest.fixture(scope="module")
def exported_files(tmp_path_factory):
    """The model of _model_and_cfg exported once, plain and for BoxMOT (ONNX)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    from reid.export.boxmot import export_for_boxmot

    model, _ = _model_and_cfg()
    folder = tmp_path_factory.mktemp("exported")
    return {"plain": export_onnx(model, folder / "m.onnx", SIZE, metadata={"weights_file": "model_final.pth"}),
            "boxmot": export_for_boxmot(model, folder / "boxmot.onnx", SIZE)}


def _with_metadata(src, dst, edit):
    """A copy of ONNX file `src` whose circle_reid metadata is `edit`ed (a dict in, a dict out)."""
    import json

    import onnx

    proto = onnx.load(str(src))
    prop = next(p for p in proto.metadata_props if p.key == "circle_reid")
    prop.value = json.dumps(edit(json.loads(prop.value)))
    onnx.save(proto, str(dst))
    return str(dst)


@pytest.mark.slow
def test_an_exported_file_must_hold_the_weights_it_is_run_for(exported_files, tmp_path, caplog):
    from reid.export.identity import weights_hash

    model, cfg = _model_and_cfg()
    same = Predictor(model, cfg, backend="onnxruntime", exported=exported_files["plain"])
    meta = same.describe()
    assert meta["weights_sha256"] == weights_hash(model) and meta["exported"] == str(exported_files["plain"])
    assert meta["exported_sha256"].startswith("sha256:")
    # Other weights of the same architecture (another run, another checkpoint): refused, both named.
    other = _model_and_cfg()[0]
    with torch.no_grad():
        other.backbone.conv1.conv.weight.mul_(1.5)
    cfg.defrost()
    cfg.MODEL.WEIGHTS = "/runs/b/model_final.pth"
    with pytest.raises(ValueError) as err:
        Predictor(other, cfg, backend="onnxruntime", exported=exported_files["plain"])
    message = str(err.value)
    assert "m.onnx was exported from other weights than /runs/b/model_final.pth: it records model_final.pth" in message
    assert f"(sha256 {weights_hash(model)[7:19]}...)" in message and weights_hash(other)[7:19] in message
    # A file from before identities were written: it loads, with a note, and a gallery made with it
    # names the file instead of claiming the weights.
    old = _with_metadata(exported_files["plain"], tmp_path / "old.onnx",
                         lambda m: {k: v for k, v in m.items() if not k.startswith("weights_")})
    with caplog.at_level("WARNING"):
        legacy = Predictor(other, cfg, backend="onnxruntime", exported=old)
    assert "old.onnx records no weights identity" in caplog.text
    assert "weights_sha256" not in legacy.describe()
    assert legacy.describe()["weights"].endswith("old.onnx (an exported file that records no weights)")
    damaged = _with_metadata(exported_files["plain"], tmp_path / "damaged.onnx",
                             lambda m: {**m, "weights_sha256": "sha256:0123"})
    with pytest.raises(ValueError, match="damaged.onnx: its recorded weights identity is damaged"):
        Predictor(model, cfg, backend="onnxruntime", exported=damaged)


@pytest.mark.slow
def test_a_tracker_export_records_the_inner_model_and_gets_its_own_input_convention(exported_files):
    """A file written for BoxMOT takes normalised crops: every tool converts the raw pixels first, so its
    features are the model's (a raw-pixel feed gives features near-constant over images)."""
    from reid.export.exported import load_exported
    from reid.export.identity import weights_hash

    model, cfg = _model_and_cfg()
    tracker_file = load_exported(exported_files["boxmot"])
    assert tracker_file.identity["weights_sha256"] == weights_hash(model) and tracker_file.convention == "boxmot"
    reference = Predictor(model, cfg, batch_size=2).extract_arrays(_images())
    given = Predictor(model, cfg, batch_size=2, backend="onnxruntime", exported=exported_files["boxmot"])
    assert np.abs(given.extract_arrays(_images()) - reference).max() < 1e-4


def test_a_file_that_is_not_onnx_is_one_line(tmp_path):
    pytest.importorskip("onnxruntime")
    model, cfg = _model_and_cfg()
    (tmp_path / "notes.onnx").write_text("these are my notes, not a model\n" * 20)
    with pytest.raises(ValueError) as err:
        Predictor(model, cfg, backend="onnxruntime", exported=str(tmp_path / "notes.onnx"))
    assert "notes.onnx' is not a readable ONNX model: it is a text file;" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name, content, kind", [("empty.onnx", b"", "an empty file"),
                                                 ("photo.onnx", b"\xff\xd8\xff\xe0" + b"\0" * 64, "a JPEG image")])
def test_a_file_that_is_not_onnx_is_named_for_what_it_is(tmp_path, name, content, kind):
    """Before: the first line of onnxruntime's C++ error (an empty file: 'onnxruntime::Model::Model(...')."""
    pytest.importorskip("onnxruntime")
    model, cfg = _model_and_cfg()
    (tmp_path / name).write_bytes(content)
    with pytest.raises(ValueError) as err:
        Predictor(model, cfg, backend="onnxruntime", exported=str(tmp_path / name))
    assert f"{name}' is not a readable ONNX model: it is {kind}; give a file" in str(err.value)
    assert "onnxruntime" not in str(err.value) and "\n" not in str(err.value)


def test_an_onnx_file_with_the_torch_backend_is_refused(tmp_path):
    model, cfg = _model_and_cfg()
    with pytest.raises(ValueError, match=r"m.onnx is an ONNX file, which runs with onnxruntime or openvino \(--backend "
                                         r"torch runs a checkpoint's weights or a .pt2 program\)"):
        Predictor(model, cfg, backend="torch", exported=str(tmp_path / "m.onnx"))


def test_extract_refuses_an_onnx_file_with_the_torch_backend(capsys):
    with pytest.raises(SystemExit) as e:
        load_tool("extract").main(["--weights", "w.pth", "--input", "x", "--output", "g.npz",
                                   "--exported", "m.onnx", "--backend", "torch"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--exported m.onnx runs with --backend onnxruntime or --backend openvino" in err
