"""Inference backends: the exported model run by ONNX Runtime gives PyTorch's features; clear errors."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from reid.config import get_cfg
from reid.inference import Predictor
from reid.inference.export import export_onnx
from reid.inference.runtimes import _check_size
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
        _check_size(path, ["batch", 3, 32, 16], SIZE)


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


def test_exported_file_must_be_onnx(tmp_path):
    model, cfg = _model_and_cfg()
    with pytest.raises(ValueError, match="not an .onnx file"):
        Predictor(model, cfg, backend="onnxruntime", exported=str(tmp_path / "m.pt2"))


def test_extract_tool_refuses_an_unknown_backend(capsys):
    with pytest.raises(SystemExit):
        load_tool("extract").main(["--weights", "w.pth", "--input", "x", "--output", "g.npz", "--backend", "trt"])
    err = capsys.readouterr().err
    assert "invalid choice: 'trt'" in err and "onnxruntime" in err
