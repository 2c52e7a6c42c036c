"""One feature per tracklet (reid/evaluation/tracklet_extract.py): frames read a few at a time across
tracklet borders, pooled in chunks and merged, equal the model's feature of each whole clip; the
evaluator ranks tracklets with junk ignored."""
from __future__ import annotations

import os

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.data import build_test_loader
from reid.data.tracklet_dataset import TrackletDataset
from reid.data.transforms import build_transforms
from reid.evaluation.evaluator import evaluate_model, extract_items
from reid.evaluation.tracklet_extract import check_video_model, extract_tracklet_features, tracklet_frames
from tests.modeling.test_models import H, W, build, make_cfg

LENGTHS = (5, 1, 7, 2)


def _tracklets(root, lengths=LENGTHS, seed=0):
    """Tracklets of random frames (person i in camera i % 2) written as PNG files."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(lengths):
        folder = os.path.join(str(root), f"t{i}")
        os.makedirs(folder, exist_ok=True)
        paths = []
        for k in range(n):
            path = os.path.join(folder, f"{k:03d}.png")
            assert cv2.imwrite(path, rng.integers(0, 256, (H, W, 3), dtype=np.uint8))
            paths.append(path)
        out.append((tuple(paths), i, i % 2))
    return out


def _cfg(temporal="attention", batch=3):
    cfg = make_cfg(MODEL__VIDEO__TEMPORAL=temporal)
    cfg.INPUT.SIZE_TEST = [H, W]
    cfg.TEST.IMS_PER_BATCH = batch  # 3 frames per batch: most tracklets span two or three batches
    cfg.DATALOADER.NUM_WORKERS = 0
    return cfg


def _model(cfg):
    model = build(cfg).eval()
    if hasattr(model.temporal, "score"):  # a fresh attention is exactly avg: give it real scores
        with torch.no_grad():
            model.temporal.score.weight.normal_(0, 0.05, generator=torch.Generator().manual_seed(2))
    return model


def _whole_clip_features(cfg, model, tracklets, flip=False):
    """The reference: each tracklet's every frame in one clip through model(clip)."""
    data = TrackletDataset(tracklets, build_transforms(cfg, is_train=False), method="all")
    rows = []
    with torch.no_grad():
        for i in range(len(data)):
            clip = data[i]["images"].unsqueeze(0)
            f = model(clip)
            if flip:
                f = (f + model(torch.flip(clip, dims=[-1]))) / 2
            rows.append(f)
    return F.normalize(torch.cat(rows), dim=1)


@pytest.mark.parametrize("temporal", ["avg", "max", "attention"])
@pytest.mark.parametrize("flip", [False, True])
def test_frames_in_small_batches_give_each_whole_clips_feature(tmp_path, temporal, flip):
    cfg = _cfg(temporal)
    model = _model(cfg)
    tracklets = _tracklets(tmp_path)
    feats = extract_tracklet_features(model, tracklets, lambda items: build_test_loader(cfg, items, []),
                                      torch.device("cpu"), flip=flip)
    torch.testing.assert_close(feats.feats, _whole_clip_features(cfg, model, tracklets, flip), rtol=1e-4, atol=1e-5)
    assert feats.pids.tolist() == [0, 1, 2, 3] and feats.camids.tolist() == [0, 1, 0, 1]
    assert feats.paths == [t[0][0] for t in tracklets]
    # the evaluator's dispatch: tracklet items go this way, with the frames of DATALOADER.VIDEO.TEST_SAMPLER
    via_evaluator = extract_items(cfg, model, tracklets, torch.device("cpu"), flip)
    torch.testing.assert_close(via_evaluator.feats, feats.feats)


def test_evenly_takes_seq_len_frames_and_one_frame_is_that_frames_feature(tmp_path):
    tracklets = _tracklets(tmp_path)
    items = tracklet_frames(tracklets, "evenly", 2)
    # 2 frames each (the 1-frame tracklet's frame twice), labelled with the tracklet's index and camera
    assert [(os.path.basename(p), t, c) for p, t, c in items][:4] == [("001.png", 0, 0), ("003.png", 0, 0),
                                                                    ("000.png", 1, 1), ("000.png", 1, 1)]
    assert len(items) == 8 and len(tracklet_frames(tracklets, "all", 2)) == sum(LENGTHS)
    cfg = _cfg("avg")
    cfg.DATALOADER.VIDEO.TEST_SAMPLER, cfg.DATALOADER.VIDEO.SEQ_LEN = "evenly", 1
    model = _model(cfg)
    one = extract_items(cfg, model, tracklets, torch.device("cpu"), False)
    # the "evenly" frame of 1 is the middle one, floor(n / 2): the tracklet's feature is that image's
    single = extract_items(cfg, model, [(t[0][len(t[0]) // 2], t[1], t[2]) for t in tracklets],
                           torch.device("cpu"), False)
    torch.testing.assert_close(one.feats, single.feats, rtol=1e-4, atol=1e-5)


def test_bad_test_sampler_and_a_model_without_frame_pooling_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match=r"DATALOADER.VIDEO.TEST_SAMPLER 'random'.*valid: all, evenly"):
        tracklet_frames(_tracklets(tmp_path, (2,)), "random", 4)
    mgn = build(make_cfg("mgn"))
    with pytest.raises(ValueError, match="MGN does not pool a tracklet's frames.*META_ARCHITECTURE Baseline"):
        check_video_model(mgn)


def test_junk_gallery_tracklets_are_left_out_of_the_ranking(tmp_path):
    """A gallery tracklet with a junk pid (MARS's -1) changes nothing: the metrics equal those of the
    gallery without it, even when it is a copy of the query (the closest possible item)."""
    cfg = _cfg("avg", batch=8)
    model = _model(cfg)
    people = _tracklets(tmp_path, (3, 2, 4, 3, 2, 3))
    query = [(people[0][0], 7, 0), (people[1][0], 8, 0)]
    gallery = [(people[2][0], 7, 1), (people[3][0], 8, 1), (people[4][0], 9, 1), (people[5][0], 7, 1)]
    junk = [(people[0][0], -1, 1), (people[1][0], -1, 1)]
    plain = evaluate_model(cfg, model, query, gallery, rerank=False, flip=False)
    ignored = evaluate_model(cfg, model, query, gallery + junk, rerank=False, flip=False, junk_pids=(-1,))
    counted = evaluate_model(cfg, model, query, gallery + junk, rerank=False, flip=False)
    assert ignored.metrics == plain.metrics
    assert counted.metrics["plain"]["R-1"] == 0.0  # each query's copy ranks first, as a miss
    assert len(ignored.gallery) == 4
    with pytest.raises(ValueError, match="Every gallery item has a junk pid"):
        evaluate_model(cfg, model, query, junk, rerank=False, flip=False, junk_pids=(-1,))
