"""Predictor: loading a trained model in one call, and features of files, folders and arrays."""
from __future__ import annotations

import os
from typing import List

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.config import get_cfg, save_config
from reid.data.image_io import CorruptImageError, read_image
from reid.data.transforms import build_transforms
from reid.engine.checkpoint_files import CheckpointError
from reid.inference import Predictor, collect_entries, collect_images, load_gallery, load_predictor
from reid.modeling import build_model
from tests._tools import TOOLS, load_tool

SIZE = [64, 32]


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread(one_torch_thread_module):
    """Run this module with one torch thread (see conftest.one_torch_thread_module)."""


def _train_cfg():
    cfg = get_cfg()
    cfg.MODEL.BACKBONE.NAME = "resnet18"
    cfg.MODEL.BACKBONE.PRETRAINED = False
    cfg.MODEL.HEADS.NUM_CLASSES = 4  # as after training: the checkpoint holds a head
    cfg.MODEL.DEVICE = "cpu"
    cfg.INPUT.SIZE_TEST = list(SIZE)
    cfg.TEST.IMS_PER_BATCH = 2  # small batches, so the tests cross batch boundaries
    return cfg


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A run folder as tools/train.py leaves it, and the model that wrote it (eval mode)."""
    cfg = _train_cfg()
    torch.manual_seed(0)
    model = build_model(cfg)
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():  # non-default statistics, so loading them is visible
        if isinstance(m, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d)):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=gen) * 0.1)
    model.eval()
    run = tmp_path_factory.mktemp("run")
    save_config(cfg, str(run / "config.yaml"))
    torch.save({"model": model.state_dict(), "cfg": cfg.dump(), "epoch": 3}, run / "model_final.pth")
    return run, model, cfg


def _write_images(folder, names_and_sizes) -> List[str]:
    rng = np.random.default_rng(0)
    paths = []
    for name, (h, w) in names_and_sizes:
        path = os.path.join(str(folder), name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        assert cv2.imwrite(path, rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    paths = _write_images(root, [
        ("cam1/0001_a.jpg", (80, 40)), ("cam1/0002_b.JPG", (64, 32)), ("cam2/x/0003.png", (50, 30)),
        ("0004.jpeg", (128, 64)), ("0005.bmp", (70, 35)),
    ])
    (root / "notes.txt").write_text("not an image")
    (root / ".hidden").mkdir()
    _write_images(root / ".hidden", [("skipped.jpg", (20, 10))])
    return root, sorted(paths)


def _direct_features(model, cfg, paths) -> np.ndarray:
    """What the model itself gives for the same preprocessed images, L2-normalised."""
    transform = build_transforms(cfg, is_train=False)
    batch = torch.stack([transform(read_image(p)) for p in paths])
    with torch.no_grad():
        return F.normalize(model(batch), dim=1).numpy()


@pytest.mark.slow
def test_from_run_gives_the_original_models_features(trained, image_folder):
    run, model, cfg = trained
    predictor = Predictor.from_run(run)
    assert predictor.feature_dim == model.feature_dim == 512
    assert predictor.input_size == (64, 32)
    assert getattr(predictor.model, "head", None) is None  # built for inference: no identity head
    _, paths = image_folder
    feats = predictor.extract_paths(paths)
    np.testing.assert_allclose(feats, _direct_features(model, cfg, paths), atol=1e-5, rtol=0)


@pytest.mark.slow
def test_all_loading_routes_agree(trained):
    run, model, cfg = trained
    img = np.random.default_rng(3).integers(0, 256, (90, 45, 3), dtype=np.uint8)
    from_run = Predictor.from_run(run).extract_arrays(img)
    from_ckpt = Predictor.from_checkpoint(run / "model_final.pth").extract_arrays(img)
    from_cfg = load_predictor(config_file=run / "config.yaml", weights=run / "model_final.pth").extract_arrays(img)
    np.testing.assert_array_equal(from_run, from_ckpt)
    np.testing.assert_array_equal(from_run, from_cfg)
    # A run's config.yaml alone takes the weights next to it; any other config needs weights.
    np.testing.assert_array_equal(from_run, load_predictor(config_file=run / "config.yaml").extract_arrays(img))
    demo = os.path.join(os.path.dirname(TOOLS), "configs", "Demo", "resnet18_circle.yml")
    with pytest.raises(ValueError, match="without weights.*--weights FILE"):
        load_predictor(config_file=demo)
    from_override = load_predictor(config_file=run / "config.yaml", opts=["MODEL.WEIGHTS", str(run / "model_final.pth")])
    np.testing.assert_array_equal(from_run, from_override.extract_arrays(img))
    with pytest.raises(ValueError, match="No model given"):
        load_predictor()


@pytest.mark.slow
def test_a_bare_state_dict_needs_its_config(trained, tmp_path):
    run, model, cfg = trained
    bare = tmp_path / "bare.pth"
    torch.save(model.state_dict(), bare)  # no "cfg" entry: the checkpoint cannot describe itself
    with pytest.raises(ValueError, match="bare.pth.*--config-file"):
        Predictor.from_checkpoint(bare)
    img = np.random.default_rng(6).integers(0, 256, (64, 32, 3), dtype=np.uint8)
    np.testing.assert_array_equal(
        Predictor.from_config(run / "config.yaml", bare).extract_arrays(img),
        Predictor.from_run(run).extract_arrays(img),
    )


@pytest.mark.slow
def test_extract_folder_finds_every_image_and_matches_the_model(trained, image_folder):
    run, model, cfg = trained
    root, expected_paths = image_folder
    predictor = Predictor.from_run(run, batch_size=2)
    feats, paths = predictor.extract(root)
    assert paths == expected_paths  # recursive, image extensions any case, hidden folders and .txt skipped
    assert feats.shape == (5, 512) and feats.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(feats, axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(feats, _direct_features(model, cfg, paths), atol=1e-5, rtol=0)
    # Progress is reported after every batch of 2: 2, 4, 5.
    seen = []
    predictor.extract_paths(paths, progress=lambda done, total: seen.append((done, total)))
    assert seen == [(2, 5), (4, 5), (5, 5)]


@pytest.mark.slow
def test_arrays_a_batch_and_a_list_give_the_same_features(trained):
    run, model, cfg = trained
    predictor = Predictor.from_run(run)
    imgs = np.random.default_rng(4).integers(0, 256, (3, 64, 32, 3), dtype=np.uint8)
    as_batch = predictor.extract_arrays(imgs)
    as_list = predictor.extract_arrays(list(imgs))
    np.testing.assert_allclose(as_batch, as_list, atol=1e-6)
    x = torch.from_numpy(imgs).permute(0, 3, 1, 2).contiguous()
    with torch.no_grad():
        np.testing.assert_allclose(as_batch, F.normalize(model(x), dim=1).numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="uint8"):
        predictor.extract_arrays(imgs.astype(np.float32))
    with pytest.raises(ValueError, match="H x W x 3"):
        predictor.extract_arrays(np.zeros((64, 32), np.uint8)[None])


@pytest.mark.slow
def test_flip_averages_the_mirrored_image(trained):
    run, model, _ = trained
    img = np.random.default_rng(5).integers(0, 256, (64, 32, 3), dtype=np.uint8)
    flipped = Predictor.from_run(run, opts=["TEST.FLIP", True]).extract_arrays(img)
    x = torch.from_numpy(img).permute(2, 0, 1)[None].contiguous()
    with torch.no_grad():
        expected = F.normalize(model(x) + model(x.flip(3)), dim=1).numpy()
    np.testing.assert_allclose(flipped, expected, atol=1e-5)


def test_list_files_relative_paths_and_dataset_lines(tmp_path, trained):
    paths = _write_images(tmp_path / "imgs", [("a.jpg", (64, 32)), ("b c.jpg", (64, 32))])
    listing = tmp_path / "list.txt"
    listing.write_text("# query list\nimgs/a.jpg 3 1\n\nimgs/b c.jpg\n")
    assert collect_images(listing) == paths
    entries = collect_entries(listing)
    assert entries.pids == [3, None] and entries.camids == [1, None] and entries.num_labelled == 1
    assert entries.label_arrays() == (None, None)  # not every image is labelled
    # The custom dataset's format: header, commas, a path with a space, a trailing comment.
    listing.write_text("path,pid,camid\nimgs/b c.jpg,7,2\nimgs/a.jpg 3 0  # first camera\n")
    entries = collect_entries(listing)
    assert entries.paths == paths[::-1]
    pids, camids = entries.label_arrays()
    assert pids.dtype == np.int64 and pids.tolist() == [7, 3] and camids.tolist() == [2, 0]
    # '#' starts a comment only at the line start or after whitespace: file names may hold one.
    (tmp_path / "imgs" / "a.jpg").rename(tmp_path / "imgs" / "a#1.jpg")
    listing.write_text("imgs/a#1.jpg 4 1  # renamed\n")
    entries = collect_entries(listing)
    assert entries.paths == [str(tmp_path / "imgs" / "a#1.jpg")] and entries.pids == [4]
    listing.write_text("imgs/b c.jpg\nimgs/missing.jpg\n")
    with pytest.raises(FileNotFoundError, match="missing.jpg"):
        collect_images(listing)


def test_user_mistakes_get_errors_that_name_the_thing(tmp_path, trained):
    run, _, _ = trained
    predictor = Predictor.from_run(run)
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    with pytest.raises(ValueError, match="empty"):
        predictor.extract(empty)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        predictor.extract(tmp_path / "nowhere")
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(CorruptImageError, match="broken.jpg"):
        predictor.extract_paths([bad])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Predictor.from_run(tmp_path / "no_run")
    with pytest.raises(FileNotFoundError, match="other.pth"):
        Predictor.from_run(run, weights="other.pth")


def test_weights_of_another_architecture_are_refused(trained):
    run, _, _ = trained
    # Same backbone, no BNNeck: the neck's keys are in the file but not in the model.
    with pytest.raises(CheckpointError, match="model_final.pth.*neck"):
        Predictor.from_run(run, opts=["MODEL.HEADS.NECK", "none"])


@pytest.mark.slow
def test_extract_tool_saves_features_with_paths(trained, image_folder, tmp_path, capsys):
    run, model, cfg = trained
    root, expected_paths = image_folder
    tool = load_tool("extract")
    out = tmp_path / "gallery.npz"
    assert tool.main(["--run", str(run), "--input", str(root), "--output", str(out), "--num-workers", "0"]) == 0
    err = capsys.readouterr().err
    assert "extract: 100%" in err and "5/5" in err  # progress shown
    gallery = load_gallery(out)
    assert gallery.paths == [os.path.abspath(p) for p in expected_paths]
    np.testing.assert_allclose(gallery.feats, _direct_features(model, cfg, expected_paths), atol=1e-5)
    assert gallery.meta["input_size"] == "64x32" and gallery.meta["weights"].endswith("model_final.pth")
    assert gallery.pids is None and gallery.camids is None  # a folder gives no labels
    # A list file of 'path pid camid' lines: the labels are saved with the features.
    listing = tmp_path / "labelled.txt"
    listing.write_text("".join(f"{p} {10 + i} {i % 2}\n" for i, p in enumerate(expected_paths)))
    out2 = tmp_path / "labelled.npz"
    assert tool.main(["--run", str(run), "--input", str(listing), "--output", str(out2), "--num-workers", "0",
                      "--quiet"]) == 0
    assert "with their paths, pids and camids" in capsys.readouterr().out
    labelled = load_gallery(out2)
    assert labelled.pids.tolist() == [10, 11, 12, 13, 14] and labelled.camids.tolist() == [0, 1, 0, 1, 0]
    np.testing.assert_allclose(labelled.feats, gallery.feats, atol=1e-6)
    # Labelled list plus an unlabelled folder: no labels, and the log says why.
    assert tool.main(["--run", str(run), "--input", str(listing), str(root), "--output", str(out2),
                      "--num-workers", "0", "--quiet"]) == 0
    assert "5 of 10 images have 'path pid camid' labels" in capsys.readouterr().out
    assert load_gallery(out2).pids is None
    assert tool.main(["--run", str(run), "--input", str(tmp_path / "none"), "--output", str(out)]) == 1
    assert "none" in capsys.readouterr().err
