"""The tools run by a user on files and folders from someone else (docs/security.md): each case
works correctly or ends in one ``error:`` line naming the file, never hangs, never reads a file
it was not given, never answers wrongly with exit code 0."""
import os

import numpy as np
import pytest
import torch

import tests._fastreid as fr
from reid.engine.checkpoint import read_checkpoint, save_checkpoint
from reid.inference import load_gallery
from tests.cli.test_tool_errors import ROOT, assert_one_line_error, checkpoint, images, tool  # noqa: F401
from tests.config.test_hostile_configs import SECRET, alias_bomb

pytestmark = pytest.mark.slow


def with_config(src, dst, text):
    data = read_checkpoint(src)
    save_checkpoint(str(dst), **{**data, "cfg": text})
    return str(dst)


def test_extract_over_symlink_loops_finishes_with_each_image_once(checkpoint, images, tmp_path):  # noqa: F811
    crops = tmp_path / "crops"
    (crops / "cam1").mkdir(parents=True)
    for name in ("good0.jpg", "good1.jpg"):
        (crops / "cam1" / name).write_bytes((images / name).read_bytes())
    os.symlink(crops, crops / "cam1" / "loop")      # two loops, as in the report
    os.symlink("..", crops / "cam1" / "up")
    os.symlink(crops / "cam1" / "good0.jpg", crops / "again.jpg")  # a second name of one image
    os.symlink("/etc/hostname", crops / "outside.jpg")
    out = tmp_path / "g.npz"
    proc = tool("extract", "--weights", checkpoint, "--input", crops, "--output", out, "--num-workers", "0", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.path.basename(p) for p in load_gallery(out).paths) == ["again.jpg", "good1.jpg"]
    assert "2 symbolic links to folders" in proc.stderr and "1 symbolic links that point outside" in proc.stderr
    assert "1 second names of files already listed" in proc.stderr and "Traceback" not in proc.stderr


def test_a_checkpoint_whose_config_names_another_file_never_reads_it(checkpoint, images, tmp_path):  # noqa: F811
    secret = tmp_path / "shadow"
    secret.write_text(f"{SECRET}: x: y\n")
    crafted = with_config(checkpoint, tmp_path / "crafted.pth", f"_BASE_: {secret}\n")
    proc = tool("extract", "--weights", crafted, "--input", images, "--output", tmp_path / "g.npz")
    assert_one_line_error(proc, "crafted.pth names _BASE_", "not read here")
    assert SECRET not in proc.stderr + proc.stdout and "ckpt_cfg_" not in proc.stderr
    assert not (tmp_path / "g.npz").exists()


def test_a_checkpoint_holding_an_alias_bomb_is_refused_at_once(checkpoint, images, tmp_path):  # noqa: F811
    crafted = with_config(checkpoint, tmp_path / "bomb.pth", alias_bomb())
    proc = tool("extract", "--weights", crafted, "--input", images, "--output", tmp_path / "g.npz")
    assert_one_line_error(proc, "bomb.pth cannot be used as a config: it expands to more than")
    assert len(proc.stderr) < 1000


def test_a_checkpoint_with_nan_weights_is_refused_before_extraction(checkpoint, images, tmp_path):  # noqa: F811
    data = read_checkpoint(checkpoint)
    state = dict(data["model"])
    state["backbone.conv1.weight"] = torch.full_like(state["backbone.conv1.weight"], float("nan"))
    path = save_checkpoint(str(tmp_path / "nan.pth"), **{**data, "model": state})
    proc = tool("extract", "--weights", path, "--input", images, "--output", tmp_path / "g.npz")
    assert_one_line_error(proc, "nan.pth cannot be used: backbone.conv1.weight holds NaN")


@pytest.mark.parametrize("edit, message", [
    (lambda s: {**s, "backbone.conv1.weight": torch.ones_like(s["backbone.conv1.weight"], dtype=torch.int64)},
     "backbone.conv1.weight is torch.int64"),
    (lambda s: {**s, "heads.bottleneck.0.running_var": torch.full_like(s["heads.bottleneck.0.running_var"],
                                                                      float("inf"))},
     "running_var holds inf"),
])
def test_a_damaged_fastreid_checkpoint_is_refused_by_every_tool(tmp_path, edit, message):
    src = fr.write_checkpoint(tmp_path / "fastreid.pth", "bot_R50", edit=edit)
    proc = tool("convert_weights", src, tmp_path / "out.pth", "--config-file", fr.config("bot_R50"),
                *[str(o) for o in fr.opts("bot_R50")])
    assert_one_line_error(proc, "fastreid.pth cannot be used:", message)
    assert not (tmp_path / "out.pth").exists()


def test_search_over_a_gallery_of_unnormalised_rows_answers_correctly(checkpoint, images, tmp_path):  # noqa: F811
    out = tmp_path / "g.npz"
    assert tool("extract", "--weights", checkpoint, "--input", images / "good0.jpg", images / "good1.jpg",
                "--output", out, "--num-workers", "0", "--quiet").returncode == 0
    with np.load(out) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["feats"] = arrays["feats"] * np.array([[1e25], [1e-25]], np.float32)
    with open(tmp_path / "scaled.npz", "wb") as f:
        np.savez(f, **arrays)
    proc = tool("search", "--weights", checkpoint, "--gallery", tmp_path / "scaled.npz", "--query",
                images / "good1.jpg", "-k", "2")
    assert proc.returncode == 0, proc.stderr
    best = [line for line in proc.stdout.splitlines() if line.strip().startswith("1 ")][0]
    assert "good1.jpg" in best and "1.0000" in best  # the true match, not the row of length 1e25
    assert "were not unit length; they were normalised" in proc.stderr + proc.stdout
