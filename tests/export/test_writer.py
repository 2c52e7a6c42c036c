"""Export round trips: .pt2 (torch.export) always, ONNX when onnx, onnxscript and onnxruntime are installed."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.config import get_cfg, save_config
from reid.export.writer import adaptive_max_pool2d_by_bins, compare_with_export, export_model, export_onnx, export_pt2
from reid.export.exported import export_format, load_exported, run_exported
from reid.export.identity import weights_hash
from reid.modeling import build_model
from reid.modeling.heads import HEAD_DEFAULTS
from tests._tools import load_tool

SIZE = (64, 32)  # tiny input: MGN's part maps are 4 x 2, so 3 stripes do not divide the rows
ONNX_MISSING = "ONNX export tests need onnx, onnxscript and onnxruntime (pip install 'circle-reid[export]')"


def _need_onnx():
    """The onnxruntime module; skips the test, with the reason, where an ONNX package is missing."""
    for name in ("onnx", "onnxscript"):
        pytest.importorskip(name, reason=ONNX_MISSING)
    return pytest.importorskip("onnxruntime", reason=ONNX_MISSING)


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


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    """The module's model exported once to .pt2 (and to .onnx where the packages are installed)."""
    folder = tmp_path_factory.mktemp("exported")
    model.train()  # export must use eval mode without changing the caller's model
    paths = {"pt2": export_pt2(model, folder / "model.pt2", SIZE)}
    assert model.training
    model.eval()
    try:
        paths["onnx"] = export_onnx(model, folder / "model.onnx", SIZE)
    except ImportError:
        pass
    return paths


def _pixels(batch: int, seed: int, size=SIZE) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 3, *size), generator=gen).float()


