"""Label-free clustering health: constructed clusterings whose failure is known, and each figure
against a direct computation written here independently."""
import json

import numpy as np
import pytest
import torch
from sklearn.metrics import normalized_mutual_info_score

from reid.uda.health import (COLLAPSE_SPREAD, GIANT_SHARE, MANY_OUTLIERS, SINGLE_CAMERA_SHARE, cluster_health,
                             format_health, health_warnings)


def _record(labels, cameras=None, feats=None, previous=None):
    """An epoch's record as the clustering hook writes it: counts plus the health figures."""
    labels = np.asarray(labels)
    record = {"clusters": len(set(labels[labels >= 0].tolist())), "images": int(labels.size),
              "images_kept": int((labels >= 0).sum())}
    record.update(cluster_health(labels, cameras, feats, previous))
    return record


def _unit(n, d, seed):
    f = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return f / f.norm(dim=1, keepdim=True)


def _nmi_by_formula(u, v):
    """NMI (arithmetic mean of the entropies) from a dense contingency table, loop by loop."""
    us, vs = sorted(set(u)), sorted(set(v))
    table = np.zeros((len(us), len(vs)))
    for a, b in zip(u, v):
        table[us.index(a), vs.index(b)] += 1
    n = table.sum()
    rows, cols = table.sum(1), table.sum(0)
    mi = sum(table[i, j] / n * np.log(n * table[i, j] / (rows[i] * cols[j]))
             for i in range(len(us)) for j in range(len(vs)) if table[i, j] > 0)
    hu = -sum(r / n * np.log(r / n) for r in rows)
    hv = -sum(c / n * np.log(c / n) for c in cols)
    return mi / ((hu + hv) / 2)


# (a) cameras

def test_clusters_within_one_camera_warn_and_mixed_ones_do_not():
    labels = np.repeat(np.arange(10), 6)
    one_camera = np.arange(10).repeat(6) % 6  # every cluster from one camera
    rec = _record(labels, one_camera)
    assert rec["multi_camera_share"] == 0.0 and rec["cameras_per_cluster"] == 1.0
    warnings = health_warnings([rec], num_cameras=6)
    assert len(warnings) == 1 and "UDA.CAMERA_AWARE" in warnings[0] and "0% of the 10 clusters" in warnings[0]

    mixed = np.tile(np.arange(6), 10)  # every cluster sees all six cameras
    rec = _record(labels, mixed)
    assert rec["multi_camera_share"] == 1.0 and rec["cameras_per_cluster"] == 6.0
    assert health_warnings([rec], num_cameras=6) == []
    # just under and just over the threshold
    below = np.where(np.arange(10) < 4, 1, 0).repeat(6) * mixed  # 4 of 10 clusters multi-camera
    share = _record(labels, below)["multi_camera_share"]
    assert share == pytest.approx(0.4) and share < SINGLE_CAMERA_SHARE
    assert len(health_warnings([_record(labels, below)], num_cameras=6)) == 1
    above = np.where(np.arange(10) < 6, 1, 0).repeat(6) * mixed
    assert health_warnings([_record(labels, above)], num_cameras=6) == []
    # a one-camera deployment has nothing to span
    assert health_warnings([dict(rec, multi_camera_share=0.0)], num_cameras=1) == []


def test_cameras_per_cluster_against_sets():
    rng = np.random.default_rng(3)
    labels = rng.integers(-1, 12, 200)
    cameras = rng.integers(0, 4, 200)
    rec = cluster_health(labels, cameras)
    per = [len(set(cameras[labels == c].tolist())) for c in sorted(set(labels[labels >= 0].tolist()))]
    assert rec["cameras_per_cluster"] == pytest.approx(np.mean(per))
    assert rec["multi_camera_share"] == pytest.approx(np.mean([p > 1 for p in per]))


# (b) sizes and the giant cluster

def test_sizes_by_hand():
    labels = np.array([0] * 2 + [7] * 3 + [3] * 5 + [5] * 10 + [-1] * 5)  # label values need not be 0..C-1
    rec = cluster_health(labels, None)
    assert (rec["size_min"], rec["size_median"], rec["size_max"]) == (2, 4.0, 10)
    assert rec["size_p90"] == pytest.approx(8.5)  # position 0.9 * 3 = 2.7 between 5 and 10
    assert rec["size_mean"] == pytest.approx(5.0) and rec["largest_share"] == pytest.approx(0.5)
    assert rec["outlier_share"] == pytest.approx(0.2)


