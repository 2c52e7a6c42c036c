"""The tools run by a user on files and folders from someone else (docs/security.md): each case
works correctly or ends in one ``error:`` line naming the file, never hangs, never reads a file
it was not given, never answers wrongly with exit code 0."""
import os

import numpy as np
import pytest
import torch

import tests._fastreid as fr
from reid.engine.checkpoint_files import read_checkpoint, save_checkpoint
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
    import cv2

    query = tmp_path / "good1_again.png"  # good1's pixels in another file: not the gallery's own image
    cv2.imwrite(str(query), cv2.imread(str(images / "good1.jpg")))
    proc = tool("search", "--weights", checkpoint, "--gallery", tmp_path / "scaled.npz", "--query", query, "-k", "2")
    assert proc.returncode == 0, proc.stderr
    best = [line for line in proc.stdout.splitlines() if line.strip().startswith("1 ")][0]
    assert "good1.jpg" in best and "1.0000" in best  # the true match, not the row of length 1e25
    assert "were not unit length; they were normalised" in proc.stderr + proc.stdout


def test_a_threshold_is_never_applied_at_a_far_its_split_cannot_resolve(checkpoint, images, tmp_path):  # noqa: F811
    """The issue's case: thresholds 'calibrated at FAR 1e-4' on 69 impostor pairs (which resolve FAR 0.043 at
    best) were applied by search --far 1e-4 without a word, and accepted 80x the FAR asked for."""
    from reid.evaluation.thresholds import calibrate, save_thresholds
    from tests.evaluation.test_thresholds import few_impostors

    run = tmp_path / "run"
    run.mkdir()
    weights = run / "model_final.pth"
    weights.write_bytes(open(checkpoint, "rb").read())
    record = calibrate(*few_impostors(), fars=(1e-4, 0.1))
    save_thresholds(str(run), {**record, "weights": "model_final.pth"})
    out = tmp_path / "g.npz"
    assert tool("extract", "--weights", weights, "--input", images / "good0.jpg", images / "good1.jpg",
                "--output", out, "--num-workers", "0", "--quiet").returncode == 0
    proc = tool("search", "--weights", weights, "--gallery", out, "--query", images / "good1.jpg", "--far", "1e-4")
    assert_one_line_error(proc, "cannot resolve FAR 0.0001: its validation split had 69 impostor pairs",
                          "needs at least 29,956", "about 49 more validation identities")
    proc = tool("search", "--weights", weights, "--gallery", out, "--query", images / "good1.jpg", "--far", "0.1")
    assert proc.returncode == 0 and "FAR 0.1: " in proc.stdout and "of 69 validation impostor pairs" in proc.stdout


def test_a_threshold_is_never_applied_to_features_made_otherwise_than_calibrated(checkpoint, images, tmp_path):  # noqa: F811
    """search --far with TEST.FLIP True (calibrated without flip), or on a gallery of other weights, accepted
    a wrong person 'at FAR 0.05' with exit code 0: the scores were not those the threshold was measured on."""
    from reid.evaluation.thresholds import calibrate, extraction_settings, save_thresholds
    from reid.inference.loading import resolve_model
    from tests.evaluation.test_thresholds import few_impostors

    run = tmp_path / "run"
    run.mkdir()
    weights = run / "model_final.pth"
    weights.write_bytes(open(checkpoint, "rb").read())
    cfg, _ = resolve_model(weights=str(weights))
    record = calibrate(*few_impostors(), fars=(0.1,))
    save_thresholds(str(run), {**record, "weights": "model_final.pth", "extraction": extraction_settings(cfg)})
    out = tmp_path / "g.npz"
    extract = ["--input", images / "good0.jpg", images / "good1.jpg", "--num-workers", "0", "--quiet"]
    assert tool("extract", "--weights", weights, *extract, "--output", out).returncode == 0
    search = ["--query", images / "good1.jpg", "--far", "0.1"]
    proc = tool("search", "--weights", weights, "--gallery", out, *search, "TEST.FLIP", "True")
    assert_one_line_error(proc, "was calibrated on features made otherwise than these are made",
                          "TEST.FLIP True (calibrated with False)", "--threshold S")
    data = read_checkpoint(checkpoint)
    other = save_checkpoint(str(tmp_path / "other.pth"),
                            **{**data, "model": {k: v * 1.5 if v.is_floating_point() else v
                                                 for k, v in data["model"].items()}})
    assert tool("extract", "--weights", other, *extract, "--output", tmp_path / "other.npz").returncode == 0
    proc = tool("search", "--weights", weights, "--gallery", tmp_path / "other.npz", *search)
    assert_one_line_error(proc, "--far: the gallery was made with other weights than the queries",
                          "FAR would not hold", "other.npz")
    assert tool("search", "--weights", weights, "--gallery", out, *search).returncode == 0  # as calibrated: applied


