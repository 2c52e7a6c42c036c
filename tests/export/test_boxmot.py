"""Exports for trackers: BoxMOT's input convention, one-line errors, and BoxMOT's own backend.

The round trip uses the tracker environment (``boxmot`` BOXMOT_VERSION from the package index in
a separate virtual environment that borrows this environment's packages (torch, onnxruntime,
...) through a ``.pth`` file; reid/tracking/tracker_env.py), runs BoxMOT's ``ReID`` runtime on the exported ONNX files with detection boxes
on a frame, and compares with this toolkit's Predictor on the same crops.
"""
from __future__ import annotations

import json
import os
import subprocess
import textwrap

import cv2
import numpy as np
import pytest
import torch

from reid.config import load_config
from reid.inference import Predictor, load_exported
from reid.export.boxmot import BoxMOTInput, check_tracker_export, export_for_boxmot
from reid.export.pixels import boxmot_input
from reid.modeling import build_model
from tests._tools import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _predictor(config, size, opts=()):
    cfg = load_config(os.path.join(ROOT, config), ["MODEL.BACKBONE.PRETRAINED", False, "MODEL.DEVICE", "cpu",
                                                   "INPUT.SIZE_TEST", list(size), *opts])
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():  # non-trivial BatchNorm statistics, so the export really carries them
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.copy_(0.1 * torch.randn(m.running_mean.shape, generator=gen))
            m.running_var.copy_(0.5 + torch.rand(m.running_var.shape, generator=gen))
    return Predictor(model, cfg)


def _crops(n, size, seed=0):
    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (n, size[0] // 8, size[1] // 8, 3)).astype(np.uint8)
    return [cv2.resize(c, (size[1], size[0]), interpolation=cv2.INTER_LINEAR) for c in coarse]


@pytest.mark.slow
def test_boxmot_export_takes_boxmots_input_and_gives_the_predictors_features(tmp_path):
    pytest.importorskip("onnxruntime")
    size = (64, 32)
    predictor = _predictor("configs/MSMT17/osnet_x0_25_torchreid.yml", size)
    path = export_for_boxmot(predictor.model, tmp_path / "osnet_x0_25.onnx", size)
    crops = _crops(5, size)
    ours = predictor.extract_arrays(crops)
    pixels = torch.from_numpy(np.stack(crops)).permute(0, 3, 1, 2)
    session = __import__("onnxruntime").InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = session.get_inputs()[0]
    assert inp.shape[1:] == [3, 64, 32] and not isinstance(inp.shape[0], int)  # fixed H x W, free batch
    theirs = session.run(None, {inp.name: boxmot_input(pixels).numpy()})[0]
    assert theirs.shape == (5, 512) and np.abs(theirs - ours).max() < 1e-5
    meta = json.loads(dict((p.key, p.value) for p in __import__("onnx").load(path).metadata_props)["circle_reid"])
    assert "ImageNet mean" in meta["input"]


def test_boxmot_input_inverts_to_the_raw_pixels():
    pixels = torch.randint(0, 256, (2, 3, 4, 3)).float()
    seen = []
    BoxMOTInput(lambda x: seen.append(x) or x)(boxmot_input(pixels))
    assert torch.allclose(seen[0], pixels, atol=1e-4)


@pytest.mark.parametrize("outputs,size,fragment", [
    (["m.pt2"], (256, 128), "name m.pt2 *.onnx"),
    (["m.onnx"], None, "needs a fixed input size"),
    (["m.onnx"], (0, 128), "pass --input-size H W (people: 256 128)"),
    # BoxMOT's file-name conventions: 0.5 / 0.5 pixels for "*clip*", 256x256 crops for vehicles.
    (["out/clip_market.onnx"], (256, 128), "contains 'clip' with mean/std 0.5"),
    (["veri_sbs.onnx"], (256, 128), "resizes the crops of a file whose name contains 'veri'"),
    (["my_vehicleid.onnx"], (256, 128), "export at --input-size 256 256"),
])
def test_tracker_export_errors_say_what_to_do(outputs, size, fragment):
    with pytest.raises(ValueError) as err:
        check_tracker_export("boxmot", outputs, size)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_vehicle_names_pass_at_256x256():
    assert check_tracker_export("boxmot", ["veri_sbs.onnx"], (256, 256)) == (256, 256)


def test_export_tool_refuses_an_unknown_tracker(capsys):
    with pytest.raises(SystemExit):
        load_tool("export").main(["--weights", "x.pth", "--output", "m.onnx", "--for", "deepsort"])
    err = capsys.readouterr().err
    assert "invalid choice: 'deepsort'" in err and "boxmot" in err


# --------------------------------------------------------------------------- BoxMOT's own backend
BOXMOT_SIDE = textwrap.dedent(
    """
    import json, sys
    import cv2, numpy as np
    from boxmot.reid.core.runtime import ReID

    model, frame, boxes, out = sys.argv[1:5]
    reid = ReID(model, device="cpu")
    feats = reid(cv2.imread(frame), boxes=np.array(json.load(open(boxes)), dtype=np.float32))
    np.save(out, np.asarray(feats, dtype=np.float32))
    print("input shape", reid.model.input_shape)
    """
)


@pytest.fixture(scope="module")
def boxmot_python(tracker_python):
    """A python with boxmot (BOXMOT_VERSION) from the package index: the tracker environment."""
    return tracker_python


@pytest.mark.slow
@pytest.mark.parametrize("config,opts", [
    ("configs/MSMT17/osnet_x0_25_circle.yml", ()),
    ("configs/Market1501/bot_resnet50.yml", ()),
], ids=["osnet_x0_25-circle", "bot_resnet50"])
def test_boxmots_backend_gives_the_predictors_features(config, opts, boxmot_python, tmp_path, capsys):
    size = (256, 128)
    predictor = _predictor(config, size, opts)
    run = tmp_path / "run"
    run.mkdir()
    cfg = predictor.cfg.clone()
    torch.save({"model": predictor.model.state_dict(), "cfg": cfg.dump()}, run / "model_final.pth")
    model_file = tmp_path / f"{os.path.basename(config)[:-4]}.onnx"
    rc = load_tool("export").main(["--weights", str(run / "model_final.pth"), "--output", str(model_file),
                                   "--for", "boxmot", "--device", "cpu"])
    assert rc == 0, capsys.readouterr().err
    # Three detections on one BGR frame, each exactly the model's input size (no resize on either side).
    crops = _crops(3, size, seed=4)
    frame = np.full((size[0] + 20, 3 * size[1] + 40, 3), 90, np.uint8)
    boxes = []
    for i, crop in enumerate(crops):
        x, y = 10 + i * (size[1] + 10), 10
        frame[y:y + size[0], x:x + size[1]] = crop[:, :, ::-1]  # RGB crop into the BGR frame
        boxes.append([x, y, x + size[1], y + size[0]])
    cv2.imwrite(str(tmp_path / "frame.png"), frame)
    (tmp_path / "boxes.json").write_text(json.dumps(boxes))
    (tmp_path / "side.py").write_text(BOXMOT_SIDE)
    proc = subprocess.run([boxmot_python, str(tmp_path / "side.py"), str(model_file), str(tmp_path / "frame.png"),
                           str(tmp_path / "boxes.json"), str(tmp_path / "feats.npy")],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    theirs = np.load(tmp_path / "feats.npy")
    ours = predictor.extract_arrays(crops)
    assert theirs.shape == ours.shape == (3, predictor.model.feature_dim)
    assert np.abs(theirs - ours).max() < 1e-4
    assert load_exported(model_file).input_size == size
