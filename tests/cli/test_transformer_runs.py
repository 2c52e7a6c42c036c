"""Transformers through the tools: train, test with re-ranking, extract, export (the README's flow)."""
import json
import os

import numpy as np
import pytest
import torch

from reid.cli import extract as cli_extract
from reid.cli import search as cli_search
from reid.cli import test as cli_test
from reid.cli import train as cli_train
from reid.export.writer import compare_with_export, export_pt2
from reid.inference.loading import build_inference_model
from reid.config import load_config
from reid.modeling.backbones import VIT_SPECS
from reid.modeling.backbones.vit import ViTSpec
from tests.cli.test_cli import DEMO, ROOT, tiny_opts


@pytest.mark.slow
def test_timm_vit_trains_tests_with_reranking_and_extracts(tmp_path):
    pytest.importorskip("timm", reason="timm backbones need timm (pip install 'circle-reid[timm]')")
    out = tmp_path / "run"
    opts = tiny_opts(tmp_path / "data", out) + ["MODEL.BACKBONE.NAME", "timm/test_vit", "MODEL.BACKBONE.DROP_PATH", "0.1",
                                                "MODEL.LOSSES.NAMES", "[identity,triplet]"]
    assert cli_train.main(["--config-file", DEMO] + opts) == 0
    config = (out / "config.yaml").read_text()
    assert "NAME: timm/test_vit" in config
    assert "backbone timm/test_vit" in (out / "log.txt").read_text()
    assert cli_test.main(["--run", str(out), "--rerank", "TEST.RERANK.K1", "4", "TEST.RERANK.K2", "2"]) == 0
    rows = json.loads((out / "test" / "metrics.json").read_text())["results"]["synthetic"]
    assert set(rows) == {"plain", "rerank"} and all(0 <= r["mAP"] <= 100 for r in rows.values())
    images = sorted((tmp_path / "data").rglob("*.jpg"))[:5]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{p}\n" for p in images))
    assert cli_extract.main(["--run", str(out), "--input", str(listing), "--output", str(tmp_path / "f.npz"),
                             "--device", "cpu", "--quiet", "--num-workers", "0"]) == 0
    with np.load(tmp_path / "f.npz") as data:
        feats = data["feats"]
    assert feats.shape == (5, 64)  # test_vit's width
    np.testing.assert_allclose(np.linalg.norm(feats, axis=1), 1.0, atol=1e-5)


