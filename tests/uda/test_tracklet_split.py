"""Cutting a tracklet at an identity switch (reid/uda/tracklet_split.py) and its use in clustering."""
import numpy as np
import pytest
import torch

from reid.uda.clustering import ClusterSettings, cluster_features
from reid.uda.tracklet_split import MIN_PART, split_tracklets

D = 64


def _people(n, seed=0):
    # a shared part, as re-ID features of people have: cosines between people are mostly positive
    rng = np.random.default_rng(seed)
    return rng.standard_normal(D) + rng.standard_normal((n, D))


def _crops(people, who, noise=0.3, seed=1):
    rng = np.random.default_rng(seed)
    return people[who] + noise * rng.standard_normal((len(who), D))


def _parts(labels, members):
    """The distinct labels over `members` (index arrays), one set per member group."""
    return [set(labels[m].tolist()) for m in members]


def test_an_identity_switch_is_cut_where_it_happens():
    people = _people(6)
    # tracklet 0: person 0 (8 crops); 1: person 1 x6 then person 2 x7 (one switch); 2: persons 3, 4, 5 (two)
    who = np.r_[[0] * 8, [1] * 6, [2] * 7, [3] * 5, [4] * 5, [5] * 5]
    tracklets = np.r_[[0] * 8, [1] * 13, [2] * 15]
    feats = _crops(people, who)
    # the crops arrive shuffled; positions give their order in time
    perm = np.random.default_rng(2).permutation(len(who))
    got = split_tracklets(torch.tensor(feats[perm]), tracklets[perm] + 7, np.arange(len(who))[perm], 0.5)
    labels = np.empty_like(got.tracklets)
    labels[perm] = got.tracklets
    # every part is exactly one person, and no person's crops are split
    for person in range(6):
        assert len(set(labels[who == person].tolist())) == 1
    assert len(set(labels.tolist())) == 6 and sorted(set(labels.tolist())) == list(range(6))
    assert (got.cut, got.parts) == (2, 5)


def test_one_person_with_an_odd_crop_is_not_cut():
    people = _people(2)
    feats = _crops(people, np.zeros(12, np.int64))
    feats[-1] = people[1]  # one crop of someone else (an occlusion) at the end: shorter than MIN_PART
    got = split_tracklets(torch.tensor(feats), np.zeros(12, np.int64), None, 0.5)
    assert (got.cut, got.parts) == (0, 0) and set(got.tracklets.tolist()) == {0}
    # the same switch with MIN_PART crops on each side is cut
    feats[-MIN_PART:] = _crops(people, np.ones(MIN_PART, np.int64), seed=3)
    got = split_tracklets(torch.tensor(feats), np.zeros(12, np.int64), None, 0.5)
    assert got.cut == 1 and got.tracklets[: 12 - MIN_PART].tolist() == [0] * (12 - MIN_PART)
    assert set(got.tracklets[12 - MIN_PART:].tolist()) == {1}


def test_the_threshold_decides_and_zero_never_cuts():
    people = _people(2)
    who = np.r_[[0] * 6, [1] * 6]
    feats = torch.tensor(_crops(people, who))
    f = feats / feats.norm(dim=1, keepdim=True)
    cosine = float(torch.nn.functional.cosine_similarity(f[:6].mean(0), f[6:].mean(0), dim=0))
    assert 0 < cosine < 0.9
    assert split_tracklets(feats, np.zeros(12), None, cosine + 1e-3).cut == 1
    assert split_tracklets(feats, np.zeros(12), None, cosine - 1e-3).cut == 0
    assert split_tracklets(feats, np.zeros(12), None, 0.0).cut == 0
    with pytest.raises(ValueError, match="one feature and one position per crop"):
        split_tracklets(feats, np.zeros(11), None, 0.5)


def test_clustering_keeps_the_parts_of_a_switched_tracklet_apart():
    # 20 people x 8 crops, each crop its own tracklet of one, except one tracklet that switched from
    # person 0 to person 1: kept whole it would join one person's cluster; cut, each half joins its own
    people = _people(20, seed=4)
    who = np.repeat(np.arange(20), 8)
    feats = _crops(people, who, noise=0.2).astype(np.float32)
    tracklets = np.arange(len(who))
    switched = np.r_[np.flatnonzero(who == 0)[:4], np.flatnonzero(who == 1)[:4]]
    tracklets[switched] = len(who)
    positions = np.arange(len(who))
    positions[switched] = np.arange(8)  # person 0's crops first, then person 1's
    settings = ClusterSettings(k1=10, k2=3, eps=0.5, min_samples=3)
    whole = cluster_features(torch.tensor(feats), settings, tracklets, positions=positions)
    assert len(set(whole.labels[switched].tolist())) == 1  # the must-link merges two people's crops
    cut = cluster_features(torch.tensor(feats), ClusterSettings(k1=10, k2=3, eps=0.5, min_samples=3, tracklet_split=0.5),
                           tracklets, positions=positions)
    assert cut.split.cut == 1 and cut.split.parts == 2
    assert cut.labels[switched[0]] == cut.labels[who == 0][-1] != cut.labels[switched[-1]] == cut.labels[who == 1][-1]


def test_config_key_is_checked():
    from reid.config import load_config
    from reid.uda.build import check_uda_settings

    cfg = load_config(None, ["UDA.TRACKLET_SPLIT", "1.5", "UDA.ENABLED", "True", "MODEL.LOSSES.NAMES", "[identity]"])
    with pytest.raises(ValueError, match=r"UDA.TRACKLET_SPLIT must lie in \[0, 1\)"):
        check_uda_settings(cfg, 10_000)
    assert ClusterSettings.from_cfg(load_config(None, ["UDA.TRACKLET_SPLIT", "0.5"])).tracklet_split == 0.5


def test_epoch_line_shows_the_stage_split_and_the_cuts():
    from reid.uda.hooks import format_cluster_record

    record = {"epoch": 2, "clusters": 40, "images": 500, "images_kept": 450, "eps": 0.5, "seconds": 12.34,
              "seconds_extract": 9.0, "seconds_distance": 2.0, "seconds_split": 0.01, "seconds_radius": 1.2,
              "seconds_dbscan": 0.1, "seconds_memory": 0.03, "tracklets_cut": 3, "tracklet_parts": 7}
    line = format_cluster_record(record)
    assert "3 tracklet(s) cut at an appearance jump into 7 parts" in line
    assert line.endswith("12.3 s (extract 9.0, neighbours 2.0, radius 1.2, DBSCAN 0.1)")  # stages under 0.05 s left out
    del record["tracklets_cut"]
    assert "tracklet" not in format_cluster_record(record)
