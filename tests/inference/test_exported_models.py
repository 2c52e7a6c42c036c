"""An exported file is a model wherever a model is taken: ``--weights model.onnx`` (or ``.pt2``, any
precision) in extract, search, test and the tracking tools, its record supplying what a run would."""
from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest
import torch

from reid.export.exported import load_exported
from reid.inference import Predictor, load_predictor
from tests._tools import TINY_DATA, load_tool

pytest.importorskip("onnxruntime")
pytest.importorskip("onnxscript")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A seeded ResNet18 checkpoint (it stores its config), its exports (ONNX, .pt2, for BoxMOT), another
    model's ONNX file, a folder of crops and a tiny synthetic dataset."""
    import cv2

    from reid.config import get_cfg
    from reid.config.config import merge_from_list
    from reid.data.build import build_test_data
    from reid.engine.checkpoint_files import save_checkpoint
    from reid.export.boxmot import export_for_boxmot
    from reid.export.writer import export_model
    from reid.modeling import build_model

    root = tmp_path_factory.mktemp("exported_models")
    cfg = get_cfg()
    merge_from_list(cfg, TINY_DATA + ["DATASETS.ROOT", str(root / "data")])
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    models = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        models.append(build_model(cfg).eval())
    weights = str(root / "model_final.pth")
    save_checkpoint(weights, model=models[0].state_dict(), cfg=cfg.dump())
    out = {"weights": weights, "data": str(root / "data"), "root": root}
    for name, model in (("m.onnx", models[0]), ("m.pt2", models[0]), ("other.onnx", models[1])):
        out[name] = export_model(model, str(root / name), (64, 32), metadata={"weights_file": "model_final.pth"})
    out["boxmot.onnx"] = export_for_boxmot(models[0], str(root / "boxmot.onnx"), (64, 32))
    crops = root / "crops"
    crops.mkdir()
    rng = np.random.default_rng(0)
    for i in range(6):
        cv2.imwrite(str(crops / f"{i}.png"), rng.integers(0, 256, (70 + 3 * i, 30 + i, 3), dtype=np.uint8))
    out["crops"] = str(crops)
    build_test_data(cfg, "synthetic", log=False)  # generated now: its progress lines stay out of the tests' output
    return out


def test_an_exported_file_alone_gives_the_checkpoints_features_in_every_runtime(files, caplog):
    reference = load_predictor(weights=files["weights"], device="cpu")
    images = [np.random.default_rng(i).integers(0, 256, (80, 40, 3), dtype=np.uint8) for i in range(5)]
    expected = reference.extract_arrays(images)
    for name in ("m.onnx", "m.pt2", "boxmot.onnx"):
        with caplog.at_level(logging.WARNING):
            alone = load_predictor(weights=files[name], batch_size=2)
        assert alone.model is None and alone.input_size == (64, 32) and alone.feature_dim == reference.feature_dim
        assert alone.backend == ("torch" if name.endswith(".pt2") else "onnxruntime")
        assert np.abs(alone.extract_arrays(images) - expected).max() < 1e-4, name
        meta = alone.describe()
        assert meta["weights_sha256"] == reference.weights_sha256 and meta["exported"] == os.path.abspath(files[name])
        assert meta["meta_architecture"] == "exported file" and meta["input_size"] == "64x32"
    assert "records no input convention" not in caplog.text
    with pytest.raises(ValueError, match=r"m.onnx takes 64x32 images \(its graph's fixed size\), and INPUT.SIZE_TEST "
                                         r"asks for 128x64"):
        load_predictor(weights=files["m.onnx"], opts=["INPUT.SIZE_TEST", [128, 64]])
    with pytest.raises(ValueError, match=r"m.onnx is an ONNX file, which runs with onnxruntime or openvino"):
        load_predictor(weights=files["m.onnx"], backend="torch")


def test_an_exported_file_with_its_run_is_checked_against_the_runs_weights(files):
    config = str(files["root"] / "config.yaml")
    from reid.config import load_config, save_config

    save_config(load_config(None, TINY_DATA + ["MODEL.BACKBONE.NAME", "resnet18"]), config)
    same = load_predictor(config_file=config, weights=files["m.onnx"])
    assert same.model is not None and same.exported == files["m.onnx"] and same.backend == "onnxruntime"
    with pytest.raises(ValueError, match=r"other.onnx was exported from other weights than .*model_final.pth"):
        load_predictor(config_file=config, weights=files["other.onnx"])