def test_one_giant_cluster_warns():
    labels = np.r_[np.repeat(np.arange(20), 4), np.full(200, 20)]  # 20 clusters of 4, one of 200
    rec = _record(labels)
    assert rec["largest_share"] == pytest.approx(200 / 280) and rec["largest_share"] > GIANT_SHARE
    warnings = health_warnings([rec], num_cameras=0)
    assert len(warnings) == 1 and "200 of the 280" in warnings[0] and "UDA.EPS" in warnings[0]


def test_three_people_do_not_make_a_giant():
    equal = _record(np.repeat(np.arange(3), 30))  # a third each: over GIANT_SHARE, but no giant
    assert equal["largest_share"] > GIANT_SHARE and health_warnings([equal], num_cameras=0) == []
    skewed = _record(np.r_[[0] * 2, [1] * 3, [2] * 40])  # one person photographed far more often
    assert skewed["size_max"] >= 8 * skewed["size_median"] and health_warnings([skewed], num_cameras=0) == []
    many = _record(np.repeat(np.arange(40), 5))  # many equal clusters
    assert health_warnings([many], num_cameras=0) == []


def test_a_large_cluster_near_the_median_size_is_no_giant():
    big = _record(np.r_[np.repeat(np.arange(3), 10), [3] * 30])  # half the images, but only 3x the median
    assert big["largest_share"] > GIANT_SHARE and health_warnings([big], num_cameras=0) == []


# (c) merging drift

def _history(counts, kept=1200):
    return [{"clusters": c, "images": 1500, "images_kept": kept, "size_mean": kept / c} for c in counts]


def test_clusters_merging_every_epoch_warn():
    warnings = health_warnings(_history([60, 50, 40, 30]), num_cameras=0)
    assert len(warnings) == 1
    assert "from 60 to 30" in warnings[0] and "20.0 to 40.0" in warnings[0] and "UDA.EPS" in warnings[0]
    # only the last three steps count: an earlier rise does not hide the trend
    assert len(health_warnings(_history([20, 60, 50, 40, 30]), num_cameras=0)) == 1


def test_no_merging_warning_without_a_steady_trend():
    assert health_warnings(_history([60, 50, 55, 40]), num_cameras=0) == []
    assert health_warnings(_history([50, 40, 30]), num_cameras=0) == []  # too short
    assert health_warnings(_history([700, 699, 698, 697]), num_cameras=0) == []  # jitter
    # fewer clusters but also fewer images kept: mean size flat, not merging
    flat = [{"clusters": c, "images": 1500, "images_kept": 20 * c, "size_mean": 20.0} for c in [60, 50, 40, 30]]
    assert health_warnings(flat, num_cameras=0) == []


# (d) NMI to the previous epoch

def test_nmi_of_a_renamed_partition_is_one():
    labels = np.array([0, 0, 1, 1, 1, 2, 2, -1])
    renamed = np.array([5, 5, 0, 0, 0, 9, 9, 3])
    assert cluster_health(labels, None, previous=renamed)["nmi_previous"] == pytest.approx(1.0)
    split = np.array([5, 4, 0, 0, 0, 9, 9, 3])
    assert cluster_health(labels, None, previous=split)["nmi_previous"] < 0.99


