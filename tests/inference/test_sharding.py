"""Extraction under torchrun: disjoint contiguous shards, one gallery in the single-process order."""
from __future__ import annotations

import os
import subprocess
import sys

import cv2
import numpy as np
import pytest
import torch
import torch.distributed as dist

from reid.config import load_config
from reid.utils.process import shard_bounds
from reid.modeling import build_model
from tests._tools import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _torchrun(tool, args):
    """``torchrun --standalone --nproc_per_node 2 tools/<tool>.py args`` (gloo on the CPU); asserts success."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           os.path.join(ROOT, "tools", f"{tool}.py"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("total,world", [(10, 3), (2, 4), (0, 2), (7, 1)])
def test_shards_are_contiguous_disjoint_and_cover_everything(total, world):
    bounds = [shard_bounds(total, r, world) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1
    with pytest.raises(ValueError, match="rank 3 is not in a job of 3"):
        shard_bounds(total, 3, 3)


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
def test_two_gloo_processes_write_the_single_process_gallery(tmp_path):
    cfg = load_config(os.path.join(ROOT, "configs/Market1501/osnet_x0_25_circle.yml"),
                      ["MODEL.BACKBONE.PRETRAINED", False, "INPUT.SIZE_TEST", [64, 32], "MODEL.DEVICE", "cpu"])
    torch.manual_seed(0)
    weights = tmp_path / "model_final.pth"
    torch.save({"model": build_model(cfg).state_dict(), "cfg": cfg.dump()}, weights)
    folder = tmp_path / "crops"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(11):  # an odd count: the shards differ in size
        cv2.imwrite(str(folder / f"{i:02d}.png"), rng.integers(0, 256, (70 + i, 30, 3), dtype=np.uint8))
    args = ["--weights", str(weights), "--input", str(folder), "--device", "cpu", "--quiet", "--num-workers", "0",
            "--batch-size", "4"]
    assert load_tool("extract").main(args + ["--output", str(tmp_path / "single.npz")]) == 0
    proc = _torchrun("extract", args + ["--output", str(tmp_path / "sharded.npz")])
    assert proc.stdout.count("saved 11 features") == 1  # rank 0 alone writes and reports
    with np.load(tmp_path / "single.npz") as one, np.load(tmp_path / "sharded.npz") as two:
        assert list(one["paths"]) == list(two["paths"])
        assert np.allclose(one["feats"], two["feats"], atol=1e-6)


TINY_DATA = ["DATASETS.NAMES", "[synthetic]", "DATASETS.TESTS", "[synthetic]", "DATALOADER.NUM_WORKERS", "0",
             "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "4", "DATASETS.SYNTHETIC.NUM_TEST_IDS", "6",
             "DATASETS.SYNTHETIC.NUM_CAMERAS", "2", "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "2",
             "DATASETS.SYNTHETIC.NUM_DISTRACTORS", "3", "DATASETS.SYNTHETIC.IMAGE_SIZE", "[64, 32]",
             "INPUT.SIZE_TEST", "[64, 32]", "MODEL.DEVICE", "cpu", "TEST.IMS_PER_BATCH", "5"]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="torch.distributed gloo unavailable")
def test_two_gloo_processes_give_the_single_process_evaluation(tmp_path):
    import json

    from reid.data import build_dataset

    root = tmp_path / "data"
    # Drawn once here, so that the two ranks do not race to generate it.
    build_dataset("synthetic", str(root), num_train_ids=4, num_test_ids=6, num_cameras=2, images_per_camera=2,
                  num_distractors=3, image_size=(64, 32))
    config = os.path.join(ROOT, "configs/Market1501/osnet_x0_25_circle.yml")
    cfg = load_config(config, ["MODEL.BACKBONE.PRETRAINED", False])
    torch.manual_seed(0)
    weights = tmp_path / "w.pth"
    torch.save({"model": build_model(cfg).state_dict()}, weights)
    args = ["--config-file", config, "MODEL.WEIGHTS", str(weights), "DATASETS.ROOT", str(root), *TINY_DATA]
    assert load_tool("test").main(args + ["OUTPUT_DIR", str(tmp_path / "one")]) == 0
    proc = _torchrun("test", args + ["OUTPUT_DIR", str(tmp_path / "two")])
    assert proc.stdout.count("gallery images") == 1  # one evaluation table, printed by rank 0
    one = json.loads((tmp_path / "one" / "test" / "metrics.json").read_text())["results"]["synthetic"]["plain"]
    two = json.loads((tmp_path / "two" / "test" / "metrics.json").read_text())["results"]["synthetic"]["plain"]
    for key in ("R-1", "R-5", "mAP", "mINP", "num_valid_queries"):
        assert one[key] == pytest.approx(two[key], abs=1e-9), key
