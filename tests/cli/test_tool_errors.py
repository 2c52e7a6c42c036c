"""Every program in tools/ answers a user's mistake with one ``error:`` line and exit code 1
(argparse's own usage errors: exit code 2), never a traceback; run as a user runs them."""
import os
import subprocess
import sys

import pytest
import torch

from reid.config import get_cfg
from reid.engine.checkpoint_files import save_checkpoint
from reid.inference import load_gallery
from reid.modeling import build_model

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tool(name, *args, cwd=None):
    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, os.path.join(ROOT, "tools", f"{name}.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def assert_one_line_error(proc, *needles, code=1):
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:") or ": error:" in line]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A small model's checkpoint with its config: all the model tools need."""
    folder = tmp_path_factory.mktemp("model")
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.NUM_CLASSES = 0
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TEST = [32, 16]
    torch.manual_seed(0)
    path = str(folder / "model_final.pth")
    save_checkpoint(path, model=build_model(cfg).state_dict(), cfg=cfg.dump())
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A folder with two good JPEGs and the empty one a user met (``touch broken.jpg``)."""
    import cv2
    import numpy as np

    folder = tmp_path_factory.mktemp("images")
    for i in range(2):
        cv2.imwrite(str(folder / f"good{i}.jpg"), np.full((64, 32, 3), 60 * i, np.uint8))
    (folder / "broken.jpg").write_bytes(b"")
    return folder


@pytest.mark.slow
def test_every_tool_reports_a_bad_input_in_one_line(tmp_path, checkpoint, images):
    missing = tmp_path / "missing"
    assert_one_line_error(tool("train", "--config-file", f"{missing}.yml"), "missing.yml")
    assert_one_line_error(tool("test", "--config-file", os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml"),
                               "MODEL.WEIGHTS", f"{missing}.pth", "OUTPUT_DIR", tmp_path / "t"), "missing.pth")
    assert_one_line_error(tool("extract", "--weights", f"{missing}.pth", "--input", images, "--output",
                               tmp_path / "g.npz"), "missing.pth")
    assert_one_line_error(tool("search", "--weights", checkpoint, "--gallery", f"{missing}.npz", "--query", images),
                          "missing.npz")
    assert_one_line_error(tool("export", "--weights", checkpoint, "--output", tmp_path / "model.xyz"), "model.xyz")
    assert_one_line_error(tool("visualize", f"{missing}.npz", "-o", tmp_path / "v"), "missing.npz")
    assert_one_line_error(tool("plot", "cmc", "--features", f"{missing}.npz", "-o", tmp_path / "c.png"), "missing.npz")
    assert_one_line_error(tool("plot", "cmc", "--bins", "3"), "unrecognized arguments", code=2)
    convert = os.path.join(ROOT, "tools", "convert_weights.py")
    if os.path.exists(convert):
        assert_one_line_error(tool("convert_weights", f"{missing}.pth", tmp_path / "out.pth", "--config-file",
                                   os.path.join(ROOT, "configs", "Demo", "resnet18_circle.yml")), "missing.pth")


@pytest.mark.slow
def test_extract_names_an_empty_image_and_skips_it_when_asked(tmp_path, checkpoint, images):
    # Two loader workers: the error crosses a process boundary and must still be one line.
    out = tmp_path / "gallery.npz"
    proc = tool("extract", "--weights", checkpoint, "--input", images, "--output", out, "--num-workers", "2")
    assert_one_line_error(proc, "broken.jpg", "--skip-corrupt")
    assert not out.exists()
    for flag in (["--skip-corrupt"], ["DATASETS.SKIP_CORRUPT", "True"]):
        proc = tool("extract", "--weights", checkpoint, "--input", images, "--output", out, "--quiet", *flag)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert f"skipped unreadable image: {images / 'broken.jpg'}" in proc.stdout
        assert "skipped 1 unreadable of 3 images" in proc.stdout
        assert sorted(os.path.basename(p) for p in load_gallery(str(out)).paths) == ["good0.jpg", "good1.jpg"]