def test_nmi_of_a_hand_computed_case_and_the_unsplit_ones():
    # The images in a cluster in both epochs (outliers of either left out): u = [0, 0, 1, 1] last
    # epoch, v = [0, 0, 0, 1] now; cells (0, 0): 2, (1, 0): 1, (1, 1): 1; margins a = [2, 2], b = [3, 1].
    previous, labels = np.array([0, 0, 1, 1, -1, 2]), np.array([0, 0, 0, 1, 1, -1])
    mi = 2 / 4 * np.log(4 * 2 / (2 * 3)) + 1 / 4 * np.log(4 * 1 / (2 * 3)) + 1 / 4 * np.log(4 * 1 / (2 * 1))
    hu, hv = np.log(2), -(3 / 4 * np.log(3 / 4) + 1 / 4 * np.log(1 / 4))
    nmi = cluster_health(labels, None, previous=previous)["nmi_previous"]
    assert nmi == pytest.approx(mi / ((hu + hv) / 2)) == pytest.approx(0.343711, abs=1e-6)
    assert cluster_health(np.full(4, 5), None, previous=np.zeros(4))["nmi_previous"] == 1.0  # both one cluster
    assert cluster_health(np.array([0, 0, 1, 1]), None, previous=np.zeros(4))["nmi_previous"] == 0.0  # nothing shared


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nmi_against_the_formula_and_without_outliers(seed):
    rng = np.random.default_rng(seed)
    previous = rng.integers(-1, 5, 60)
    labels = np.where(rng.random(60) < 0.6, previous, rng.integers(-1, 6, 60))
    both = (labels >= 0) & (previous >= 0)
    nmi = cluster_health(labels, None, previous=previous)["nmi_previous"]
    assert nmi == pytest.approx(_nmi_by_formula(previous[both].tolist(), labels[both].tolist()))
    assert nmi == pytest.approx(normalized_mutual_info_score(previous[both], labels[both]))
    # an outlier's label in the other epoch does not count
    i = np.flatnonzero((labels < 0) & (previous >= 0))[0]
    moved = previous.copy()
    moved[i] = (previous[i] + 1) % 5
    assert cluster_health(labels, None, previous=moved)["nmi_previous"] == pytest.approx(nmi)
    j = np.flatnonzero((previous < 0) & (labels >= 0))[0]
    relabelled = labels.copy()
    relabelled[j] = (labels[j] + 1) % 6
    assert cluster_health(relabelled, None, previous=previous)["nmi_previous"] == pytest.approx(nmi)


# (e) feature spread and collapse

@pytest.mark.parametrize("d", [4, 64])
def test_feature_spread_is_the_mean_squared_distance_to_the_mean(d):
    f = _unit(300, d, d)
    direct = ((f - f.mean(0)) ** 2).sum(1).mean().item()
    assert cluster_health(np.zeros(300, np.int64), None, f)["feature_spread"] == pytest.approx(direct, rel=1e-5)


def test_identical_features_have_collapsed():
    f = _unit(1, 16, 0).repeat(80, 1)
    rec = _record(np.repeat(np.arange(10), 8), feats=f)
    assert rec["feature_spread"] == pytest.approx(0.0, abs=1e-6) and rec["feature_spread"] >= 0.0
    assert rec["cluster_spread"] == pytest.approx(0.0, abs=1e-6)
    warnings = health_warnings([rec], num_cameras=0)
    assert len(warnings) == 1 and "collapsed" in warnings[0] and "SOLVER.BASE_LR" in warnings[0]
    healthy = _record(np.repeat(np.arange(10), 8), feats=_unit(80, 16, 1))
    assert healthy["feature_spread"] > COLLAPSE_SPREAD and health_warnings([healthy], num_cameras=0) == []


# (f) cluster spread