def _eager(model: torch.nn.Module, x: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return F.normalize(model(x), dim=1).numpy()


@pytest.mark.slow
def test_pt2_matches_eager_with_dynamic_batch(model, exported):
    module = torch.export.load(exported["pt2"]).module()  # plain torch, no circle-reid code
    for batch in (1, 7):  # exported with an example of batch 2: other sizes prove the axis is free
        x = _pixels(batch, seed=batch)
        with torch.no_grad():
            got = module(x).numpy()
        assert got.shape == (batch, model.feature_dim)
        np.testing.assert_allclose(got, _eager(model, x), atol=1e-5, rtol=0)
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    check = compare_with_export(model, exported["pt2"], SIZE)
    assert check.format == "pt2" and check.batch_sizes == (1, 7, 32)
    assert check.max_abs_diff < 1e-5 and check.passed()


@pytest.mark.slow
def test_onnx_matches_eager_with_dynamic_batch(model, exported):
    ort = _need_onnx()
    session = ort.InferenceSession(exported["onnx"], providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    assert inp.name == "images" and inp.shape == ["batch", 3, *SIZE] and inp.type == "tensor(float)"
    assert out.name == "features" and out.shape == ["batch", model.feature_dim]
    for batch in (1, 7):
        x = _pixels(batch, seed=10 + batch)
        got = session.run(None, {"images": x.numpy()})[0]
        assert got.shape == (batch, model.feature_dim)
        assert np.abs(got - _eager(model, x)).max() < 1e-4
    check = compare_with_export(model, exported["onnx"], SIZE)
    assert check.format == "onnx" and check.batch_sizes == (1, 7, 32) and check.max_abs_diff < 1e-4


@pytest.mark.slow
def test_exported_models_refuse_another_input_size(model, exported):
    wrong = _pixels(1, seed=3, size=(2 * SIZE[0], 2 * SIZE[1]))
    for fmt, path in exported.items():
        if fmt == "onnx":
            _need_onnx()
        run = load_exported(path)
        assert run.input_size == SIZE and run.feature_dim == model.feature_dim
        with pytest.raises(ValueError) as info:
            run(wrong)
        msg = str(info.value)
        assert "\n" not in msg and os.fspath(path) in msg
        assert f"expects images of {SIZE[0]}x{SIZE[1]}" in msg and f"got {2 * SIZE[0]}x{2 * SIZE[1]}" in msg
        assert f"--input-size {2 * SIZE[0]} {2 * SIZE[1]}" in msg
    # Without circle-reid's loader the runtimes refuse it too (their own wording).
    with pytest.raises(Exception, match=f"{SIZE[0]}"):
        torch.export.load(exported["pt2"]).module()(wrong)
    if "onnx" in exported:
        ort = _need_onnx()
        session = ort.InferenceSession(exported["onnx"], providers=["CPUExecutionProvider"])
        with pytest.raises(Exception, match=f"Expected: {SIZE[0]}"):
            session.run(None, {"images": wrong.numpy()})


@pytest.mark.slow
def test_exported_files_say_what_they_expect(model, exported):
    extra = {"circle_reid.json": ""}
    torch.export.load(exported["pt2"], extra_files=extra)  # fills in the extra file's text
    meta = json.loads(extra["circle_reid.json"])
    # A model without SIE: no camera ids, one input; the identity of the weights it was exported from.
    assert set(meta) == {"input", "input_size", "output", "weights_sha256"}
    assert meta["weights_sha256"] == weights_hash(model)
    assert meta["input_size"] == list(SIZE) and "RGB pixels 0-255" in meta["input"]
    for path in exported.values():
        if path.endswith(".onnx"):
            _need_onnx()
        run = load_exported(path)
        assert run.input_names == ("images",) and not run.needs_camids
        np.testing.assert_array_equal(run(_pixels(2, seed=4), camids=[7, -1]), run(_pixels(2, seed=4)))  # ignored
    assert f"[batch, {model.feature_dim}]" in meta["output"]
    if "onnx" in exported:
        onnx = pytest.importorskip("onnx", reason=ONNX_MISSING)
        props = {p.key: p.value for p in onnx.load(exported["onnx"]).metadata_props}
        assert json.loads(props["circle_reid"]) == meta


@pytest.mark.parametrize("h, w, oh, ow", [(16, 5, 3, 1), (16, 5, 2, 1), (7, 5, 5, 2), (16, 5, 16, 5), (9, 4, 1, 1)])
def test_adaptive_max_pool2d_by_bins_equals_torch(h, w, oh, ow):
    # The ONNX path replaces MGN's stripe pooling by this decomposition: it must be PyTorch's op.
    x = torch.randn(2, 4, h, w)
    values, indices = adaptive_max_pool2d_by_bins(x, (oh, ow))
    torch.testing.assert_close(values, F.adaptive_max_pool2d(x, (oh, ow)), rtol=0, atol=0)
    assert indices.shape == values.shape and indices.dtype == torch.long


# Every head (a trained model carries one; export must ignore it) and every eval-graph option,
# each at least once, on both meta-architectures.
VARIANTS = [
    ("baseline", "circle", {"MODEL.HEADS.POOLING": "gem"}),
    ("baseline", "amsoftmax", {"MODEL.HEADS.POOLING": "max", "MODEL.HEADS.NECK_FEAT": "before"}),
    ("baseline", "arcface", {"MODEL.HEADS.NECK": "none"}),
    ("mgn", "curricularface", {"MODEL.MGN.LOSS_LAYOUT": "per_branch"}),
    ("mgn", "normface", {"MODEL.MGN.GLOBAL_DOWNSAMPLE": False, "MODEL.HEADS.NECK_FEAT": "before"}),
    ("baseline", "linear", {"MODEL.HEADS.POOLING": "avg"}),
    ("baseline", "cosface", {"MODEL.BACKBONE.LAST_STRIDE": 1}),
    ("baseline", "circle", {"MODEL.BACKBONE.NAME": "osnet_ain_x0_25"}),
    ("baseline", "amsoftmax", {"MODEL.BACKBONE.NAME": "osnet_ibn_x1_0"}),
]


def test_variants_cover_every_head():
    assert {head for _, head, _ in VARIANTS} == set(HEAD_DEFAULTS)


@pytest.mark.slow
@pytest.mark.parametrize("arch, head, opts", VARIANTS,
                         ids=[f"{a}-{h}-{o.get('MODEL.BACKBONE.NAME', 'resnet18')}" for a, h, o in VARIANTS])
def test_every_architecture_and_head_exports(arch, head, opts, tmp_path):
    cfg = _cfg(arch)
    cfg.MODEL.HEADS.NAME = head
    cfg.MODEL.HEADS.NUM_CLASSES = 5
    for key, value in opts.items():
        node = cfg
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    torch.manual_seed(1)
    m = build_model(cfg).eval()
    _randomise_bn(m, seed=2)
    check = compare_with_export(m, export_pt2(m, tmp_path / "m.pt2", SIZE), SIZE)
    assert check.batch_sizes == (1, 7, 32) and check.max_abs_diff < 1e-5
    if "osnet" in str(cfg.MODEL.BACKBONE.NAME):  # instance norms and depthwise convolutions in ONNX too
        _need_onnx()
        check = compare_with_export(m, export_onnx(m, tmp_path / "m.onnx", SIZE), SIZE)
        assert check.max_abs_diff < 1e-5


@pytest.mark.slow
def test_load_exported_accepts_numpy_and_uint8_pixels(model, exported):
    run = load_exported(exported["pt2"])
    x = _pixels(2, seed=7)  # integer-valued, so uint8 holds the same pixels
    expected = run(x)
    assert expected.shape == (2, model.feature_dim)
    for arr in (x.numpy(), x.numpy().astype(np.float64), x.numpy().astype(np.uint8), x.to(torch.uint8)):
        np.testing.assert_allclose(run(arr), expected, atol=1e-6, rtol=0)
    np.testing.assert_allclose(run_exported(exported["pt2"], x.numpy().astype(np.uint8)), expected, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"\[B, 3, H, W\].*channels last"):
        run(x.numpy().transpose(0, 2, 3, 1))
    with pytest.raises(TypeError, match="int32"):
        run(x.numpy().astype(np.int32))


def test_export_format_from_extension(tmp_path):
    assert export_format("a/model.ONNX") == "onnx" and export_format("model.pt2") == "pt2"
    with pytest.raises(ValueError, match="model.bin.*\\.pt2.*\\.onnx"):
        export_model(torch.nn.Identity(), tmp_path / "model.bin", SIZE)
    # TorchScript is gone (deprecated by torch): the message says what replaces it.
    for name in ("model.ts", "model.pt"):
        with pytest.raises(ValueError, match=r"TorchScript.*\.pt2"):
            export_format(name)
        (tmp_path / name).write_bytes(b"\x00")
        with pytest.raises(ValueError, match=r"TorchScript.*\.pt2"):
            load_exported(tmp_path / name)


def test_corrupt_or_missing_exported_file_is_a_clear_error(tmp_path):
    (tmp_path / "bad.pt2").write_bytes(b"not a program")
    with pytest.raises(ValueError, match="bad.pt2.*not a readable .pt2"):
        load_exported(tmp_path / "bad.pt2")
    with pytest.raises(FileNotFoundError, match="nope.pt2.*tools/export.py"):
        load_exported(tmp_path / "nope.pt2")


def test_onnx_without_packages_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # makes `import onnxscript` fail
    with pytest.raises(ImportError, match="onnxscript.*pip install"):
        export_onnx(torch.nn.Identity(), tmp_path / "m.onnx", SIZE)
    assert not os.path.exists(tmp_path / "m.onnx")
    (tmp_path / "fake.onnx").write_bytes(b"\x00")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match="onnxruntime"):
        run_exported(tmp_path / "fake.onnx", _pixels(1, 0))


def _saved_run(cfg, folder, seed=1):
    """A run folder (config.yaml + model_final.pth) holding a random model of `cfg`."""
    torch.manual_seed(seed)
    trained = build_model(cfg).eval()
    _randomise_bn(trained, seed=seed)
    folder.mkdir()
    save_config(cfg, str(folder / "config.yaml"))
    torch.save({"model": trained.state_dict(), "cfg": cfg.dump()}, folder / "model_final.pth")
    return trained


@pytest.mark.slow
def test_export_tool_writes_checks_and_fails_over_tol(tmp_path, capsys):
    export_tool = load_tool("export")
    cfg = _cfg("baseline")
    cfg.MODEL.HEADS.NUM_CLASSES = 3  # a trained model has a head; export must drop it
    trained = _saved_run(cfg, tmp_path / "run")
    out = tmp_path / "exported" / "model.pt2"
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"[batch, 3, {SIZE[0]}, {SIZE[1]}]" in text
    assert "max abs difference" in text and "batch sizes 1, 7, 32" in text and "OK" in text
    x = _pixels(2, seed=5)
    with torch.no_grad():
        np.testing.assert_allclose(torch.export.load(str(out)).module()(x).numpy(), _eager(trained, x), atol=1e-5)
    # A tolerance no export meets: the file is written, the check fails, exit code 1.
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", str(out), "--tol", "-1"]) == 1
    captured = capsys.readouterr()
    assert "FAILED (tolerance -1)" in captured.out and "differ from PyTorch by more than -1" in captured.err
    # User mistakes are one-line errors and exit code 1, not tracebacks.
    for argv, word in ((["--run", str(tmp_path / "nope"), "--output", str(out)], "nope"),
                       (["--run", str(tmp_path / "run"), "--output", str(tmp_path / "m.ts")], "TorchScript")):
        assert export_tool.main(argv) == 1
        err = capsys.readouterr().err
        assert word in err and "Traceback" not in err and err.count("\n") == 1


@pytest.mark.slow
def test_demo_and_mgn_models_export_to_onnx_and_pt2(tmp_path, capsys):
    """The issue's acceptance check: the trained demo model and an MGN model, both formats."""
    ort = _need_onnx()
    from reid.cli import train as cli_train
    from reid.inference import Predictor
    from tests.cli.test_cli import DEMO, tiny_opts

    # The demo config, trained for seconds, tested (and exported) at its own 128x64.
    opts = tiny_opts(tmp_path / "data", tmp_path / "demo") + ["INPUT.SIZE_TEST", "[128, 64]"]
    assert cli_train.main(["--config-file", DEMO] + opts) == 0
    mgn_cfg = _cfg("mgn")
    mgn_cfg.MODEL.HEADS.NAME = "circle"
    mgn_cfg.MODEL.HEADS.NUM_CLASSES = 4
    mgn_cfg.INPUT.SIZE_TEST = [256, 128]  # 16-row part maps: 3 stripes share rows
    _saved_run(mgn_cfg, tmp_path / "mgn")
    export_tool = load_tool("export")
    for name, size in (("demo", (128, 64)), ("mgn", (256, 128))):
        outs = [str(tmp_path / f"{name}.onnx"), str(tmp_path / f"{name}.pt2")]
        assert export_tool.main(["--run", str(tmp_path / name), "--output", *outs]) == 0
        text = capsys.readouterr().out
        assert text.count("-> OK") == 2 and f"[batch, 3, {size[0]}, {size[1]}]" in text
        predictor = Predictor.from_run(str(tmp_path / name), device="cpu")
        session = ort.InferenceSession(outs[0], providers=["CPUExecutionProvider"])
        for batch in (1, 7):
            x = _pixels(batch, seed=batch, size=size)
            expected = _eager(predictor.model, x)
            assert np.abs(session.run(None, {"images": x.numpy()})[0] - expected).max() < 1e-4
            assert np.abs(load_exported(outs[1])(x) - expected).max() < 1e-4


def test_export_sizes_are_bounded_as_the_config_bounds_them(tmp_path):
    from reid.config import value_range
    from reid.export.writer import check_input_size

    high = value_range("INPUT.SIZE_TEST")[1]
    assert check_input_size([16, high]) == (16, high)
    for size in ([5000, 5000], [100000, 100000], [high + 1, 64], [15, 64], [64]):
        with pytest.raises(ValueError, match=rf"input_size must be \[height, width\] of 16 to {high} px each"):
            check_input_size(size)
    # Refused before the model is wrapped or traced: nothing of that size is ever allocated.
    with pytest.raises(ValueError, match="of 16 to"):
        export_pt2(torch.nn.Identity(), tmp_path / "m.pt2", (100000, 100000))
    assert not os.path.exists(tmp_path / "m.pt2")


def test_an_opset_the_exporter_cannot_write_is_refused():
    onnx = pytest.importorskip("onnx", reason=ONNX_MISSING)
    pytest.importorskip("onnxscript", reason=ONNX_MISSING)
    from reid.export.writer import check_opset

    newest = onnx.defs.onnx_opset_version()
    assert check_opset(18) == 18 and check_opset(newest) == newest
    for opset in (17, newest + 1, 1000):  # torch quietly wrote opset 18 when asked for 1000
        with pytest.raises(ValueError, match=rf"ONNX opset {opset} cannot be written: torch's exporter writes opsets "
                                             rf"18 to {newest}"):
            check_opset(opset)


@pytest.mark.slow
def test_the_export_tool_records_the_weights_and_refuses_a_bad_opset_before_exporting(tmp_path, capsys):
    _need_onnx()
    export_tool = load_tool("export")
    trained = _saved_run(_cfg("baseline"), tmp_path / "run")
    out = tmp_path / "m.onnx"
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", str(out), "--opset", "1000"]) == 1
    err = capsys.readouterr().err
    assert "ONNX opset 1000 cannot be written" in err and err.count("\n") == 1 and not out.exists()
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", str(out), "--no-check"]) == 0
    assert "the weights' identity goes into the metadata" in capsys.readouterr().out
    record = load_exported(out).identity
    assert record == {"weights_sha256": weights_hash(trained), "weights_file": "model_final.pth"}
