"""Video evaluation equals torchreid 0.2.5's: its video engine's own pooling of a clip's frame features
(VideoSoftmaxEngine.extract_features, avg and max, run from its source distribution) against our temporal
poolings (reid/modeling/temporal.py) on the same frame features, then CMC / mAP of the pooled tracklet
features against torchreid's rank.py and distance.py."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from reid.evaluation.rank import evaluate_rank_from_features
from reid.modeling.temporal import build_temporal
from tests._references import torchreid_module


def _torchreid_engine(pooling, encoder):
    video = torchreid_module("reid/engine/video/softmax.py",
                             stubs={"torchreid.reid.engine.image": {"ImageSoftmaxEngine": object}})
    engine = video.VideoSoftmaxEngine.__new__(video.VideoSoftmaxEngine)  # its own method, not its trainer
    engine.model, engine.pooling_method = encoder, pooling
    return engine


def _clips(seed, num, people, cameras, seq_len=6, size=(8, 4)):
    """`num` clips of `seq_len` frames [num, seq_len, 3, H, W]: each person's own look plus noise per frame."""
    rng = np.random.default_rng(seed)
    pids = rng.integers(0, people, num)
    looks = np.random.default_rng(99).normal(size=(people, 3, *size))  # one look per person, query and gallery
    frames = looks[pids][:, None] + rng.normal(scale=1.5, size=(num, seq_len, 3, *size))
    return torch.tensor(frames, dtype=torch.float32), pids, rng.integers(0, cameras, num)


@pytest.mark.parametrize("pooling", ["avg", "max"])
def test_pooled_tracklet_features_and_their_cmc_map_equal_torchreids(pooling):
    torch.manual_seed(0)
    encoder = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 4, 24)).eval()  # a frame -> [D]
    q, q_pids, q_cams = _clips(0, 30, 25, 3)
    g, g_pids, g_cams = _clips(1, 120, 25, 3)
    engine = _torchreid_engine(pooling, encoder)
    temporal = build_temporal(pooling, 24)
    with torch.no_grad():
        theirs = [engine.extract_features(clips) for clips in (q, g)]
        ours = [temporal(encoder(clips.flatten(0, 1)).view(clips.shape[0], clips.shape[1], -1)) for clips in (q, g)]
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    with warnings.catch_warnings():  # "Cython evaluation ... unavailable": its Python evaluation is the reference
        warnings.simplefilter("ignore")
        rank = torchreid_module("reid/metrics/rank.py")
    distance = torchreid_module("reid/metrics/distance.py")
    distmat = distance.compute_distance_matrix(theirs[0], theirs[1], "euclidean").numpy().astype(np.float64)
    assert all(len(np.unique(row)) == len(row) for row in distmat)  # no ties: torchreid orders them arbitrarily
    cmc, mAP = rank.evaluate_rank(distmat, q_pids, g_pids, q_cams, g_cams, max_rank=20, use_cython=False)
    result = evaluate_rank_from_features(ours[0], ours[1], q_pids, g_pids, q_cams, g_cams, metric="euclidean",
                                         max_rank=20)
    np.testing.assert_allclose(result["cmc"], cmc, rtol=0, atol=1e-6)
    assert result["mAP"] == pytest.approx(mAP, abs=1e-6) and 0.2 < mAP < 1.0