def test_a_foreign_onnx_file_without_a_record_and_with_a_fixed_batch_runs_with_a_note(tmp_path, caplog):
    """Another exporter's file: no circle_reid record (a note says its pixels go in raw), a batch axis
    fixed at 1 (images run one at a time: 5 images, 5 features)."""
    class Tiny(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.normalize(x.mean(dim=(2, 3)), dim=1)

    path = str(tmp_path / "foreign.onnx")
    torch.onnx.export(Tiny().eval(), (torch.zeros(1, 3, 16, 8),), path, input_names=["x"], dynamo=True)
    with caplog.at_level(logging.WARNING):
        foreign = load_exported(path)
    assert "foreign.onnx records no input convention" in caplog.text and foreign.batch == 1
    x = np.random.default_rng(0).random((5, 3, 16, 8)).astype(np.float32) * 255
    got = foreign(x)
    expected = x.mean(axis=(2, 3))
    assert got.shape == (5, 3) and np.allclose(got, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)


@pytest.mark.slow
def test_the_tools_take_an_exported_file_as_weights(files, tmp_path, capsys):
    data = ["DATASETS.ROOT", files["data"], "DATASETS.TESTS", "[synthetic]", "DATASETS.SYNTHETIC.NUM_TRAIN_IDS", "4",
            "DATASETS.SYNTHETIC.NUM_TEST_IDS", "4", "DATASETS.SYNTHETIC.NUM_CAMERAS", "2",
            "DATASETS.SYNTHETIC.IMAGES_PER_CAMERA", "2", "DATASETS.SYNTHETIC.NUM_DISTRACTORS", "0",
            "DATASETS.SYNTHETIC.IMAGE_SIZE", "[64, 32]", "DATALOADER.NUM_WORKERS", "0"]
    # extract: the same gallery from the checkpoint and from the file alone
    extract = load_tool("extract")
    for name, weights in (("ckpt", files["weights"]), ("file", files["m.onnx"])):
        assert extract.main(["--weights", weights, "--input", files["crops"], "--output", str(tmp_path / f"{name}.npz"),
                             "--quiet", "--num-workers", "0"]) == 0, capsys.readouterr().err
    ckpt, alone = (np.load(tmp_path / f"{n}.npz") for n in ("ckpt", "file"))
    assert np.abs(ckpt["feats"] - alone["feats"]).max() < 1e-4
    # search: the checkpoint's gallery searched with the file's queries, no warning (same weights identity)
    capsys.readouterr()
    assert load_tool("search").main(["--weights", files["m.onnx"], "--gallery", str(tmp_path / "ckpt.npz"),
                                     "--query", os.path.join(files["crops"], "0.png"), "-k", "2"]) == 0
    printed = capsys.readouterr()
    assert "warning" not in printed.out and "query 1/1" in printed.out
    # test: the file alone scores as the checkpoint does
    test = load_tool("test")
    for name, weights in (("ckpt", files["weights"]), ("file", files["m.onnx"]), ("pt2", files["m.pt2"])):
        assert test.main(["--weights", weights, "--output-dir", str(tmp_path / f"test_{name}"), *data]) == 0, \
            capsys.readouterr().err
    scores = {n: json.load(open(tmp_path / f"test_{n}" / "metrics.json"))["results"]["synthetic"]["plain"]
              for n in ("ckpt", "file", "pt2")}
    for name in ("file", "pt2"):
        assert scores[name]["mAP"] == pytest.approx(scores["ckpt"]["mAP"], abs=1e-3)
        assert scores[name]["R-1"] == pytest.approx(scores["ckpt"]["R-1"], abs=1e-3)
    assert json.load(open(tmp_path / "test_file" / "metrics.json"))["weights"] == files["m.onnx"]
    # one line each: --flip, and export from an exported file
    capsys.readouterr()
    assert test.main(["--weights", files["m.onnx"], "--flip", "--output-dir", str(tmp_path / "flip"), *data]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--flip (TEST.FLIP True) averages unnormalised features" in err[0]
    assert load_tool("export").main(["--weights", files["m.onnx"], "--output", str(tmp_path / "again.onnx")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an exported file; tools/export.py writes files from a checkpoint" in err[0]
    assert not os.path.exists(tmp_path / "again.onnx")


def test_an_exported_file_carries_its_runs_thresholds_for_far(files, tmp_path):
    """--far with an exported file alone: the thresholds the export stored in it, nothing beside it."""
    from reid.evaluation.thresholds import calibrate, similarity_at
    from reid.export.precision_export import set_metadata
    from reid.inference.decision_thresholds import model_similarity

    rng = np.random.default_rng(0)
    feats = torch.nn.functional.normalize(torch.from_numpy(rng.normal(size=(200, 8)).astype(np.float32)), dim=1)
    pids = np.repeat(np.arange(50), 4)
    cams = np.tile(np.arange(2), 100)
    record = calibrate(feats[::2], feats[1::2], pids[::2], pids[1::2], cams[::2], cams[1::2], [0.1],
                       source="a test split")
    record["weights"] = "model_final.pth"
    with_thresholds = str(tmp_path / "with_thresholds.onnx")
    set_metadata(files["m.onnx"], with_thresholds, {"decision_thresholds": record})
    similarity, path, _ = model_similarity(Predictor.from_exported(with_thresholds), 0.1)
    assert path == with_thresholds and similarity == pytest.approx(similarity_at(record, 0.1))
    with pytest.raises(ValueError, match=r"--far 0.1: .*m.onnx carries no calibrated thresholds"):
        model_similarity(Predictor.from_exported(files["m.onnx"]), 0.1)
