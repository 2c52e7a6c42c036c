"""Exports of CLIP-ReID models (tiny widths): .pt2 and ONNX with SIE's camera ids as the second
input, the RN50 without, and BoxMOT's file for a model without SIE; each checked against PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("open_clip", reason="CLIP-ReID models need open_clip (pip install 'circle-reid[clip]')")

from reid.config import get_cfg  # noqa: E402
from reid.export.writer import compare_with_export, export_onnx, export_pt2# noqa: E402
from reid.export.exported import load_exported
from reid.export.boxmot import export_for_boxmot  # noqa: E402
from reid.export.pixels import boxmot_input  # noqa: E402
from reid.modeling import build_model  # noqa: E402
from reid.modeling.backbones import clip as clip_module  # noqa: E402

SIZE = (64, 32)
CAMERAS = 3


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _model(name: str, sie: bool):
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = "clipreid"
    cfg.MODEL.BACKBONE.NAME = name
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.CLIP.STRIDE_SIZE = [12, 12]
    cfg.MODEL.CLIP.SIE_CAMERA = sie
    cfg.MODEL.CLIP.NUM_CAMERAS = CAMERAS if sie else 0
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TRAIN = list(SIZE)
    cfg.INPUT.SIZE_TEST = list(SIZE)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(clip_module.CLIP_SPECS, "clip_vit_b16", clip_module.ClipSpec("vit", 32, (2,), 2, 16, 16))
        mp.setitem(clip_module.CLIP_SPECS, "clip_rn50", clip_module.ClipSpec("resnet", 8, (1, 1, 1, 1), 2, 16))
        torch.manual_seed(0)
        model = build_model(cfg).eval()
    if sie:
        with torch.no_grad():
            model.backbone.sie_embed.normal_(std=0.5)  # far from 0: the camera ids matter
    return model


def _pixels(batch: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (batch, 3, *SIZE), generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["pt2", "onnx"])
def test_the_vit_with_sie_exports_with_camera_ids_as_its_second_input(fmt, tmp_path):
    if fmt == "onnx":
        for name in ("onnx", "onnxscript", "onnxruntime"):
            pytest.importorskip(name)
    model = _model("clip_vit_b16", sie=True)
    path = (export_pt2 if fmt == "pt2" else export_onnx)(model, tmp_path / f"clipreid.{fmt}", SIZE)
    run = load_exported(path)
    assert run.needs_camids and run.num_cameras == CAMERAS
    x, cams = _pixels(5, 1), torch.tensor([0, 2, 1, 2, 0])
    with torch.no_grad():
        want = torch.nn.functional.normalize(model(x, camids=cams), dim=1).numpy()
    assert np.abs(run(x, cams) - want).max() < 1e-4
    other = run(x, (cams + 1) % CAMERAS)
    assert np.abs(other - want).max() > 1e-2  # the input is used
    check = compare_with_export(model, path, SIZE)
    assert check.camids and check.max_abs_diff < 1e-4


@pytest.mark.slow
def test_the_rn50_exports_and_boxmots_file_gives_the_models_features(tmp_path):
    for name in ("onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(name)
    model = _model("clip_rn50", sie=False)
    check = compare_with_export(model, export_pt2(model, tmp_path / "rn50.pt2", SIZE), SIZE)
    assert not check.camids and check.max_abs_diff < 1e-4
    path = export_for_boxmot(model, tmp_path / "rn50_reid.onnx", SIZE)
    import onnxruntime as ort

    x = _pixels(3, 2)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: boxmot_input(x).numpy()})[0]
    with torch.no_grad():
        want = torch.nn.functional.normalize(model(x), dim=1).numpy()
    assert np.abs(got - want).max() < 1e-4
    with pytest.raises(ValueError, match="uses camera ids"):
        export_for_boxmot(_model("clip_vit_b16", sie=True), tmp_path / "vit.onnx", SIZE)
