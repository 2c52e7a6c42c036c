"""UDA.EPS auto: the radius from the cluster-count curve, its log line and its refusals."""
import numpy as np
import pytest
import scipy.sparse as sp

from reid.config import load_config
from reid.config.config import ConfigError
from reid.uda.auto_eps import MIN_IMAGES, check_auto_images, check_eps_range, choose_eps, eps_grid
from reid.uda.clustering import ClusterSettings, cluster_features, dbscan


def _counting(curve):
    """A stand-in DBSCAN whose cluster count at each radius is `curve[eps]`."""
    def run(graph, eps, min_samples):
        return np.arange(curve[round(eps, 6)]) if curve[round(eps, 6)] else np.full(3, -1)
    return run


def test_grid_spacing_and_ends():
    assert eps_grid(0.3, 0.4).tolist() == [0.3, 0.325, 0.35, 0.375, 0.4]
    assert eps_grid(0.5, 0.56).tolist() == [0.5, 0.525, 0.55]


@pytest.mark.parametrize("counts,want", [
    # one plateau 0.325-0.375 (96-100, within 10% of each other): its middle
    ([10, 96, 100, 97, 40, 20], 0.35),
    # the longer plateau wins over a higher peak; even length: the lower middle
    ([80, 100, 60, 58, 57, 59], 0.375),
    # equal lengths: more clusters on average
    ([60, 62, 10, 99, 100, 5], 0.375),
    # flat but nearly everything merged (few clusters) does not qualify
    ([100, 30, 5, 5, 5, 5], 0.3),
    # nothing ever clusters: the whole range is flat at 0; its middle
    ([0, 0, 0, 0, 0, 0], 0.35),
])
def test_choice_is_the_middle_of_the_widest_stable_run(counts, want):
    grid = eps_grid(0.3, 0.425)
    choice = choose_eps(sp.csr_matrix((3, 3)), 4, grid, _counting(dict(zip(grid.tolist(), counts))))
    assert choice.eps == pytest.approx(want)
    assert choice.counts == tuple(counts)
    line = choice.reason()
    assert "\n" not in line and f"{want:.3f}" in line
    assert choice.record()["eps"] == pytest.approx(want)


def test_auto_finds_a_radius_that_separates_blobs():
    # 30 tight people x 8 images: the chosen radius recovers them (a fixed tiny radius does not)
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((30, 32))
    x = np.repeat(centres, 8, axis=0) + 0.15 * rng.standard_normal((240, 32))
    truth = np.repeat(np.arange(30), 8)
    auto = ClusterSettings(k1=10, k2=3, eps=0.8, min_samples=3, auto_eps=True, eps_range=(0.05, 0.8))
    got = cluster_features(x.astype(np.float32), auto)
    assert got.eps_choice is not None and got.eps == got.eps_choice.eps
    assert got.num_clusters == 30
    assert all(len(set(truth[got.labels == k])) == 1 for k in range(30))
    # the same graph at the chosen radius gives the same labels as a fixed radius of that value
    fixed = cluster_features(x.astype(np.float32), ClusterSettings(k1=10, k2=3, eps=got.eps, min_samples=3))
    np.testing.assert_array_equal(fixed.labels, got.labels)


def test_config_takes_auto_or_a_number_and_refuses_others():
    cfg = load_config(None, ["UDA.EPS", "auto"])
    s = ClusterSettings.from_cfg(cfg)
    assert s.auto_eps and s.eps == pytest.approx(0.8)
    assert not ClusterSettings.from_cfg(load_config(None, ["UDA.EPS", "0.55"])).auto_eps
    with pytest.raises(ConfigError, match="UDA.EPS expects a number or 'auto'"):
        load_config(None, ["UDA.EPS", "automatic"])
    with pytest.raises(ValueError, match=r"UDA.EPS_RANGE must satisfy"):
        ClusterSettings.from_cfg(load_config(None, ["UDA.EPS", "auto", "UDA.EPS_RANGE", "[0.8, 0.3]"]))
    # a range that is not used does not stop a run with a fixed radius
    assert not ClusterSettings.from_cfg(load_config(None, ["UDA.EPS_RANGE", "[0.8, 0.3]"])).auto_eps
    with pytest.raises(ValueError, match="two radii"):
        check_eps_range([0.3])
    with pytest.raises(ValueError, match="UDA.CAMERA_NEIGHBOURS finds its camera-balanced lists with the exact pass"):
        ClusterSettings.from_cfg(load_config(None, ["UDA.CAMERA_NEIGHBOURS", "True", "UDA.NEIGHBOURS", "ivf"]))


def test_too_few_images_is_one_line():
    check_auto_images(MIN_IMAGES)
    with pytest.raises(ValueError) as e:
        check_auto_images(MIN_IMAGES - 1)
    assert "UDA.EPS" in str(e.value) and "\n" not in str(e.value) and str(MIN_IMAGES - 1) in str(e.value)