def test_an_exported_file_of_other_weights_or_not_onnx_at_all_is_one_line(checkpoint, images, tmp_path):  # noqa: F811
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    data = read_checkpoint(checkpoint)
    other = save_checkpoint(str(tmp_path / "other.pth"),
                            **{**data, "model": {k: v * 1.5 if v.is_floating_point() else v
                                                 for k, v in data["model"].items()}})
    exported = tmp_path / "other_model.onnx"
    assert tool("export", "--weights", other, "--output", exported, "--no-check").returncode == 0
    args = ["--input", images / "good0.jpg", "--output", tmp_path / "g.npz", "--num-workers", "0", "--quiet",
            "--backend", "onnxruntime"]
    # The case: the gallery would name the weights of --weights while holding other_model's features.
    proc = tool("extract", "--weights", checkpoint, "--exported", exported, *args)
    assert_one_line_error(proc, "other_model.onnx was exported from other weights than", "model_final.pth",
                          "it records other.pth")
    assert not (tmp_path / "g.npz").exists()
    (tmp_path / "notes.onnx").write_text("not a model\n" * 50)
    assert_one_line_error(tool("extract", "--weights", checkpoint, "--exported", tmp_path / "notes.onnx", *args),
                          "notes.onnx' is not a readable ONNX model")
    proc = tool("extract", "--weights", other, "--exported", exported, *args)
    assert proc.returncode == 0, proc.stderr
    meta = load_gallery(tmp_path / "g.npz").meta
    assert meta["exported"] == str(exported) and meta["weights"] == other and meta["exported_sha256"]


@pytest.mark.parametrize("args, name", [
    (lambda c, i, t: ["extract", "--weights", t / "fifo.pth", "--input", i, "--output", t / "g.npz"], "fifo.pth"),
    (lambda c, i, t: ["search", "--weights", c, "--gallery", t / "fifo.npz", "--query", i / "good0.jpg"], "fifo.npz"),
    (lambda c, i, t: ["search", "--weights", c, "--index", t / "fifo.index", "--query", i / "good0.jpg"], "fifo.index"),
    (lambda c, i, t: ["extract", "--weights", c, "--backend", "onnxruntime", "--exported", t / "fifo.onnx", "--input",
                      i / "good0.jpg", "--output", t / "g.npz"], "fifo.onnx"),
    (lambda c, i, t: ["extract", "--weights", c, "--input", t / "fifo.txt", "--output", t / "g.npz"], "fifo.txt"),
], ids=["weights", "gallery", "index", "exported model", "list file"])
def test_a_fifo_given_for_a_file_is_named_for_what_it_is(checkpoint, images, tmp_path, args, name):  # noqa: F811
    os.mkfifo(tmp_path / name)
    proc = tool(*args(checkpoint, images, tmp_path))  # was: "does not exist" (or a hang)
    assert_one_line_error(proc, name, "is a FIFO (named pipe), not a file")
    assert "does not exist" not in proc.stderr


def test_a_jpeg_given_as_weights_is_one_line_naming_it(images, tmp_path):  # noqa: F811
    proc = tool("extract", "--weights", images / "good0.jpg", "--input", images, "--output", tmp_path / "g.npz")
    assert_one_line_error(proc, "good0.jpg: it is a JPEG image, not a checkpoint")


def test_search_never_answers_a_query_with_its_own_file(checkpoint, images, tmp_path):  # noqa: F811
    crops = tmp_path / "crops"
    crops.mkdir()
    for name in ("good0.jpg", "good1.jpg"):
        os.link(images / name, crops / name)  # the gallery holds the query files themselves (hard links)
    assert tool("extract", "--weights", checkpoint, "--input", crops, "--output", tmp_path / "g.npz",
                "--num-workers", "0", "--quiet").returncode == 0
    proc = tool("search", "--weights", checkpoint, "--gallery", tmp_path / "g.npz", "--query", images / "good1.jpg",
                "-k", "2", "--json", tmp_path / "m.json")
    assert proc.returncode == 0, proc.stderr
    import json

    record = json.loads((tmp_path / "m.json").read_text())[0]
    assert [os.path.basename(m["path"]) for m in record["matches"]] == ["good0.jpg"]  # was: good1.jpg at 1.0000 first
    assert record["own_images_left_out"] == 1
    assert "left out 1 gallery images that are a query's own image (1 the same file" in proc.stdout


def test_an_output_that_is_a_folder_is_one_line_before_any_work(checkpoint, images, tmp_path):  # noqa: F811
    (tmp_path / "g.npz").mkdir()
    proc = tool("extract", "--weights", checkpoint, "--input", images / "good0.jpg", "--output", tmp_path / "g.npz",
                "--num-workers", "0", "--quiet")
    assert_one_line_error(proc, "g.npz' is a folder, not a file; name a file to write")
    assert "extracting features" not in proc.stdout + proc.stderr and ".tmp" not in proc.stderr
