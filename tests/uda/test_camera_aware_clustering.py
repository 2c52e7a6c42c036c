"""The camera failure on features we can make: every camera adds its own offset (light, background,
viewpoint), larger than what tells people apart. Plain clustering then groups by camera, the
health check says so, and camera-balanced neighbours recover the people."""
import numpy as np
import pytest

from reid.uda.clustering import ClusterSettings, cluster_features
from reid.uda.health import cluster_health, health_warnings
from reid.uda.scores import pseudo_label_scores


def camera_features(ids=40, cams=3, per=4, cam_shift=1.0, noise=1.0, seed=0, dim=64):
    """(features ``[ids * cams * per, dim]`` unit rows, pids, camids): identity + camera offset + noise."""
    rng = np.random.default_rng(seed)
    unit = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    people, offsets = unit(rng.standard_normal((ids, dim))), unit(rng.standard_normal((cams, dim)))
    pid = np.repeat(np.arange(ids), cams * per)
    cam = np.tile(np.repeat(np.arange(cams), per), ids)
    x = people[pid] + cam_shift * offsets[cam] + noise * rng.standard_normal((len(pid), dim)) / np.sqrt(dim)
    return unit(x).astype(np.float32), pid, cam


@pytest.mark.parametrize("cam_shift", [0.8, 1.3])
def test_camera_balanced_neighbours_recover_people_that_plain_clustering_splits_by_camera(cam_shift):
    x, pid, cam = camera_features(cam_shift=cam_shift)
    results = {}
    for balanced in (False, True):
        got = cluster_features(x, ClusterSettings(10, 3, 0.5, 3, camera_neighbours=balanced), cameras=cam)
        health = cluster_health(got.labels, cam)
        results[balanced] = (pseudo_label_scores(got.labels, pid)["ari"], health,
                             health_warnings([dict(health, clusters=got.num_clusters)], num_cameras=3))
    (plain_ari, plain_health, plain_warn), (cam_ari, cam_health, cam_warn) = results[False], results[True]
    assert plain_health["multi_camera_share"] < 0.2 and cam_health["multi_camera_share"] > 0.9
    assert cam_ari > plain_ari + 0.3 and cam_ari > 0.8
    # the failure is visible without labels, and the advice names the fix
    assert any("UDA.CAMERA_NEIGHBOURS" in w for w in plain_warn)
    assert not any("span more than one camera" in w for w in cam_warn)


def test_camera_neighbours_without_cameras_is_refused():
    x, _, _ = camera_features(ids=5)
    with pytest.raises(ValueError, match="UDA.CAMERA_NEIGHBOURS needs the camera id of every image"):
        cluster_features(x, ClusterSettings(5, 2, 0.5, 2, camera_neighbours=True))