@pytest.mark.parametrize("seed", [0, 1])
def test_cluster_spread_against_per_image_cosines(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(-1, 7, 150)
    f = _unit(150, 32, seed)
    cos = []
    for i in np.flatnonzero(labels >= 0):
        c = f[torch.from_numpy(labels == labels[i])].mean(0)
        cos.append(torch.dot(f[i], c / c.norm()).item())
    assert cluster_health(labels, None, f)["cluster_spread"] == pytest.approx(1 - np.mean(cos), rel=1e-5)


def test_unnormalised_features_are_measured_by_direction():
    f = _unit(50, 8, 4)
    labels = np.repeat(np.arange(5), 10)
    scaled = f * torch.linspace(0.5, 3, 50)[:, None]
    a, b = cluster_health(labels, None, f), cluster_health(labels, None, scaled)
    assert a["feature_spread"] == pytest.approx(b["feature_spread"], rel=1e-5)
    assert a["cluster_spread"] == pytest.approx(b["cluster_spread"], rel=1e-5)


# (g) outliers, absent keys, JSON, one-line warnings, the log fragment

def test_many_outliers_warn():
    labels = np.r_[np.repeat(np.arange(5), 4), np.full(30, -1)]
    rec = _record(labels)
    assert rec["outlier_share"] == pytest.approx(0.6) and rec["outlier_share"] > MANY_OUTLIERS
    warnings = health_warnings([rec], num_cameras=0)
    assert len(warnings) == 1 and "60% of the images are outliers" in warnings[0] and "30 of 50" in warnings[0]
    assert health_warnings([_record(np.r_[np.repeat(np.arange(5), 6), np.full(20, -1)])], num_cameras=0) == []


def test_keys_absent_when_they_do_not_apply():
    labels = np.repeat(np.arange(4), 5)
    base = cluster_health(labels, None)
    for key in ("multi_camera_share", "cameras_per_cluster", "nmi_previous", "feature_spread", "cluster_spread"):
        assert key not in base
    assert "multi_camera_share" not in cluster_health(labels, np.full(20, 3))  # one camera
    assert "multi_camera_share" in cluster_health(labels, np.r_[np.full(19, 3), 1])
    # only one image in a cluster in both epochs: nothing to compare
    assert "nmi_previous" not in cluster_health(labels, None, previous=np.r_[0, np.full(19, -1)])
    empty = cluster_health(np.full(6, -1), np.arange(6), _unit(6, 4, 0), previous=np.zeros(6, np.int64))
    assert empty["outlier_share"] == 1.0
    assert not {"size_min", "size_median", "size_max", "largest_share", "multi_camera_share", "nmi_previous",
                "cluster_spread"} & set(empty)
    assert cluster_health(np.zeros(0, np.int64), None) == {}
    with pytest.raises(ValueError, match="one value per image"):
        cluster_health(labels, np.zeros(3))
    with pytest.raises(ValueError, match="one row per image"):
        cluster_health(labels, None, _unit(3, 4, 0))


def test_values_are_plain_json():
    rng = np.random.default_rng(0)
    labels = rng.integers(-1, 8, 100)
    rec = cluster_health(labels, rng.integers(0, 3, 100), _unit(100, 16, 0), previous=rng.integers(-1, 8, 100))
    assert len(rec) == 12
    assert all(type(v) in (int, float) for v in rec.values())
    assert json.loads(json.dumps(rec, allow_nan=False)) == rec
    for case in (cluster_health(np.full(5, -1), np.zeros(5), _unit(5, 4, 1)), cluster_health(labels, None)):
        json.dumps(case, allow_nan=False)


def test_every_warning_is_one_line_and_healthy_gives_none():
    sick = [{"clusters": c, "images": 2000, "images_kept": 800, "size_mean": 800 / c} for c in (60, 50, 40, 30)]
    sick[-1].update({"multi_camera_share": 0.05, "largest_share": 0.5, "size_max": 400, "size_median": 10.0,
                     "outlier_share": 0.6, "feature_spread": 0.01})
    warnings = health_warnings(sick, num_cameras=6)
    assert len(warnings) == 5
    assert all("\n" not in w and w.strip() == w and w for w in warnings)
    healthy = dict(sick[-1], multi_camera_share=0.7, largest_share=0.05, size_max=40, outlier_share=0.1,
                   feature_spread=0.6)
    assert health_warnings(sick[:-1] + [healthy], num_cameras=6) == [warnings[2]]  # only the trend stays
    assert health_warnings([healthy], num_cameras=6) == []
    assert health_warnings([], num_cameras=6) == []


def test_format_health():
    rec = {"size_min": 2, "size_median": 6.0, "size_max": 31, "outlier_share": 0.12, "multi_camera_share": 0.64,
           "nmi_previous": 0.9123, "feature_spread": 0.41, "cluster_spread": 0.123}
    assert format_health(rec) == ("sizes 2/6/31 (min/median/max), 12% outliers, 64% of clusters multi-camera, "
                                  "NMI to last epoch 0.912, feature spread 0.41, cluster spread 0.12")
    assert format_health({"outlier_share": 1.0, "size_median": 4.5}) == "100% outliers"
    assert format_health({}) == ""


def test_advice_names_only_what_the_run_does_not_use_yet():
    from reid.uda.health import RunOptions

    labels = np.repeat(np.arange(10), 6)
    rec = _record(labels, np.arange(10).repeat(6) % 6)  # every cluster from one camera
    plain = health_warnings([rec], 6)[0]
    assert "Set UDA.CAMERA_NEIGHBOURS true and UDA.CAMERA_AWARE true" in plain
    half = health_warnings([rec], 6, RunOptions(camera_neighbours=True))[0]
    assert "Set UDA.CAMERA_AWARE true" in half and "CAMERA_NEIGHBOURS true" not in half
    both = health_warnings([rec], 6, RunOptions(camera_aware=True, camera_neighbours=True))[0]
    assert "Both camera-aware options are on already" in both and "Set UDA" not in both
    outliers = dict(_record(np.r_[labels, np.full(100, -1)], None))
    assert "Raise UDA.EPS (or set it to auto)" in health_warnings([outliers], 0)[0]
    auto = health_warnings([outliers], 0, RunOptions(auto_eps=True))[0]
    assert "Raise UDA.EPS_RANGE's last radius, or set UDA.EPS to a number" in auto and "set it to auto" not in auto
