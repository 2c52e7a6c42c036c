"""Tracklet-aware clustering: every tracklet ends in one cluster (UDA.TRACKLET_REGEX)."""
import numpy as np
import pytest
import torch

from reid.tracking.to_reid import TRACKLET_REGEX
from reid.uda import ClusterSettings, cluster_features
from reid.uda.build import tracklets_from_names
from reid.uda.clustering import tracklet_majority


def test_each_tracklet_takes_the_majority_cluster_of_its_crops():
    labels = np.array([0, 0, 1, -1, 2, 2, -1, -1, -1, 1, 3])
    tracklets = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 3])
    # 0: two votes for 0; 1: cluster 2 (its outlier joins); 2: all outliers stay; 3: a tie goes to the lower label;
    # cluster 3 loses its only crop and the rest keep their order
    assert tracklet_majority(labels, tracklets).tolist() == [0, 0, 0, 0, 2, 2, 2, -1, -1, 1, 1]
    assert tracklet_majority(np.array([1, 1, 2, 0]), np.array([5, 5, 5, 0])).tolist() == [1, 1, 1, 0]
    assert tracklet_majority(np.array([-1, -1]), np.array([0, 1])).tolist() == [-1, -1]


@pytest.mark.slow
def test_clustering_keeps_a_tracklet_together():
    rng = np.random.default_rng(0)
    centres = np.eye(8)[:2] * 10
    feats = np.concatenate([centres[0] + rng.normal(0, 0.3, (12, 8)), centres[1] + rng.normal(0, 0.3, (12, 8))])
    feats = torch.nn.functional.normalize(torch.tensor(feats, dtype=torch.float32), dim=1)
    settings = ClusterSettings(k1=6, k2=1, eps=0.6, min_samples=3)
    plain = cluster_features(feats, settings).labels
    # two people, well apart; crops 1 and 7 of person A are outliers at this radius
    assert set(plain[:12].tolist()) == {plain[0], -1} and plain[1] == plain[7] == -1 and plain[0] != plain[12] >= 0
    # a tracker joined 8 crops of person A with 2 of person B into tracklet 0 (outliers included); the rest are
    # tracklets of one crop, left as they were
    tracklets = np.arange(24)
    tracklets[list(range(8)) + [12, 13]] = 0
    labels = cluster_features(feats, settings, tracklets).labels
    assert set(labels[tracklets == 0].tolist()) == {plain[0]}
    assert (labels[14:] == plain[14:]).all() and (labels[8:12] == plain[8:12]).all()


def test_tracklets_from_the_names_tracks_to_reid_writes():
    paths = ["c/s1_c1_t000011_f000001.jpg", "c/s1_c1_t000012_f000001.jpg", "c/s2_c2_t000011_f000006.jpg",
             "d/s1_c1_t000011_f000006.jpg"]
    assert tracklets_from_names(paths, TRACKLET_REGEX).tolist() == [0, 1, 2, 0]
    with pytest.raises(ValueError, match=r"Image 'x.jpg': its file name does not match UDA.TRACKLET_REGEX"):
        tracklets_from_names(paths + ["x.jpg"], TRACKLET_REGEX)
    with pytest.raises(ValueError, match=r"UDA.TRACKLET_REGEX .* has 2 groups; it needs exactly one"):
        tracklets_from_names(paths, r"_t(\d+)_(f)")
