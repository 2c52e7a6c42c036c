"""Exports of a model with SIE (camera embedding): a second input ``camids`` on the free batch axis,
in both formats, through load_exported, the raw runtimes, the CPU backends and the Predictor."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.config import get_cfg
from reid.inference import Predictor
from reid.export.writer import compare_with_export, export_onnx, export_pt2
from reid.export.exported import load_exported
from reid.modeling import build_model
from reid.modeling.backbones import VIT_SPECS
from reid.modeling.backbones.vit import ViTSpec

SIZE = (64, 32)
CAMERAS = 3
ONNX_MISSING = "ONNX export tests need onnx, onnxscript and onnxruntime (pip install 'circle-reid[export]')"


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _need_onnx():
    for name in ("onnx", "onnxscript"):
        pytest.importorskip(name, reason=ONNX_MISSING)
    return pytest.importorskip("onnxruntime", reason=ONNX_MISSING)


def sie_cfg(cameras: int = CAMERAS):
    """TransReID's layout (SIE + JPM, stride 12) at 64x32."""
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = "transreid"
    cfg.MODEL.BACKBONE.NAME = "vit_base_transreid"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.TRANSREID.STRIDE_SIZE = [12, 12]
    cfg.MODEL.TRANSREID.SIE_CAMERA = True
    cfg.MODEL.TRANSREID.NUM_CAMERAS = cameras
    cfg.MODEL.TRANSREID.JPM_PARTS = 2
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TRAIN = list(SIZE)
    cfg.INPUT.SIZE_TEST = list(SIZE)
    return cfg


