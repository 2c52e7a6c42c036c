"""Export round trips: TorchScript always, ONNX when onnx + onnxruntime are installed."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.config import get_cfg, save_config
from reid.inference.export import (
    compare_with_export,
    export_format,
    export_model,
    export_onnx,
    export_torchscript,
    load_exported,
    run_exported,
)
from reid.inference.onnx_ops import adaptive_bins
from reid.modeling import build_model
from tests._tools import load_tool

# torch.jit.load itself warns that TorchScript is deprecated; that is not what these tests check.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:FutureWarning")

SIZE = (64, 32)  # tiny input: MGN's part maps are 4 x 2, so 3 stripes do not divide the rows


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _cfg(arch: str):
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = arch
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.MGN.REDUCTION_DIM = 32
    cfg.INPUT.SIZE_TEST = list(SIZE)
    cfg.MODEL.DEVICE = "cpu"
    return cfg


def _randomise_bn(model: torch.nn.Module, seed: int = 0) -> None:
    # Fresh BatchNorms have mean 0 / var 1; other statistics make sure they really are exported.
    gen = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)


@pytest.fixture(scope="module", params=["baseline", "mgn"])
def model(request) -> torch.nn.Module:
    torch.manual_seed(0)
    m = build_model(_cfg(request.param))
    _randomise_bn(m)
    return m.eval()


def _pixels(batch: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 3, *SIZE), generator=gen).float()


def _eager(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return F.normalize(model(x), dim=1).numpy()


def test_torchscript_matches_eager_with_dynamic_batch(model, tmp_path):
    model.train()  # export must use eval mode without changing the caller's model
    path = export_torchscript(model, tmp_path / "model.ts", SIZE)
    assert model.training
    model.eval()
    loaded = torch.jit.load(path)
    for batch in (1, 3):  # traced at batch 2: other sizes prove the batch axis is free
        x = _pixels(batch, seed=batch)
        with torch.no_grad():
            got = loaded(x).numpy()
        expected = _eager(model, x)
        assert got.shape == (batch, model.feature_dim)
        np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    check = compare_with_export(model, path, SIZE, batch_sizes=(2,))
    assert check.format == "torchscript" and check.batch_sizes == (2,)
    assert check.max_abs_diff < 1e-5 and check.passed()


def test_onnx_matches_eager_with_dynamic_batch(model, tmp_path):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    path = export_onnx(model, tmp_path / "model.onnx", SIZE)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert [o.name for o in session.get_outputs()] == ["features"]
    for batch in (1, 3):
        x = _pixels(batch, seed=10 + batch)
        got = session.run(None, {"images": x.numpy()})[0]
        assert got.shape == (batch, model.feature_dim)
        assert np.abs(got - _eager(model, x)).max() < 1e-4
    check = compare_with_export(model, path, SIZE, batch_sizes=(2,))
    assert check.format == "onnx" and check.max_abs_diff < 1e-4


def test_adaptive_bins_match_torch_adaptive_max_pool():
    # The ONNX translation of MGN's stripe pooling relies on these bins being torch's.
    x = torch.randn(2, 4, 16, 5)
    for out_h, out_w in [(3, 1), (2, 1), (5, 2), (16, 5)]:
        expected = F.adaptive_max_pool2d(x, (out_h, out_w))
        rows = []
        for h0, h1 in adaptive_bins(16, out_h):
            rows.append(torch.stack([x[:, :, h0:h1, w0:w1].amax(dim=(2, 3)) for w0, w1 in adaptive_bins(5, out_w)], -1))
        torch.testing.assert_close(torch.stack(rows, -2), expected, rtol=0, atol=0)


def test_load_exported_accepts_numpy_and_uint8_pixels(tmp_path):
    torch.manual_seed(0)
    m = build_model(_cfg("baseline")).eval()
    path = export_torchscript(m, tmp_path / "m.ts", SIZE)
    run = load_exported(path)
    x = _pixels(2, seed=7)  # integer-valued, so uint8 holds the same pixels
    expected = run(x)
    assert expected.shape == (2, m.feature_dim)
    for arr in (x.numpy(), x.numpy().astype(np.float64), x.numpy().astype(np.uint8), x.to(torch.uint8)):
        np.testing.assert_allclose(run(arr), expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(run_exported(path, x.numpy().astype(np.uint8)), expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\].*channels last"):
        run(x.numpy().transpose(0, 2, 3, 1))
    with pytest.raises(TypeError, match="int32"):
        run(x.numpy().astype(np.int32))


def test_export_format_from_extension(tmp_path):
    assert export_format("a/model.ONNX") == "onnx"
    assert export_format("model.ts") == "torchscript" and export_format("model.pt") == "torchscript"
    with pytest.raises(ValueError, match="model.bin"):
        export_model(torch.nn.Identity(), tmp_path / "model.bin", SIZE)


def test_onnx_without_packages_says_what_to_install(model, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # makes `import onnx` fail
    with pytest.raises(ImportError, match="pip install"):
        export_onnx(model, tmp_path / "m.onnx", SIZE)
    assert not os.path.exists(tmp_path / "m.onnx")
    (tmp_path / "fake.onnx").write_bytes(b"\x00")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match="onnxruntime"):
        run_exported(tmp_path / "fake.onnx", _pixels(1, 0))


def test_export_tool_writes_and_checks(tmp_path, capsys):
    export_tool = load_tool("export")
    cfg = _cfg("baseline")
    cfg.MODEL.HEADS.NUM_CLASSES = 3  # a trained model has a head; export must drop it
    torch.manual_seed(1)
    trained = build_model(cfg).eval()
    run = tmp_path / "run"
    run.mkdir()
    save_config(cfg, str(run / "config.yaml"))
    torch.save({"model": trained.state_dict(), "cfg": cfg.dump()}, run / "model_final.pth")
    out = tmp_path / "exported" / "model.ts"
    assert export_tool.main(["--run", str(run), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "max abs difference" in text and "OK" in text
    x = _pixels(2, seed=5)
    with torch.no_grad():
        np.testing.assert_allclose(torch.jit.load(str(out))(x).numpy(), _eager(trained, x), atol=1e-5)
    # A user mistake is an error message and exit code 1, not a traceback.
    assert export_tool.main(["--run", str(tmp_path / "nope"), "--output", str(out)]) == 1
    assert "nope" in capsys.readouterr().err
