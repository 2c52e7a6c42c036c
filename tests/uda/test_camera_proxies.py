"""The camera-aware proxy memory: proxies from clusters and cameras, and CAP's loss against a
per-image computation written from the formulas."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from reid.uda.camera_proxies import CameraProxyMemory
from reid.uda.camera_proxies import proxy_labels
from reid.modeling.loss_assembly import LossAssembly


def test_proxy_labels_one_per_cluster_and_camera():
    labels = np.array([0, 0, 0, 1, 1, -1, 2, 2])
    cams = np.array([0, 1, 1, 0, 0, 1, 2, 0])
    proxies, cluster, camera = proxy_labels(labels, cams)
    # (0,0) (0,1) (1,0) (2,0) (2,2) in order
    assert cluster.tolist() == [0, 0, 1, 2, 2]
    assert camera.tolist() == [0, 1, 0, 0, 2]
    assert proxies.tolist() == [0, 1, 1, 2, 2, -1, 4, 3]
    with pytest.raises(ValueError, match="same shape"):
        proxy_labels(labels, cams[:3])


def _reference_loss(q, w, targets, cluster, camera, tau, lam, hard):
    """Per image, from the module docstring's formulas."""
    q = F.normalize(q.double(), dim=1)
    w = w.double()
    per_cam = {}
    inter = []
    for b in range(len(targets)):
        t = int(targets[b])
        s = (q[b] @ w.T) / tau
        same = [k for k in range(len(w)) if camera[k] == camera[t]]
        l_intra = -(s[t] - torch.logsumexp(s[same], 0))
        per_cam.setdefault(int(camera[t]), []).append(l_intra)
        pos = [k for k in range(len(w)) if cluster[k] == cluster[t]]
        neg = sorted([k for k in range(len(w)) if cluster[k] != cluster[t]], key=lambda k: -float(s[k]))[:hard]
        log_z = torch.logsumexp(s[pos + neg], 0)
        inter.append(sum(log_z - s[p] for p in pos) / len(pos))
    l_intra = sum(sum(v) / len(v) for v in per_cam.values())
    return l_intra + lam * sum(inter) / len(inter)


@pytest.mark.parametrize("hard", [1, 3, 50])
def test_loss_matches_the_formulas(hard):
    g = torch.Generator().manual_seed(0)
    labels = np.array([0, 0, 1, 1, 1, 2, 2, 3, 3, 3])
    cams = np.array([0, 1, 0, 1, 2, 0, 2, 1, 1, 2])
    mem = CameraProxyMemory(8, temperature=0.1, momentum=0.2, inter_weight=0.7, hard_negatives=hard)
    proxies = mem.assign(labels, cams)
    k = int(proxies.max()) + 1
    mem.reset(torch.randn(k, 8, generator=g))
    q = torch.randn(6, 8, generator=g, requires_grad=True)
    targets = torch.from_numpy(proxies[[0, 1, 3, 4, 6, 9]])
    got = mem.loss(q, targets)
    want = _reference_loss(q.detach(), mem.weight, targets, mem.proxy_cluster, mem.proxy_camera, 0.1, 0.7, hard)
    assert float(got.detach()) == pytest.approx(float(want), rel=1e-5)
    got.backward()
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_loss_assembly_uses_the_heads_own_loss():
    mem = CameraProxyMemory(4, temperature=0.5)
    proxies = mem.assign(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 1]))
    mem.reset(torch.eye(4))
    feats = torch.randn(4, 4)
    targets = torch.from_numpy(proxies)
    assembly = LossAssembly(names=("identity",), id_weight=2.0)
    losses, _ = assembly(targets, [mem], [feats], {"before": [feats], "after": [feats]})
    assert float(losses["loss_id"]) == pytest.approx(2.0 * float(mem.loss(feats, targets)), rel=1e-6)


def test_one_camera_per_cluster_intra_is_plain_contrastive_over_the_camera():
    # every proxy in its own camera: the intra term is 0 (a softmax over one proxy)
    mem = CameraProxyMemory(4, temperature=0.5, inter_weight=0.0)
    proxies = mem.assign(np.array([0, 1, 2]), np.array([0, 1, 2]))
    mem.reset(torch.eye(4)[:3])
    assert float(mem.loss(torch.randn(3, 4), torch.from_numpy(proxies))) == pytest.approx(0.0, abs=1e-6)


def test_momentum_update_per_proxy_and_stale_assignment_refused():
    mem = CameraProxyMemory(2, temperature=1.0, momentum=0.5)
    proxies = mem.assign(np.array([0, 0]), np.array([0, 1]))
    mem.reset(torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
    mem.train()
    mem.loss(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.from_numpy(proxies))
    mem.update()
    r = 1 / math.sqrt(2)
    assert torch.allclose(mem.weight, torch.tensor([[r, r], [r, r]]), atol=1e-6)
    mem.assign(np.array([0, 1, 1]), np.array([0, 0, 1]))  # three proxies, two vectors
    with pytest.raises(RuntimeError, match="assign"):
        mem.loss(torch.randn(1, 2), torch.tensor([0]))


def test_bad_settings_are_refused():
    for bad in (-1, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="CAMERA_INTER_WEIGHT"):
            CameraProxyMemory(4, inter_weight=bad)
    with pytest.raises(ValueError, match="CAMERA_HARD_NEGATIVES"):
        CameraProxyMemory(4, hard_negatives=0)
    with pytest.raises(ValueError, match="camera id"):
        CameraProxyMemory(4).assign(np.array([0, 1]), None)