@pytest.mark.slow
def test_transreid_with_sie_and_jpm_trains_tests_and_extracts_with_camera_ids(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(VIT_SPECS, "vit_small_transreid", ViTSpec(32, 2, 2))  # TransReID's layout, tiny
    out = tmp_path / "run"
    opts = tiny_opts(tmp_path / "data", out) + [
        "MODEL.BACKBONE.PRETRAINED", "False", "INPUT.SIZE_TRAIN", "[64,32]", "INPUT.SIZE_TEST", "[64,32]",
        "MODEL.BACKBONE.NAME", "vit_small_transreid", "SOLVER.BASE_LR", "0.001",
        "DATASETS.NAMES", "[synthetic]", "DATASETS.TESTS", "[synthetic]", "MODEL.TRANSREID.NUM_CAMERAS", "0"]
    base = ["--config-file", os.path.join(ROOT, "configs", "Market1501", "vit_base_transreid.yml")]
    assert cli_train.main(base + opts) == 0
    cfg = load_config(str(out / "config.yaml"))
    assert cfg.MODEL.TRANSREID.NUM_CAMERAS == 2 and cfg.MODEL.META_ARCHITECTURE == "transreid"  # from the data
    assert cli_test.main(["--run", str(out), "--rerank", "TEST.RERANK.K1", "4", "TEST.RERANK.K2", "2"]) == 0
    rows = json.loads((out / "test" / "metrics.json").read_text())["results"]["synthetic"]
    assert set(rows) == {"plain", "rerank"}
    images = sorted((tmp_path / "data").rglob("*.jpg"))[:4]
    listing = tmp_path / "list.txt"
    listing.write_text("".join(f"{p} 1 {i % 2}\n" for i, p in enumerate(images)))
    args = ["--run", str(out), "--output", str(tmp_path / "f.npz"), "--device", "cpu", "--quiet", "--num-workers", "0"]
    assert cli_extract.main(args + ["--input", str(listing)]) == 0
    with np.load(tmp_path / "f.npz") as data:
        feats, camids = data["feats"], data["camids"]
    assert feats.shape == (4, 5 * 32) and camids.tolist() == [0, 1, 0, 1]
    # Each image's camera id reaches the model: with every id 0, only the camera-1 rows change.
    listing.write_text("".join(f"{p} 1 0\n" for p in images))
    assert cli_extract.main(args[:2] + ["--output", str(tmp_path / "g.npz")] + args[4:] + ["--input", str(listing)]) == 0
    with np.load(tmp_path / "g.npz") as data:
        same_camera = data["feats"]
    np.testing.assert_allclose(same_camera[[0, 2]], feats[[0, 2]], atol=1e-6)
    assert np.abs(same_camera[[1, 3]] - feats[[1, 3]]).max() > 1e-4
    model = build_inference_model(cfg, str(out / "model_final.pth"), "cpu")
    assert model.uses_camids
    capsys.readouterr()
    assert cli_extract.main(args + ["--input", str(images[0].parent)]) == 1  # a folder has no camera ids
    err = capsys.readouterr().err
    assert "list file of 'path pid camid' lines" in err and err.count("\n") == 1
    # Identity folders without camera ids cannot feed SIE either (the evaluation's made-up cameras are not theirs).
    import shutil

    for i, p in enumerate(images):
        (tmp_path / "ids" / str(i % 2)).mkdir(parents=True, exist_ok=True)
        shutil.copy(p, tmp_path / "ids" / str(i % 2) / p.name)
    assert cli_test.main(["--run", str(out), "--query", str(tmp_path / "ids"), "--gallery", str(tmp_path / "ids"),
                          "--output-dir", str(tmp_path / "t")]) == 1
    err = capsys.readouterr().err
    assert "--gallery images have none: give list files of 'path identity camid' lines" in err, err
    # Queries of a list file bring their camera ids to the search.
    assert cli_search.main(["--run", str(out), "--gallery", str(tmp_path / "f.npz"), "--query", str(listing),
                            "-k", "2", "--device", "cpu"]) == 0
    assert sum(line.startswith("query ") for line in capsys.readouterr().out.splitlines()) == 4
    check = compare_with_export(model, export_pt2(model, tmp_path / "m.pt2", (64, 32)), (64, 32))
    assert check.camids and check.max_abs_diff < 1e-5


TRANSREID_EXPORTS = [("vit_base_transreid.yml", True), ("vit_base_transreid_circle.yml", True),
                     ("vit_base_transreid_circle.yml", False)]


@pytest.mark.slow
@pytest.mark.parametrize("config, sie", TRANSREID_EXPORTS, ids=["transreid", "circle", "circle-without-sie"])
def test_transreid_configs_export_to_both_formats_with_a_free_batch_axis(config, sie, tmp_path, monkeypatch, capsys):
    """The issue's criterion: TransReID's recipe (SIE + JPM, stride 12, 256x128) and the same backbone
    with the Circle head export; a tiny width keeps it fast, the layout is the configs'."""
    pytest.importorskip("onnxscript", reason="ONNX export needs onnx and onnxscript")
    pytest.importorskip("onnxruntime", reason="the export check of an ONNX file needs onnxruntime")
    monkeypatch.setitem(VIT_SPECS, "vit_base_transreid", ViTSpec(32, 2, 2))
    cfg = load_config(os.path.join(ROOT, "configs", "Market1501", config), [
        "MODEL.TRANSREID.SIE_CAMERA", str(sie), "MODEL.BACKBONE.PRETRAINED", "False", "MODEL.HEADS.NUM_CLASSES", "3",
        "MODEL.DEVICE", "cpu"])
    from reid.config import save_config
    from reid.export.exported import load_exported
    from reid.modeling import build_model
    from tests._tools import load_tool

    torch.manual_seed(0)
    run = tmp_path / "run"
    run.mkdir()
    save_config(cfg, str(run / "config.yaml"))
    torch.save({"model": build_model(cfg).state_dict(), "cfg": cfg.dump()}, run / "model_final.pth")
    export_tool = load_tool("export")
    outputs = [str(tmp_path / "m.onnx"), str(tmp_path / "m.pt2")]
    assert export_tool.main(["--run", str(run), "--output", *outputs]) == 0
    text = capsys.readouterr().out
    assert text.count("-> OK") == 2 and "[batch, 3, 256, 128]" in text and "[batch, 160]" in text  # (1 + 4 parts) x width 32
    assert ("camids int64 [batch] (camera ids 0..5, SIE)" in text) == sie
    assert ("random inputs and camera ids, batch sizes 1, 7" in text) == sie
    for path in outputs:
        loaded = load_exported(path)
        assert loaded.needs_camids == sie and loaded.input_names == (("images", "camids") if sie else ("images",))
    if sie:  # BoxMOT gives crops only
        assert export_tool.main(["--run", str(run), "--output", str(tmp_path / "b.onnx"), "--for", "boxmot"]) == 1
        err = capsys.readouterr().err
        assert "--for boxmot: this model uses camera ids (SIE" in err and "export without --for" in err
        assert err.count("\n") == 1 and not (tmp_path / "b.onnx").exists()
