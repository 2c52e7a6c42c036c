"""Clip files of video models (tools/export.py --clips): frame encoder + temporal pooling + neck in one
graph, clips [batch, frames, 3, H, W] with both axes dynamic, checked against model(clips)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

onnx = pytest.importorskip("onnx", reason="clip export tests need onnx (pip install 'circle-reid[export]')")
ort = pytest.importorskip("onnxruntime", reason="clip export tests need onnxruntime (pip install 'circle-reid[export]')")
pytest.importorskip("onnxscript", reason="ONNX export needs onnxscript (pip install 'circle-reid[export]')")

from reid.config import get_cfg, save_config  # noqa: E402
from reid.export.clips import CLIP_CHECK_SHAPES, check_clip_model  # noqa: E402
from reid.export.exported import load_exported  # noqa: E402
from reid.export.files import METADATA_KEY  # noqa: E402
from reid.export.pipeline import run_export  # noqa: E402
from reid.export.request import ExportRequest  # noqa: E402
from reid.export.runtimes import OnnxFile, onnx_runner  # noqa: E402
from reid.export.writer import ExportMismatchError, compare_with_export, export_model  # noqa: E402
from reid.modeling import build_model  # noqa: E402
from tests._tools import load_tool  # noqa: E402

pytestmark = pytest.mark.slow
SIZE = (64, 32)
TEMPORALS = ("avg", "max", "attention")


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _cfg(temporal: str = "avg"):
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.VIDEO.TEMPORAL = temporal
    cfg.INPUT.SIZE_TEST = list(SIZE)
    cfg.MODEL.DEVICE = "cpu"
    cfg.DATASETS.NAMES = ["synthetic_video"]
    cfg.DATASETS.TESTS = ["synthetic_video"]
    return cfg


def _video_model(temporal: str, seed: int = 0) -> torch.nn.Module:
    """A random video Baseline whose BatchNorm statistics and attention scores are not the fresh ones
    (a fresh attention layer scores every frame 0, which is avg: the softmax would go untested)."""
    torch.manual_seed(seed)
    model = build_model(_cfg(temporal))
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
        if temporal == "attention":
            model.temporal.score.weight.copy_(torch.randn(model.temporal.score.weight.shape, generator=gen) * 0.5)
    return model.eval()


def _clips(batch: int, frames: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (batch, frames, 3, *SIZE), generator=gen).float()


def _expected(model: torch.nn.Module, clips: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return F.normalize(model(clips), dim=1).numpy()


@pytest.fixture(scope="module", params=TEMPORALS)
def exported(request, tmp_path_factory):
    """(temporal, model, its clip ONNX file), written once per pooling."""
    model = _video_model(request.param)
    path = str(tmp_path_factory.mktemp(f"clips_{request.param}") / "video.onnx")
    model.train()  # export must use eval mode without changing the caller's model
    export_model(model, path, SIZE, clips=True)
    assert model.training
    return request.param, model.eval(), path


def test_onnxruntime_runs_clips_of_any_length_as_the_model_does(exported):
    temporal, model, path = exported
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["images"]
    for i, (batch, frames) in enumerate([(1, 1), (4, 1), (1, 3), (4, 3), (1, 7), (3, 7)]):
        clips = _clips(batch, frames, seed=10 + i)
        got = session.run(["features"], {"images": clips.numpy()})[0]
        expected = _expected(model, clips)
        assert got.shape == (batch, model.feature_dim)
        np.testing.assert_allclose(got, expected, atol=1e-4, err_msg=f"{temporal}: {batch} clips of {frames} frames")
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_the_file_pools_the_frames_as_its_temporal_module_does(exported):
    temporal, model, path = exported
    clips = _clips(2, 5, seed=3)
    with torch.no_grad():
        frames = model.frame_features(clips.flatten(0, 1)).view(2, 5, -1)
        if temporal == "avg":
            pooled = frames.mean(dim=1)
        elif temporal == "max":
            pooled = frames.amax(dim=1)
        else:  # a softmax over the frames, and the weights really are not uniform
            weights = torch.softmax(model.temporal.score(frames).squeeze(-1), dim=1)
            assert float((weights.max(dim=1).values - weights.min(dim=1).values).min()) > 1e-3
            pooled = (weights.unsqueeze(-1) * frames).sum(dim=1)
        expected = F.normalize(model.embed_pooled(pooled), dim=1).numpy()
        mean_pooled = F.normalize(model.embed_pooled(frames.mean(dim=1)), dim=1).numpy()
    got = load_exported(path, clips=True)(clips)
    np.testing.assert_allclose(got, expected, atol=1e-4)
    if temporal != "avg":  # the pooling in the file is not just a mean over the frames
        assert np.abs(got - mean_pooled).max() > 1e-3


def test_the_file_names_both_axes_and_records_that_it_takes_clips(exported):
    temporal, model, path = exported
    proto = onnx.load(path)
    (inp,), (out,) = proto.graph.input, proto.graph.output
    dims = [d.dim_param or d.dim_value for d in inp.type.tensor_type.shape.dim]
    assert (inp.name, dims) == ("images", ["batch", "frames", 3, *SIZE])
    assert [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim] == ["batch", model.feature_dim]
    record = json.loads({p.key: p.value for p in proto.metadata_props}[METADATA_KEY])
    assert record["clips"] is True and record["frames_axis"] == 1 and record["temporal"] == temporal
    assert record["input"].startswith(f"images: float32 [batch, frames, 3, {SIZE[0]}, {SIZE[1]}], RGB")
    assert "no frame mask" in record["input"] and record["input_size"] == list(SIZE)
    opened = load_exported(path, clips=True)
    assert opened.clips and opened.input_size == SIZE and opened.feature_dim == model.feature_dim
    assert opened.record["temporal"] == temporal and opened.identity is not None


def test_the_parity_check_covers_several_frame_counts_and_batch_sizes(exported):
    _, model, path = exported
    check = compare_with_export(model, path, SIZE, clips=True)
    assert check.passed(1e-4), str(check)
    assert len(set(check.frames)) >= 2 and {1, 5} <= set(check.frames)
    assert len(set(check.batch_sizes)) >= 2 and list(zip(check.batch_sizes, check.frames)) == list(CLIP_CHECK_SHAPES)
    assert "clips x frames 1x1, 7x1, 1x5, 7x5, 32x2" in str(check)
    # Another model's file: the same check fails (by far).
    other = compare_with_export(_video_model(exported[0], seed=5), path, SIZE, clips=True)
    assert not other.passed(1e-4)


def test_loaders_of_images_refuse_a_clip_file_in_one_line(exported, tmp_path):
    _, model, path = exported
    for refuse in (lambda: load_exported(path), lambda: onnx_runner(path)):
        with pytest.raises(ValueError) as e:
            refuse()
        message = str(e.value)
        assert "\n" not in message and path in message and "takes clips [batch, frames, 3, H, W]" in message
    assert OnnxFile(path).clips
    # Opened for clips, images are still refused (one image is a clip of one frame: x[:, None]).
    opened = load_exported(path, clips=True)
    with pytest.raises(ValueError, match=r"takes clips \[batch, frames, 3, 64, 32\].*got shape \(2, 3, 64, 32\)"):
        opened(_clips(2, 1, seed=0)[:, 0])
    with pytest.raises(ValueError, match="expects frames of 64x32"):
        opened(torch.zeros(1, 2, 3, 32, 32))
    np.testing.assert_allclose(opened(_clips(2, 1, seed=0).numpy().astype(np.uint8)),
                               _expected(model, _clips(2, 1, seed=0)), atol=1e-4)
    # And the inference tools, which feed images (extraction, tracking, search), refuse it when they open it.
    from reid.inference import Predictor
    from reid.inference.backends import file_runtime

    for open_for_images in (lambda: file_runtime(path), lambda: Predictor.from_exported(path),
                            lambda: Predictor(model, _cfg(), backend="onnxruntime", exported=path)):
        with pytest.raises(ValueError, match="takes clips") as e:
            open_for_images()
        assert "\n" not in str(e.value) and path in str(e.value)


def test_an_image_file_is_not_opened_as_clips(tmp_path):
    model = _video_model("avg")
    path = export_model(model, tmp_path / "frames.onnx", SIZE)  # a video model's single-frame file
    opened = load_exported(path)
    assert not opened.clips and "clips" not in opened.record
    with pytest.raises(ValueError, match="takes images \\[batch, 3, H, W\\], not clips"):
        load_exported(path, clips=True)
    # Each frame is a clip of one frame: the file of single frames gives what the clip file gives at T=1.
    clips = _clips(3, 1, seed=2)
    np.testing.assert_allclose(opened(clips[:, 0]), _expected(model, clips), atol=1e-4)
    assert load_exported(path, clips=None).clips is False


def test_a_clip_program_pt2_runs_clips_too(tmp_path):
    model = _video_model("attention", seed=2)
    path = export_model(model, tmp_path / "video.pt2", SIZE, clips=True)
    opened = load_exported(path, clips=True)
    assert opened.clips and opened.input_size == SIZE
    for frames in (1, 4):
        clips = _clips(2, frames, seed=frames)
        np.testing.assert_allclose(opened(clips), _expected(model, clips), atol=1e-5)
    with pytest.raises(ValueError, match="takes clips"):
        load_exported(path)


def test_clip_requests_refuse_image_only_flags_and_models_without_pooling():
    for flags, named in (({"precision": "fp16"}, "--precision fp16"), ({"tracker": "boxmot"}, "--for boxmot"),
                         ({"check_on": ["q", "g"]}, "--check-on")):
        with pytest.raises(ValueError, match=f"--clips writes fp32 files.*{named}"):
            ExportRequest(["video.onnx"], clips=True, **flags)

    class Frames(torch.nn.Module):  # an image model: no temporal pooling
        pass

    with pytest.raises(ValueError, match="Frames does not"):
        check_clip_model(Frames())
    with pytest.raises(ValueError, match="Frames does not"):
        ExportRequest(["video.onnx"], clips=True).check_model(Frames())


def test_a_failed_parity_check_fails_the_export_in_one_line(tmp_path, monkeypatch):
    import reid.export.pipeline as pipeline

    model, other = _video_model("max"), _video_model("max", seed=7)
    written = pipeline.export_model
    # The file written holds other weights than the model checked against it: parity must fail.
    monkeypatch.setattr(pipeline, "export_model", lambda _m, *a, **k: written(other, *a, **k))
    lines = []
    out = str(tmp_path / "video.onnx")
    with pytest.raises(ExportMismatchError) as e:
        run_export(ExportRequest([out], clips=True), model, _cfg("max"), log=lines.append)
    assert "\n" not in str(e.value) and out in str(e.value) and "differ from PyTorch" in str(e.value)
    assert any("clips x frames" in line and "FAILED" in line for line in lines)


def _saved_run(temporal: str, folder) -> torch.nn.Module:
    cfg = _cfg(temporal)
    cfg.MODEL.HEADS.NUM_CLASSES = 3  # a trained model has a head; export drops it
    model = _video_model(temporal, seed=1)
    folder.mkdir()
    save_config(cfg, str(folder / "config.yaml"))
    torch.save({"model": model.state_dict(), "cfg": cfg.dump()}, folder / "model_final.pth")
    return model


def test_export_tool_writes_and_checks_clip_files(tmp_path, capsys):
    export_tool = load_tool("export")
    model = _saved_run("attention", tmp_path / "run")
    outs = [str(tmp_path / "video.onnx"), str(tmp_path / "video.pt2")]
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", *outs, "--clips"]) == 0
    text = capsys.readouterr().out
    assert f"[batch, frames, 3, {SIZE[0]}, {SIZE[1]}]" in text and "pooled by attention" in text
    assert text.count("clips x frames 1x1, 7x1, 1x5, 7x5, 32x2") == 2 and text.count("-> OK") == 2
    clips = _clips(2, 3, seed=4)
    for out in outs:
        assert load_exported(out, clips=True).clips
        np.testing.assert_allclose(load_exported(out, clips=True)(clips), _expected(model, clips), atol=1e-4)
    # Over the tolerance: exit code 1, one line on stderr.
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", outs[0], "--clips", "--tol", "-1"]) == 1
    captured = capsys.readouterr()
    assert "FAILED (tolerance -1)" in captured.out and captured.err.count("\n") == 1
    # Flags for image files: refused before the model loads.
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", outs[0], "--clips", "--precision", "fp16"]) == 1
    assert "--clips writes fp32 files" in capsys.readouterr().err
    # Without --clips a video model's file takes single frames, and the tool says so.
    frames_out = str(tmp_path / "frames.onnx")
    assert export_tool.main(["--run", str(tmp_path / "run"), "--output", frames_out]) == 0
    assert "--clips writes files that pool a clip's frames" in capsys.readouterr().out
    assert not load_exported(frames_out).clips


def test_a_video_model_with_sie_exports_one_camera_per_clip(tmp_path, monkeypatch):
    from reid.modeling.backbones import VIT_SPECS
    from reid.modeling.backbones.vit import ViTSpec

    cfg = _cfg("attention")  # a Baseline on a tiny ViT (width 32, 2 blocks) with SIE over 3 cameras
    cfg.MODEL.BACKBONE.NAME = "vit_base_transreid"
    cfg.MODEL.TRANSREID.STRIDE_SIZE = [12, 12]
    cfg.MODEL.TRANSREID.SIE_CAMERA = True
    cfg.MODEL.TRANSREID.NUM_CAMERAS = 3
    cfg.INPUT.SIZE_TRAIN = list(SIZE)
    monkeypatch.setitem(VIT_SPECS, "vit_base_transreid", ViTSpec(32, 2, 2))
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    with torch.no_grad():  # camera embeddings and attention scores far from 0, so that both matter
        model.backbone.sie_embed.normal_(std=0.5)
        model.temporal.score.weight.normal_(std=0.5)
    path = export_model(model, tmp_path / "sie_video.onnx", SIZE, clips=True)
    opened = load_exported(path, clips=True)
    assert opened.needs_camids and opened.num_cameras == 3 and opened.input_names == ("images", "camids")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for batch, frames in ((1, 1), (3, 4)):
        clips = _clips(batch, frames, seed=frames)
        camids = torch.arange(batch) % 3
        with torch.no_grad():
            expected = F.normalize(model(clips, camids=camids), dim=1).numpy()
        got = session.run(["features"], {"images": clips.numpy(), "camids": camids.numpy()})[0]
        np.testing.assert_allclose(got, expected, atol=1e-4)
        np.testing.assert_allclose(opened(clips, camids.tolist()), expected, atol=1e-4)
    clips = _clips(2, 3, seed=0)
    assert np.abs(opened(clips, [0, 0]) - opened(clips, [1, 0]))[0].max() > 1e-3  # the camera reaches the feature
    check = compare_with_export(model, path, SIZE, clips=True)
    assert check.passed(1e-4) and check.camids and "random clips and camera ids" in str(check)
