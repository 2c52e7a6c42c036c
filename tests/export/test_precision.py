"""fp16 and int8 exports (tools/export.py --precision): what the files hold, batch parity at 1/7/32 in
every installed runtime, the accuracy gate (a broken calibration is refused), the runtime switch, and
one line for each bad input."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from reid.export.accuracy import AccuracyCheck, check_map_drop, compare_accuracy
from reid.export.options import check_precision
from reid.export.precision import BATCH_TOLERANCE, batch_parity
from tests._tools import TINY_DATA, load_tool

SIZE = (64, 32)
pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")
onnx = pytest.importorskip("onnx")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _runtimes():
    from reid.export.runtimes import installed_runtimes

    return installed_runtimes()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A seeded ResNet18 checkpoint (it stores its config) and the root of a tiny synthetic dataset."""
    from reid.config import get_cfg, save_config
    from reid.config.config import merge_from_list
    from reid.data.build import build_test_data
    from reid.engine.checkpoint_files import save_checkpoint
    from reid.modeling import build_model

    root = tmp_path_factory.mktemp("precision")
    cfg = get_cfg()
    merge_from_list(cfg, TINY_DATA + ["DATASETS.SYNTHETIC.NUM_TEST_IDS", "8", "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "8",
                                     "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "3", "DATASETS.ROOT", str(root / "data")])
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    weights = str(root / "model.pth")
    save_checkpoint(weights, model=model.state_dict())
    config = str(root / "config.yaml")
    save_config(cfg, config)
    build_test_data(cfg, "synthetic", log=False)  # generated now: its progress lines stay out of the tests' output
    return {"weights": weights, "config": config, "root": root, "data": str(root / "data")}


def _export(tiny, *flags):
    tool = load_tool("export")
    return tool.main(["--config-file", tiny["config"], "--weights", tiny["weights"], "DATASETS.ROOT", tiny["data"], *flags])


def _black_crops(folder, n=24):
    import cv2

    os.makedirs(folder, exist_ok=True)
    for i in range(n):
        cv2.imwrite(os.path.join(folder, f"{i}.jpg"), np.zeros((64, 32, 3), np.uint8))
    return str(folder)


def _record(path):
    model = onnx.load(path)
    return json.loads({p.key: p.value for p in model.metadata_props}["circle_reid"])


@pytest.mark.slow
def test_fp16_export_halves_the_weights_keeps_float32_io_and_the_norm_in_float32(tiny, tmp_path, capsys):
    out = str(tmp_path / "m16.onnx")
    assert _export(tiny, "--output", out, "--precision", "fp16", "--calibration", "synthetic") == 0
    model = onnx.load(out)
    kinds = {t.data_type for t in model.graph.initializer}
    assert onnx.TensorProto.FLOAT16 in kinds  # the convolutions' weights are float16
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
    record = _record(out)
    assert record["precision"] == "fp16"
    kept = record["conversion"]["kept_float"]
    ops = {n.name: n.op_type for n in model.graph.node}
    assert kept and "Div" in {ops[k] for k in kept if k in ops}  # the final division by the norm
    assert record["cosine_to_fp32"]["min"] > 0.999
    for runtime in _runtimes():
        assert max(record["batch_parity"][runtime].values()) <= BATCH_TOLERANCE["fp16"]
        assert set(record["batch_parity"][runtime]) == {"7", "32"}
    report = json.load(open(out + ".report.json"))
    assert report["precision"] == "fp16" and report["batch_parity"] == record["batch_parity"]
    assert "wrote onnx model" in capsys.readouterr().out


@pytest.mark.slow
def test_fp16_keeps_features_whose_squares_overflow_float16(tmp_path):
    """Features of norm > 256 have a sum of squares beyond float16's 65,504: kept in float32, the
    normalisation still gives unit vectors (in float16 it would give zeros or NaN)."""
    from reid.export.writer import export_onnx
    from reid.export.precision import convert_fp16

    class Big(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 64, 3)

        def forward(self, x):
            return torch.relu(self.conv(x)).mean(dim=(2, 3)) * 50.0 + 40.0  # values ~40-300: norm ~ 1,000

    torch.manual_seed(0)
    src = export_onnx(Big().eval(), tmp_path / "big.onnx", SIZE)
    kept = convert_fp16(src, str(tmp_path / "big16.onnx"))
    import onnxruntime as ort

    x = np.random.default_rng(0).integers(0, 256, (4, 3, *SIZE)).astype(np.float32)
    ref = ort.InferenceSession(src, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    got = ort.InferenceSession(str(tmp_path / "big16.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    assert kept and np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-3)
    assert np.abs(got - ref).max() < 2e-3


@pytest.mark.slow
def test_int8_export_is_qdq_calibrated_recorded_batch_parity_and_runs_in_the_predictor(tiny, tmp_path):
    from reid.inference.predictor import Predictor, load_predictor

    out = str(tmp_path / "m8.onnx")
    assert _export(tiny, "--output", out, "--precision", "int8", "--calibration", "synthetic",
                   "--calibration-images", "40", "--check-on", "synthetic") == 0
    model = onnx.load(out)
    ops = [n.op_type for n in model.graph.node]
    assert "QuantizeLinear" in ops and "DequantizeLinear" in ops
    assert any(t.data_type == onnx.TensorProto.INT8 for t in model.graph.initializer)  # int8 weights
    record = _record(out)
    conv = record["conversion"]
    assert record["precision"] == "int8" and conv["calibration_images"] + conv["held_out_images"] == 40
    assert "seed 0" in conv["calibration_source"] and conv["quantised_nodes"] > 10
    for runtime in _runtimes():
        assert max(record["batch_parity"][runtime].values()) <= BATCH_TOLERANCE["int8"]
    acc = record["accuracy"]
    assert acc["dataset"] == "synthetic" and acc["map_drop"] <= 1.0  # written: within the gate
    assert acc["map_drop"] == pytest.approx(acc["pytorch_fp32"]["mAP"] - acc["exported"]["mAP"], abs=1e-3)
    assert 0.95 < acc["cosine_to_fp32"]["min"] <= acc["cosine_to_fp32"]["mean"] <= 1.0

    # The runtime switch: the same file in each backend, the precision recorded with the features.
    reference = load_predictor(config_file=tiny["config"], weights=tiny["weights"], batch_size=8)
    images = [np.random.default_rng(i).integers(0, 256, (64, 32, 3), dtype=np.uint8) for i in range(9)]
    fp32 = reference.extract_arrays(images)
    for runtime in _runtimes():
        p = Predictor(reference.model, reference.cfg, batch_size=4, backend=runtime, exported=out, precision="int8")
        f = p.extract_arrays(images)
        assert p.precision == "int8" and p.describe()["precision"] == "int8"
        assert (f * fp32).sum(1).min() > 0.95
    with pytest.raises(ValueError, match=r"m8.onnx is an int8 file and --precision fp16 was asked for"):
        Predictor(reference.model, reference.cfg, backend="onnxruntime", exported=out, precision="fp16")
    assert reference.describe()["precision"] == "fp32"


@pytest.mark.slow
def test_a_broken_calibration_is_refused_by_the_map_gate_and_force_writes_it(tiny, tmp_path, capsys):
    black = _black_crops(tmp_path / "black")
    out = str(tmp_path / "bad.onnx")
    flags = ["--output", out, "--precision", "int8", "--calibration", black, "--check-on", "synthetic"]
    assert _export(tiny, *flags) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.onnx: mAP drops by" in err[0] and "more than --max-map-drop 1; not written" in err[0]
    assert not os.path.exists(out) and not os.path.exists(out + ".report.json")
    assert sorted(os.listdir(tmp_path)) == ["black"]  # nothing beside the output, not even a temporary
    assert _export(tiny, *flags, "--force") == 0
    record = _record(out)
    assert record["accuracy"]["map_drop"] > 1.0
    assert len(record["forced"]) == 1 and "written anyway (--force)" in record["forced"][0]  # said in the file
    assert "written anyway (--force)" in capsys.readouterr().out


@pytest.mark.slow
def test_fp32_export_checks_batch_32_and_records_its_precision(tiny, tmp_path, capsys):
    out = str(tmp_path / "m.onnx")
    assert _export(tiny, "--output", out) == 0
    assert _record(out)["precision"] == "fp32"
    assert "batch sizes 1, 7, 32" in capsys.readouterr().out


# ------------------------------------------------------------------ one line for each bad input
def test_int8_without_calibration_crops_is_one_line_before_any_model_is_read(capsys):
    assert load_tool("export").main(["--weights", "missing.pth", "--output", "m.onnx", "--precision", "int8"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--precision int8 needs calibration crops: pass --calibration" in err[0]


@pytest.mark.slow
def test_bad_precision_inputs_are_one_line_each(tiny, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no images here")
    flat = _black_crops(tmp_path / "flat", n=3)  # images, but no identity sub-folders
    cases = [
        (["--output", str(tmp_path / "a.onnx"), "--precision", "int8", "--calibration", str(empty)],
         "No images"),
        (["--output", str(tmp_path / "a.pt2"), "--precision", "fp16"],
         "--precision fp16 writes ONNX files"),
        (["--output", str(tmp_path / "a.onnx"), "--check-on", str(empty), str(empty)],
         str(empty)),
        (["--output", str(tmp_path / "a.onnx"), "--check-on", "a", "b", "c"],
         "--check-on takes a dataset name"),
        (["--output", str(tmp_path / "a.onnx"), "--check-on", flat, flat],
         "images outside any sub-folder"),
        (["--output", str(tmp_path / "a.onnx"), "--check-on", "unlabelled"],
         "Unlabelled dataset"),
    ]
    for flags, expected in cases:
        capsys.readouterr()
        assert _export(tiny, *flags) == 1, flags
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and expected in err[0], (flags, err)
    assert not os.path.exists(tmp_path / "a.onnx")


def test_check_on_images_without_identities_is_one_line(tmp_path):
    """Folders whose query identities are nowhere in the gallery: nothing to rank."""
    batches = [{"images": torch.zeros(2, 3, 4, 2), "targets": [1, 2], "camids": [0, 0]},
               {"images": torch.zeros(2, 3, 4, 2), "targets": [3, 4], "camids": [1, 1]}]

    def run(x, camids=None):
        return np.ones((len(x), 3), np.float32)

    with pytest.raises(ValueError, match=r"--check-on q \+ g: no query identity appears in the gallery"):
        compare_accuracy(run, run, batches, num_query=2, dataset="q + g")


def test_torch_backend_refuses_reduced_precision(capsys):
    from tests.inference.test_backends import _model_and_cfg
    from reid.inference.predictor import Predictor

    model, cfg = _model_and_cfg()
    with pytest.raises(ValueError, match="The torch backend runs the fp32 weights; int8 files run with backend"):
        Predictor(model, cfg, precision="int8")
    with pytest.raises(ValueError, match="int8 needs calibration crops"):
        Predictor(model, cfg, backend="onnxruntime", precision="int8")
    tool = load_tool("extract")
    with pytest.raises(SystemExit) as e:
        tool.main(["--weights", "w.pth", "--input", "x", "--output", "g.npz", "--precision", "fp16"])
    assert e.value.code == 2 and "--precision fp16 runs with --backend onnxruntime or openvino" in capsys.readouterr().err


def test_unknown_precision_lists_the_valid_ones():
    with pytest.raises(ValueError, match="Unknown precision 'int4'; valid: fp32, fp16, int8"):
        check_precision("int4")


# ------------------------------------------------------------------ the measures themselves
def test_batch_parity_finds_a_file_whose_batch_axis_is_wrong():
    x = np.random.default_rng(0).random((32, 3, 4, 2)).astype(np.float32)

    def good(batch):
        return batch.reshape(len(batch), -1)[:, :5] * 2.0

    def bad(batch):  # mixes the images of a batch, as a wrongly exported batch axis does
        out = good(batch)
        return out + out.mean(axis=0, keepdims=True) * (len(batch) > 1)

    assert batch_parity(good, x) == {7: 0.0, 32: 0.0}
    diffs = batch_parity(bad, x)
    assert diffs[7] > 0.1 and diffs[32] > 0.1
    with pytest.raises(ValueError, match="batch parity needs 32 images, got 5"):
        batch_parity(good, x[:5])


def test_compare_accuracy_against_the_rank_formulas():
    # 2 query + 4 gallery images of 2 identities in 2 cameras: the reference ranks perfectly, the
    # candidate swaps query 0's match below a wrong image (AP 1/2, R-1 miss for that query).
    q = np.array([[1, 0], [0, 1]], np.float32)
    g = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], np.float32)
    g_bad = g.copy()
    g_bad[0] = [0.2, 0.98]  # query 0's only same-identity gallery image moves away
    pids = [1, 2, 1, 9, 2, 9]
    cams = [0, 0, 1, 1, 1, 1]
    feats = {"ref": np.concatenate([q, g]), "bad": np.concatenate([q, g_bad])}
    norm = {k: v / np.linalg.norm(v, axis=1, keepdims=True) for k, v in feats.items()}
    batches = [{"images": torch.arange(6).float().view(6, 1, 1, 1), "targets": pids, "camids": cams}]

    def runner(name):
        return lambda x, camids=None: norm[name][x.view(-1).long().numpy()]

    check = compare_accuracy(runner("ref"), runner("bad"), batches, num_query=2, dataset="t")
    assert check.reference == {"R-1": 100.0, "mAP": 100.0}
    # query 0: its match (gallery 0, at cosine 0.2) ranks below 9's image (cosine 0.9): AP 1/2, R-1 miss.
    assert check.exported["R-1"] == 50.0 and check.exported["mAP"] == pytest.approx(75.0)
    assert check.map_drop == pytest.approx(25.0)
    cos = (norm["ref"] * norm["bad"]).sum(1)
    assert check.cosine_min == pytest.approx(float(cos.min()), abs=1e-6)
    assert check_map_drop(check, 30.0, "m.onnx", force=False) is None
    line = check_map_drop(check, 1.0, "m.onnx", force=False)
    assert line.startswith("m.onnx: mAP drops by 25.00 points on t (100.00 -> 75.00)") and "not written" in line
    assert isinstance(check, AccuracyCheck) and check.record()["map_drop"] == pytest.approx(25.0)


@pytest.mark.slow
def test_nncf_int8_keeps_unit_features_and_batch_parity(tiny, tmp_path):
    pytest.importorskip("nncf")
    pytest.importorskip("openvino")
    import onnxruntime as ort

    out = str(tmp_path / "m8nncf.onnx")
    assert _export(tiny, "--output", out, "--precision", "int8", "--quantizer", "nncf", "--calibration", "synthetic",
                   "--calibration-images", "40") == 0
    record = _record(out)
    assert record["conversion"]["quantizer"] == "nncf" and record["conversion"]["calibration_method"] == "nncf"
    assert "weights_sha256" in record  # the fp32 export's record survives NNCF's rewrite
    assert max(record["batch_parity"]["openvino"].values()) <= BATCH_TOLERANCE["int8"]
    x = np.random.default_rng(0).integers(0, 256, (5, 3, *SIZE)).astype(np.float32)
    f = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"images": x})[0]
    np.testing.assert_allclose(np.linalg.norm(f, axis=1), 1.0, atol=1e-4)  # the normalisation stayed float


@pytest.mark.slow
def test_int8_for_boxmot_takes_boxmots_input_and_matches_pytorch(tiny, tmp_path):
    import onnxruntime as ort

    from reid.export.writer import NormalizedFeatureModel
    from reid.inference.predictor import load_predictor
    from reid.export.pixels import boxmot_input

    out = str(tmp_path / "boxmot_int8.onnx")
    assert _export(tiny, "--output", out, "--for", "boxmot", "--input-size", "64", "32", "--precision", "int8",
                   "--calibration", "synthetic", "--calibration-images", "40") == 0
    record = _record(out)
    assert record["precision"] == "int8" and "BoxMOT" in record["input"]
    model = load_predictor(config_file=tiny["config"], weights=tiny["weights"]).model
    pixels = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (6, 3, *SIZE)).astype(np.float32))
    with torch.no_grad():
        ref = NormalizedFeatureModel(model).eval()(pixels).numpy()
    got = ort.InferenceSession(out, providers=["CPUExecutionProvider"]).run(None, {"images": boxmot_input(pixels).numpy()})[0]
    assert (ref * got).sum(1).min() > 0.95


def test_openvino_runs_static_batches_padded_to_powers_of_two(tmp_path):
    ov = pytest.importorskip("openvino")
    from reid.export.writer import export_onnx
    from reid.export.runtimes import OpenVINOBatches
    from tests.inference.test_backends import _model_and_cfg

    assert [OpenVINOBatches.bucket(n) for n in (1, 2, 3, 5, 32, 33, 64, 65, 100, 129)] == \
        [1, 2, 4, 8, 32, 64, 64, 128, 128, 192]
    model, _ = _model_and_cfg()
    path = export_onnx(model, tmp_path / "m.onnx", (64, 32))
    core = ov.Core()
    run = OpenVINOBatches(core, core.read_model(path), 1)
    x = np.random.default_rng(0).integers(0, 256, (5, 3, 64, 32)).astype(np.float32)
    together = run(x)
    alone = np.concatenate([run(x[i:i + 1]) for i in range(5)])
    assert together.shape == (5, 64) and np.abs(together - alone).max() < 1e-5  # padding changes no feature
    assert sorted(run._requests) == [1, 8]
    with torch.no_grad():
        ref = torch.nn.functional.normalize(model(torch.from_numpy(x)), dim=1).numpy()
    assert np.abs(together - ref).max() < 1e-4


def test_nncf_missing_says_what_to_install(monkeypatch, tmp_path):
    import sys

    from reid.export.precision import quantize_int8

    monkeypatch.setitem(sys.modules, "nncf", None)  # as if not installed
    with pytest.raises(ImportError, match=r"--quantizer nncf needs NNCF: pip install nncf openvino"):
        quantize_int8("in.onnx", str(tmp_path / "out.onnx"), np.zeros((4, 3, 8, 4), np.float32), quantizer="nncf")


@pytest.mark.slow
def test_layers_are_kept_float_worst_sqnr_first_only_while_they_help(tmp_path, monkeypatch):
    """The search for layers to keep in float, with the measures replaced by known ones: SQNR ranks
    the layers, and the features come 0.01 closer per layer kept float. Layers go float 1, 1, 2, 4
    at a time in SQNR order until the target is reached; the file written is the one recorded."""
    import onnxruntime as ort

    from reid.export import precision
    from reid.export.writer import export_onnx
    from tests.inference.test_backends import _model_and_cfg

    model, _ = _model_and_cfg("resnet18")
    src = export_onnx(model, tmp_path / "m.onnx", (64, 32))
    calls = []
    real_quantize = precision._quantize

    def quantize(src, dst, reader, method, exclude, quantizer="onnxruntime"):
        calls.append(list(exclude))
        real_quantize(src, dst, reader, method, exclude, quantizer)

    def sqnr(path, reader, nodes):  # node i gets 10 + i dB in reverse name order: a known ranking
        return {name: 10.0 + i for i, name in enumerate(sorted(nodes, reverse=True))}

    monkeypatch.setattr(precision, "_quantize", quantize)
    monkeypatch.setattr(precision, "_input_sqnr", sqnr)
    monkeypatch.setattr(precision, "_cosines", lambda a, b: np.full(len(a), 0.90 + 0.01 * len(calls[-1])))
    pixels = np.random.default_rng(0).integers(0, 256, (24, 3, 64, 32)).astype(np.float32)
    result = precision.quantize_int8(src, str(tmp_path / "m8.onnx"), pixels, min_cosine=0.975, log=lambda _: None)
    assert [len(c) for c in calls] == [0, 1, 2, 4, 8]  # all quantized, then 1, 1, 2, 4 more layers float
    names = sorted({n for c in calls for n in c} | set(calls[-1]), reverse=True)
    kept = [k["node"] for k in result.kept_float]
    assert kept == calls[-1] and kept == names[:8]  # worst SQNR (lowest dB) first
    assert [k["input_sqnr_db"] for k in result.kept_float] == [10.0 + i for i in range(8)]
    assert result.cosine_mean == pytest.approx(0.98) and result.quantized_nodes + 8 == 21
    # The file written is the accepted one: its 8 float convolutions take no DequantizeLinear'd weight.
    written = onnx.load(str(tmp_path / "m8.onnx"))
    float_nodes = [n for n in written.graph.node if n.name in kept]
    assert len(float_nodes) == 8 and all(not any("DequantizeLinear" in i for i in n.input) for n in float_nodes)
    ort.InferenceSession(str(tmp_path / "m8.onnx"), providers=["CPUExecutionProvider"])


@pytest.mark.slow
def test_kept_float_layers_that_do_not_help_are_quantized_again(tmp_path, monkeypatch):
    from reid.export import precision
    from reid.export.writer import export_onnx
    from tests.inference.test_backends import _model_and_cfg

    model, _ = _model_and_cfg("resnet18")
    src = export_onnx(model, tmp_path / "m.onnx", (64, 32))
    monkeypatch.setattr(precision, "_input_sqnr", lambda path, reader, nodes: {n: 1.0 for n in nodes})
    monkeypatch.setattr(precision, "_cosines", lambda a, b: np.full(len(a), 0.95))  # nothing ever helps
    lines = []
    pixels = np.random.default_rng(0).integers(0, 256, (24, 3, 64, 32)).astype(np.float32)
    result = precision.quantize_int8(src, str(tmp_path / "m8.onnx"), pixels, log=lines.append)
    assert result.kept_float == [] and result.quantized_nodes == 21
    assert any("does not bring the features closer" in line for line in lines)


@pytest.mark.slow
def test_a_backend_exports_fp16_for_the_run_when_asked(tmp_path):
    from reid.inference.predictor import Predictor
    from tests.inference.test_backends import _images, _model_and_cfg

    model, cfg = _model_and_cfg()
    fp32 = Predictor(model, cfg, batch_size=2).extract_arrays(_images())
    for runtime in _runtimes():
        half = Predictor(model, cfg, batch_size=2, backend=runtime, precision="fp16")
        f = half.extract_arrays(_images())
        assert half.precision == "fp16" and half.describe()["precision"] == "fp16"
        assert (f * fp32).sum(1).min() > 0.999 and np.abs(f - fp32).max() > 0  # fp16 arithmetic, same features


def test_int8_of_a_model_with_camera_ids_is_one_line(tmp_path):
    from reid.config import get_cfg
    from reid.export.pipeline import run_export
    from reid.export.request import ExportRequest

    class SIE(torch.nn.Module):
        uses_camids = True
        num_cameras = 3

    request = ExportRequest([str(tmp_path / "m.onnx")], precision="int8", calibration=[str(tmp_path)])
    with pytest.raises(ValueError, match=r"--precision int8 is not offered for a model that takes camera ids \(SIE\)"):
        run_export(request, SIE(), get_cfg())
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_one_calibration_image_is_refused_in_one_line_and_parity_sees_distinct_images(tmp_path):
    from reid.export.writer import export_onnx
    from reid.export.precision import quantize_int8
    from reid.export.precision_export import _parity_pixels
    from tests.inference.test_backends import _model_and_cfg

    model, _ = _model_and_cfg()
    src = export_onnx(model, tmp_path / "m.onnx", (64, 32))
    one = np.random.default_rng(0).integers(0, 256, (1, 3, 64, 32)).astype(np.float32)
    # with one crop the check would run on the crop it was calibrated on, and report 0 held out
    with pytest.raises(ValueError, match=r"int8 needs at least 2 calibration crops .*; got 1: give more crops"):
        quantize_int8(src, str(tmp_path / "m8.onnx"), one, log=lambda _: None)
    assert not (tmp_path / "m8.onnx").exists()
    two = np.concatenate([one, one[:, :, ::-1]])
    result = quantize_int8(src, str(tmp_path / "m8.onnx"), two, log=lambda _: None)
    assert result.calibration_images == 1 and result.held_out_images == 1
    checks = _parity_pixels(one, (64, 32))
    assert len(checks) == 32 and np.array_equal(checks[0], one[0])
    assert len({c.tobytes() for c in checks}) == 32  # topped up with distinct images, not copies


def test_calibration_crops_named_twice_are_read_once(tmp_path):
    from reid.config import get_cfg
    from reid.export.calibration_crops import load_calibration

    folder = _black_crops(tmp_path / "crops", n=5)
    cfg = get_cfg()
    cfg.INPUT.SIZE_TEST = list(SIZE)
    pixels, where = load_calibration(cfg, [folder, folder, os.path.join(folder, "0.jpg")], num=300)
    assert pixels.shape == (5, 3, *SIZE) and pixels.dtype == np.uint8 and where.startswith("5 of 5 images")


def test_a_calibration_source_of_one_image_is_one_line(tmp_path, write_jpeg):
    from reid.config import get_cfg
    from reid.export.calibration_crops import load_calibration

    write_jpeg(str(tmp_path / "crops" / "a.jpg"))
    with pytest.raises(ValueError, match=r"--calibration .*: 1 image; int8 needs at least 2 .*give more crops"):
        load_calibration(get_cfg(), [str(tmp_path / "crops")])
    write_jpeg(str(tmp_path / "crops" / "b.jpg"))
    pixels, _ = load_calibration(get_cfg(), [str(tmp_path / "crops")])
    assert len(pixels) == 2
    with pytest.raises(ValueError, match=r"1 image; int8 needs at least 2"):
        load_calibration(get_cfg(), [str(tmp_path / "crops")], num=1)
