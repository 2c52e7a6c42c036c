"""A tracklet's crops pooled by the model's own temporal aggregation (reid/inference/tracklet_pooling.py),
and link_cameras choosing it for a model trained on tracklets (hand-set weights for image models)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.cli import link_cameras as cli
from reid.config import get_cfg
from reid.inference.predictor import load_predictor
from reid.data.build import trained_on_tracklets
from reid.inference.tracklet_pooling import FramePooling, frame_pooling_of
from reid.modeling import build_model


def _checkpoint(path, video=True, temporal="attention", arch="baseline"):
    cfg = get_cfg()
    cfg.MODEL.META_ARCHITECTURE = arch
    cfg.MODEL.BACKBONE.NAME, cfg.MODEL.BACKBONE.PRETRAINED, cfg.MODEL.DEVICE = "resnet18", False, "cpu"
    cfg.MODEL.VIDEO.TEMPORAL = temporal
    cfg.INPUT.SIZE_TEST = [64, 32]
    cfg.DATASETS.NAMES = ["synthetic_video"] if video else ["synthetic"]
    torch.manual_seed(0)
    model = build_model(cfg)
    if hasattr(model, "temporal") and hasattr(model.temporal, "score"):  # learned weights, not avg's zeros
        with torch.no_grad():
            model.temporal.score.weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    torch.save({"model": model.state_dict(), "cfg": cfg.dump()}, path)
    return str(path)


def _crops(n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (int(rng.integers(40, 90)), int(rng.integers(20, 45)), 3), dtype=np.uint8)
            for _ in range(n)]


def test_pooled_crops_equal_the_models_feature_of_each_tracklets_clip(tmp_path):
    predictor = load_predictor(weights=_checkpoint(tmp_path / "m.pth"), device="cpu", backend="torch")
    pooling = FramePooling(predictor)
    crops, group = _crops(7), np.array([2, 0, 2, 0, 0, 3, 2])  # unordered; tracklet 1 has no crop
    pooled = pooling.pool(pooling.frame_features(crops), group, 4)
    model = predictor.model.eval()
    with torch.no_grad():
        for t in (0, 2, 3):
            clip = torch.stack([predictor.transform(crops[i]) for i in np.flatnonzero(group == t)]).unsqueeze(0)
            expected = F.normalize(model(clip), dim=1)[0].numpy()
            np.testing.assert_allclose(pooled[t], expected, rtol=1e-4, atol=1e-5)
    assert not pooled[1].any()  # no crop, no feature


def test_which_models_pool_their_own_crops(tmp_path):
    video = load_predictor(weights=_checkpoint(tmp_path / "v.pth"), device="cpu", backend="torch")
    image = load_predictor(weights=_checkpoint(tmp_path / "i.pth", video=False), device="cpu", backend="torch")
    mgn = load_predictor(weights=_checkpoint(tmp_path / "g.pth", arch="mgn"), device="cpu", backend="torch")
    assert trained_on_tracklets(video.cfg) and not trained_on_tracklets(image.cfg)
    assert frame_pooling_of(image) is not None  # an image Baseline can pool (avg) when asked to
    assert frame_pooling_of(mgn) is None
    with pytest.raises(ValueError, match="MGN does not pool a tracklet's frames"):
        FramePooling(mgn)


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    from reid.cli import make_sequences

    out = str(tmp_path_factory.mktemp("pooling") / "synth")
    assert make_sequences.main(["--output", out, "--cameras", "2", "--frames", "30", "--size", "320x180",
                                "--quiet"]) == 0
    return out


def test_link_cameras_pools_with_the_video_models_own_aggregation_by_default(synth, tmp_path, capsys):
    base = ["--sequences", synth, "--tracks", "gt", "--threshold", "0.3", "--no-metrics"]
    video = _checkpoint(tmp_path / "v.pth")
    assert cli.main(base + ["--weights", video, "--output", str(tmp_path / "auto")]) == 0
    assert "crops pooled by the model's own attention pooling" in capsys.readouterr().out
    auto = json.loads((tmp_path / "auto" / "identities.json").read_text())
    assert auto["pooling"] == "model"
    assert cli.main(base + ["--weights", video, "--output", str(tmp_path / "q"), "--pooling", "quality"]) == 0
    assert "the hand-set quality weights" in capsys.readouterr().out
    assert json.loads((tmp_path / "q" / "identities.json").read_text())["pooling"] == "quality"
    image = _checkpoint(tmp_path / "i.pth", video=False)
    assert cli.main(base + ["--weights", image, "--output", str(tmp_path / "img")]) == 0
    assert json.loads((tmp_path / "img" / "identities.json").read_text())["pooling"] == "quality"
    mgn = _checkpoint(tmp_path / "g.pth", arch="mgn")
    capsys.readouterr()
    assert cli.main(base + ["--weights", mgn, "--output", str(tmp_path / "mgn"), "--pooling", "model"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--pooling model" in err and "cannot pool frames itself" in err


def test_flip_pools_the_crops_and_their_mirrors_and_averages_as_the_evaluator_does(tmp_path):
    predictor = load_predictor(weights=_checkpoint(tmp_path / "m.pth", temporal="max"), device="cpu",
                               backend="torch", flip=True)
    pooling = FramePooling(predictor)
    crops, group = _crops(4, seed=3), np.array([0, 1, 1, 1])
    feats = pooling.frame_features(crops)
    assert feats.shape == (4, 2 * 512)  # each crop's, then its mirror's
    pooled = pooling.pool(feats, group, 2)
    model = predictor.model.eval()
    with torch.no_grad():
        clip = torch.stack([predictor.transform(c) for c in crops[1:]]).unsqueeze(0)
        expected = F.normalize((model(clip) + model(torch.flip(clip, dims=[-1]))) / 2, dim=1)[0].numpy()
    np.testing.assert_allclose(pooled[1], expected, rtol=1e-4, atol=1e-5)


def test_extract_and_search_take_tracklet_folders(tmp_path, capsys):
    import cv2

    from reid.cli import extract as cli_extract
    from reid.cli import search as cli_search
    from reid.search.gallery import load_gallery

    rng = np.random.default_rng(0)
    gallery = tmp_path / "gallery"
    for name, n in (("p1_c1", 3), ("p2_c1", 1), ("p1_c2", 12)):
        folder = gallery / name
        folder.mkdir(parents=True)
        for k in range(n):  # unpadded frame numbers: f10 must come after f9
            assert cv2.imwrite(str(folder / f"f{k}.png"), rng.integers(0, 256, (64, 32, 3), dtype=np.uint8))
    weights = _checkpoint(tmp_path / "v.pth")
    out = tmp_path / "g.npz"
    assert cli_extract.main(["--weights", weights, "--input", str(gallery), "--output", str(out), "--tracklets",
                             "--quiet", "--device", "cpu"]) == 0
    assert "extracting features of 3 tracklets (16 frames" in capsys.readouterr().out
    saved = load_gallery(str(out))
    assert saved.paths == [str(gallery / n) for n in ("p1_c1", "p1_c2", "p2_c1")]
    predictor = load_predictor(weights=weights, device="cpu", backend="torch")
    pooling = FramePooling(predictor)
    import reid.data.image_io as image_io

    frames = [image_io.read_image(str(gallery / "p1_c2" / f"f{k}.png")) for k in range(12)]
    expected = pooling.pool(pooling.frame_features(frames), np.zeros(12, np.int64), 1)[0]
    np.testing.assert_allclose(saved.feats[1], expected, rtol=1e-4, atol=1e-5)
    # a query tracklet that is a gallery folder is never its own match; pictures show first frames
    rc = cli_search.main(["--weights", weights, "--gallery", str(out), "--query", str(gallery / "p1_c2"),
                          "--tracklets", "-k", "2", "--draw", str(tmp_path / "pics"), "--device", "cpu"])
    assert rc == 0
    printed = capsys.readouterr().out
    matches = [line.split()[-1] for line in printed.splitlines() if line.startswith("    ")]
    assert "left out 1 gallery images" in printed and matches == [str(gallery / "p1_c1"), str(gallery / "p2_c1")]
    assert len(list((tmp_path / "pics").glob("*.jpg"))) == 1
    # bad input: a folder without images, a file instead of a folder, an exported-file model
    (tmp_path / "empty").mkdir()
    assert cli_extract.main(["--weights", weights, "--input", str(tmp_path / "empty"), "--output",
                             str(tmp_path / "e.npz"), "--tracklets", "--quiet", "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "no image in it or its sub-folders" in err
    assert cli_extract.main(["--weights", weights, "--input", str(gallery / "p2_c1" / "f0.png"), "--output",
                             str(tmp_path / "f.npz"), "--tracklets", "--quiet", "--device", "cpu"]) == 1
    assert "not a folder" in capsys.readouterr().err


@pytest.mark.parametrize("flip", [False, True])
def test_folder_features_in_small_steps_equal_pooling_each_tracklet_at_once(tmp_path, flip):
    """Memory is bounded by frames_per_step whatever a tracklet's length: a 12-frame tracklet read 5 frames
    at a time (its pieces pooled, then merged) gives what pooling its 12 frames at once gives."""
    from reid.inference.tracklet_pooling import tracklet_folder_features
    import cv2

    rng = np.random.default_rng(4)
    tracklets = []
    for name, n in (("a", 12), ("b", 1), ("c", 4)):
        paths = []
        for k in range(n):
            path = tmp_path / name / f"{k}.png"
            path.parent.mkdir(exist_ok=True)
            assert cv2.imwrite(str(path), rng.integers(0, 256, (64, 32, 3), dtype=np.uint8))
            paths.append(str(path))
        tracklets.append((str(tmp_path / name), paths))
    predictor = load_predictor(weights=_checkpoint(tmp_path / "m.pth"), device="cpu", backend="torch", flip=flip)
    pooling = FramePooling(predictor)
    seen = []
    small = tracklet_folder_features(predictor, tracklets, progress=lambda done, total: seen.append((done, total)),
                                     frames_per_step=5)
    assert seen == [(5, 17), (10, 17), (15, 17), (17, 17)]
    import reid.data.image_io as image_io

    crops = [image_io.read_image(p) for _, paths in tracklets for p in paths]
    group = np.repeat(np.arange(3), [12, 1, 4])
    np.testing.assert_allclose(small, pooling.pool(pooling.frame_features(crops), group, 3), rtol=1e-4, atol=1e-5)