@pytest.fixture(scope="module")
def model():
    """A tiny ViT (width 32, 2 blocks) with SIE; its camera embeddings far from 0 so that ids matter."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(VIT_SPECS, "vit_base_transreid", ViTSpec(32, 2, 2))
        torch.manual_seed(0)
        m = build_model(sie_cfg()).eval()
    with torch.no_grad():
        m.backbone.sie_embed.normal_(std=0.5)
    assert m.uses_camids and m.num_cameras == CAMERAS
    return m


@pytest.fixture(scope="module")
def exported(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("sie")
    paths = {"pt2": export_pt2(model, folder / "sie.pt2", SIZE)}
    try:
        paths["onnx"] = export_onnx(model, folder / "sie.onnx", SIZE)
    except ImportError:
        pass
    return paths


def _inputs(batch: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, 3, *SIZE), generator=gen).float(), torch.randint(0, CAMERAS, (batch,), generator=gen)


def _eager(model, x, camids) -> np.ndarray:
    with torch.no_grad():
        return F.normalize(model(x, camids=camids), dim=1).numpy()


@pytest.mark.slow
def test_both_formats_give_pytorchs_features_for_given_camera_ids_at_two_batch_sizes(model, exported):
    for fmt, path in exported.items():
        run = load_exported(path)
        assert run.needs_camids and run.input_names == ("images", "camids") and run.num_cameras == CAMERAS
        for batch in (1, 7):  # exported with a batch of 2: both axes are free
            x, camids = _inputs(batch, seed=batch)
            expected = _eager(model, x, camids)
            assert np.abs(run(x, camids) - expected).max() < 1e-4, fmt
            assert np.abs(run(x.numpy().astype(np.uint8), camids.numpy().astype(np.int32)) - expected).max() < 1e-4
        check = compare_with_export(model, path, SIZE)  # tools/export.py's check: valid random camera ids
        assert check.camids and check.batch_sizes == (1, 7, 32) and check.max_abs_diff < 1e-4
        assert "random inputs and camera ids, batch sizes 1, 7, 32" in str(check)


@pytest.mark.slow
def test_the_raw_runtimes_take_images_and_camids(model, exported):
    x, camids = _inputs(7, seed=3)
    expected = _eager(model, x, camids)
    with torch.no_grad():  # plain torch, no circle-reid code
        got = torch.export.load(exported["pt2"]).module()(x, camids).numpy()
    assert np.abs(got - expected).max() < 1e-4
    ort = _need_onnx()
    session = ort.InferenceSession(exported["onnx"], providers=["CPUExecutionProvider"])
    images, cams = session.get_inputs()
    assert (images.name, images.shape, images.type) == ("images", ["batch", 3, *SIZE], "tensor(float)")
    assert (cams.name, cams.shape, cams.type) == ("camids", ["batch"], "tensor(int64)")
    got = session.run(None, {"images": x.numpy(), "camids": camids.numpy()})[0]
    assert np.abs(got - expected).max() < 1e-4


@pytest.mark.slow
def test_other_camera_ids_give_other_features(model, exported):
    x, _ = _inputs(4, seed=5)
    camids, moved = torch.tensor([0, 1, 2, 0]), torch.tensor([0, 2, 2, 1])  # rows 1 and 3 change camera
    for path in exported.values():
        run = load_exported(path)
        a, b = run(x, camids), run(x, moved)
        np.testing.assert_allclose(a[[0, 2]], b[[0, 2]], atol=1e-6)
        assert np.abs(a[[1, 3]] - b[[1, 3]]).max(axis=1).min() > 1e-2


@pytest.mark.slow
def test_files_record_their_inputs_and_camera_count(model, exported):
    extra = {"circle_reid.json": ""}
    torch.export.load(exported["pt2"], extra_files=extra)
    meta = json.loads(extra["circle_reid.json"])
    assert meta["input_names"] == ["images", "camids"] and meta["num_cameras"] == CAMERAS
    assert meta["camids"] == "camids: int64 [batch], each image's camera id 0..2 (SIE)"
    assert meta["input_size"] == list(SIZE) and f"[batch, {model.feature_dim}]" in meta["output"]
    if "onnx" in exported:
        onnx = pytest.importorskip("onnx", reason=ONNX_MISSING)
        props = {p.key: p.value for p in onnx.load(exported["onnx"]).metadata_props}
        assert json.loads(props["circle_reid"]) == meta


@pytest.mark.slow
def test_missing_or_bad_camera_ids_are_refused_in_one_line(exported):
    x, _ = _inputs(2, seed=0)
    for path in exported.values():
        run = load_exported(path)
        for camids, error, fragment in ((None, ValueError, "uses camera ids (SIE, 3 cameras)"),
                                        ([0, 3], ValueError, "outside the cameras"),
                                        ([-1, 0], ValueError, "outside the cameras"),  # ONNX would read camera 2
                                        ([0], ValueError, "2 images but 1 camera ids"),
                                        ([0.0, 1.0], TypeError, "must be integers")):
            with pytest.raises(error) as info:
                run(x, camids)
            message = str(info.value)
            assert fragment in message and path in message and "\n" not in message


@pytest.mark.slow
def test_cpu_backends_and_the_predictor_pass_camera_ids(model, exported, tmp_path):
    _need_onnx()
    cfg = sie_cfg()
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (90, 40, 3), dtype=np.uint8) for _ in range(5)]
    camids = [0, 1, 2, 1, 0]
    reference = Predictor(model, cfg, batch_size=2).extract_arrays(images, camids=camids)
    backends = ["onnxruntime"]
    try:
        import openvino  # noqa: F401  (not part of the extras)
        backends.append("openvino")
    except ImportError:
        pass
    for backend in backends:
        for given in (None, exported["onnx"]):  # exported when the predictor is built, or the file
            predictor = Predictor(model, cfg, batch_size=3, backend=backend, exported=given)
            assert predictor.uses_camids and predictor.num_cameras == CAMERAS
            assert np.abs(predictor.extract_arrays(images, camids=camids) - reference).max() < 1e-5, backend
            with pytest.raises(ValueError, match="list file of 'path pid camid' lines") as info:
                predictor.extract_arrays(images)
            assert "\n" not in str(info.value)
            with pytest.raises(ValueError, match=r"Camera id 3 \(at image 3\) is outside the cameras this model "
                                                 r"knows \(0..2\)"):
                predictor.extract_arrays(images, camids=[0, 1, 2, 3, 0])
    # An images-only export of another model is refused for this one.
    other_cfg = sie_cfg()
    other_cfg.MODEL.TRANSREID.SIE_CAMERA = False
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(VIT_SPECS, "vit_base_transreid", ViTSpec(32, 2, 2))
        other = build_model(other_cfg).eval()
    plain = export_onnx(other, tmp_path / "plain.onnx", SIZE)
    with pytest.raises(ValueError, match="plain.onnx takes images only, but this model uses camera ids"):
        Predictor(model, cfg, backend="onnxruntime", exported=plain)
    with pytest.raises(ValueError, match=r"sie.onnx takes camera ids \(camids\) and this model does not"):
        Predictor(other, other_cfg, backend="onnxruntime", exported=exported["onnx"])
    # An export of a model with another camera count, read by every backend from the file's record.
    more_cfg = sie_cfg(CAMERAS + 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(VIT_SPECS, "vit_base_transreid", ViTSpec(32, 2, 2))
        more = build_model(more_cfg).eval()
    for backend in backends:
        with pytest.raises(ValueError, match=f"sie.onnx was exported from a model with {CAMERAS} cameras "
                                             fr"\(SIE\), this model has {CAMERAS + 1}"):
            Predictor(more, more_cfg, backend=backend, exported=exported["onnx"])
