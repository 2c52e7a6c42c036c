"""ClusterEachEpoch on its own (a stand-in trainer): UDA.EPS auto in the record and the log, and
a resumed checkpoint whose pseudo-labels no longer fit the run (memory kind or images changed)."""
import logging
from types import SimpleNamespace

import numpy as np
import torch

from reid.uda.camera_proxies import CameraProxyMemory
from reid.uda.cluster_memory import ClusterMemory
from reid.uda.clustering import ClusterSettings
from reid.uda.hooks import ClusterEachEpoch


class _Sampler:
    def __init__(self):
        self.labels = None

    def set_labels(self, labels):
        self.labels = np.asarray(labels)


def _blobs(ids=30, per=8, seed=0):
    rng = np.random.default_rng(seed)
    x = np.repeat(rng.standard_normal((ids, 32)), per, axis=0) + 0.15 * rng.standard_normal((ids * per, 32))
    x = torch.nn.functional.normalize(torch.from_numpy(x.astype(np.float32)), dim=1)
    return x, np.tile(np.arange(2), ids * per // 2)


def _hook(memory, settings, feats, cams, num_images=None):
    hook = ClusterEachEpoch(lambda model: feats, settings, _Sampler(), memory, 4, cameras=cams,
                            num_images=num_images if num_images is not None else len(feats))
    hook.trainer = SimpleNamespace(epoch=0, iter=0, start_batch=0, model=None, log_records=[])
    return hook


def test_eps_auto_choice_is_recorded_and_logged(caplog):
    feats, cams = _blobs()
    hook = _hook(ClusterMemory(32), ClusterSettings(10, 3, 0.8, 3, auto_eps=True, eps_range=(0.05, 0.8)), feats, cams)
    with caplog.at_level(logging.INFO, logger="reid.uda.hooks"):
        hook.before_epoch()
    (record,) = hook.trainer.log_records
    assert record["clusters"] == 30 and record["eps_plateau"][0] <= record["eps"] <= record["eps_plateau"][1]
    assert record["eps_curve"][f"{record['eps']:.3f}"] == 30
    assert "UDA.EPS auto chose" in caplog.text and f"at eps {record['eps']:.3g}" in caplog.text
    assert hook.sampler.labels.max() + 1 == 30 and "proxies" not in record


def _resumed(memory_saved, memory_now, n_saved, n_now, caplog):
    """A checkpoint written mid-epoch by one hook, loaded by another; the warnings and whether
    the new hook clustered again."""
    feats, cams = _blobs()
    settings = ClusterSettings(10, 3, 0.5, 3)
    first = _hook(memory_saved, settings, feats[:n_saved], cams[:n_saved])
    first.before_epoch()
    state = first.state_dict()
    again = _hook(memory_now, settings, feats[:n_now], cams[:n_now])
    again.load_state_dict(state)
    again.trainer.start_batch = 3  # mid-epoch, same epoch
    with caplog.at_level(logging.INFO, logger="reid.uda.hooks"):
        again.before_epoch()
    return again, caplog.text


def test_mid_epoch_resume_reuses_labels_only_when_they_fit(caplog):
    hook, log = _resumed(CameraProxyMemory(32), CameraProxyMemory(32), 240, 240, caplog)
    assert "resumes with its pseudo-labels" in log and not hook.trainer.log_records
    caplog.clear()
    # UDA.CAMERA_AWARE switched off between the two commands: the proxy labels must not train clusters
    hook, log = _resumed(CameraProxyMemory(32), ClusterMemory(32), 240, 240, caplog)
    assert "holds camera proxies but this run trains with clusters" in log and len(hook.trainer.log_records) == 1
    assert hook.memory.num_classes == hook.trainer.log_records[0]["clusters"]
    caplog.clear()
    # images added to the training set between the two commands
    hook, log = _resumed(ClusterMemory(32), ClusterMemory(32), 200, 240, caplog)
    assert "pseudo-labels are for 200 images but the training set now has 240" in log
    assert len(hook.sampler.labels) == 240 and "nmi_previous" not in hook.trainer.log_records[0]