def test_dbscan_reads_only_pairs_within_the_radius():
    # the basis of one graph for every radius tried: DBSCAN ignores stored pairs beyond eps
    g = sp.csr_matrix(np.array([[0, 0.2, 0.5], [0.2, 0, 0.5], [0.5, 0.5, 0]]))
    assert dbscan(g, 0.3, 2).tolist() == [0, 0, -1]
    assert dbscan(g, 0.6, 2).tolist() == [0, 0, 0]


def test_too_few_clusters_under_auto_names_the_range_not_the_radius():
    from reid.uda.clustering import Clusters
    from reid.uda.hooks import NoClustersError, check_clusters

    auto = ClusterSettings(auto_eps=True, eps=0.8, eps_range=(0.3, 0.8))
    with pytest.raises(NoClustersError) as e:
        check_clusters(Clusters(np.full(50, -1), 0, 0.0, 0.0, 0.3), 50, 4, auto)
    msg = str(e.value)
    assert "at UDA.EPS auto (0.3)" in msg and "Raise UDA.EPS_RANGE's last radius, or set UDA.EPS to a number" in msg
    assert "\n" not in msg
    with pytest.raises(NoClustersError, match="Lower UDA.EPS_RANGE's first radius"):
        check_clusters(Clusters(np.zeros(50, np.int64), 1, 0.0, 0.0, 0.8), 50, 4, auto)


def _with_outliers(curve):
    """A stand-in DBSCAN: at each radius `curve[eps]` = (clusters, outlier share) over 1,000 images,
    clusters of equal size."""
    def run(graph, eps, min_samples):
        count, share = curve[round(eps, 6)]
        out = int(round(1000 * share))
        return np.r_[np.full(out, -1), np.arange(1000 - out) % count].astype(np.int64)
    return run


def test_chooser_avoids_radii_that_raise_their_own_warning():
    from reid.uda.auto_eps import radius_warnings
    from reid.uda.health import MANY_OUTLIERS, RunOptions, cluster_health, health_warnings

    grid = eps_grid(0.3, 0.425)
    # the widest stable run (0.3-0.375) leaves 70% outliers; 0.4-0.425 are stable and healthy
    curve = dict(zip(grid.tolist(), [(100, 0.7), (100, 0.7), (100, 0.7), (100, 0.7), (60, 0.2), (58, 0.1)]))
    choice = choose_eps(sp.csr_matrix((3, 3)), 4, grid, _with_outliers(curve))
    assert choice.eps == pytest.approx(0.4) and choice.plateau == (0.4, 0.425)
    assert choice.warned == (True,) * 4 + (False,) * 2 and not choice.every_radius_warned
    assert choice.outliers[0] > MANY_OUTLIERS
    labels = _with_outliers(curve)(None, choice.eps, 4)
    record = {"clusters": 60, "images": 1000, "images_kept": int((labels >= 0).sum())}
    record.update(cluster_health(labels, None))
    assert health_warnings([record], 0, RunOptions(auto_eps=True)) == [] == radius_warnings(labels)
    assert "among the radii whose clusters raise no health warning" in choice.reason()
    assert choice.record()["eps_outliers"]["0.300"] == pytest.approx(0.7)
    # the old rule alone (no warnings anywhere) still picks the widest run's middle
    healthy = dict(zip(grid.tolist(), [(100, 0.1)] * 4 + [(60, 0.1), (58, 0.1)]))
    assert choose_eps(sp.csr_matrix((3, 3)), 4, grid, _with_outliers(healthy)).eps == pytest.approx(0.325)


def test_when_every_radius_warns_the_warning_names_the_end_of_the_range():
    # 30 tight people x 8 images and 300 scattered images that never cluster: more than half are
    # outliers at every radius, so no radius is free of the warning; it must say to widen the range
    from reid.uda.health import cluster_health, health_warnings, RunOptions

    rng = np.random.default_rng(1)
    centres = rng.standard_normal((30, 32))
    x = np.r_[np.repeat(centres, 8, axis=0) + 0.15 * rng.standard_normal((240, 32)), rng.standard_normal((300, 32))]
    # (up to 0.25 more than half stay outliers; from 0.5 on the scattered ones form loose clusters)
    auto = ClusterSettings(k1=10, k2=3, eps=0.25, min_samples=3, auto_eps=True, eps_range=(0.05, 0.25))
    got = cluster_features(x.astype(np.float32), auto)
    assert got.eps_choice.every_radius_warned and got.eps_choice.record()["eps_all_warned"] is True
    assert "every radius left a health warning" in got.eps_choice.reason()
    record = {"clusters": got.num_clusters, "images": len(x), "images_kept": got.kept}
    record.update(cluster_health(got.labels, None))
    (warning,) = health_warnings([record], 0, RunOptions(auto_eps=True))
    assert "outliers" in warning and "Raise UDA.EPS_RANGE's last radius" in warning
    # a range reaching the radii where most images cluster chooses one of them, and no warning follows
    wide = cluster_features(x.astype(np.float32), ClusterSettings(k1=10, k2=3, eps=0.6, min_samples=3, auto_eps=True,
                                                                  eps_range=(0.05, 0.6)))
    assert not wide.eps_choice.every_radius_warned and wide.kept > len(x) / 2
