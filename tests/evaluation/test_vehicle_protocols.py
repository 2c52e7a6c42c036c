"""End to end on tiny releases of synthetic vehicles: each loader's test set, evaluated by
``evaluate_model`` under its protocol, against a plain per-query reference written here (loops over
queries; the evaluator has none). VeRi-776 and VERI-Wild: the cross-camera protocol; VehicleID: the
mean over 10 gallery draws, as tools/test.py and training's evaluation run them."""
from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from reid.evaluation.eval_sets import load_test_sets
from reid.training.eval_fn import make_eval_fn
from reid.config import ConfigError, get_cfg
from reid.data import build_test_loader, build_test_set
from reid.evaluation import draw_galleries, evaluate_model, extract_features

from tests.data.vehicle_files import synthetic_vehicles, write_vehicleid, write_veri, write_veriwild


class GridColour(nn.Module):
    """Feature = the mean colour of each quarter of the image (the body colour dominates). Its one
    parameter tells the evaluator which device the model is on, as a real model's do."""

    def __init__(self) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.adaptive_avg_pool2d(x.float(), 2).flatten(1) * self.gain


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    base = tmp_path_factory.mktemp("vehicles")
    vehicles = synthetic_vehicles(base / "synthetic", num_test_ids=5)
    write_veri(base, vehicles)
    write_vehicleid(base, vehicles)
    write_veriwild(base, vehicles)
    return base


def config(root, **test):
    cfg = get_cfg()
    cfg.DATASETS.ROOT = str(root)
    cfg.INPUT.SIZE_TEST = [32, 32]
    cfg.DATALOADER.NUM_WORKERS = 0
    cfg.TEST.IMS_PER_BATCH = 16
    for key, value in test.items():
        setattr(cfg.TEST, key, value)
    return cfg


def reference(qf, gf, qp, gp, qc, gc):
    """R-1 / mAP / mINP (percent) of the Market-1501 protocol, one query at a time."""
    r1, aps, inps = [], [], []
    for i in range(len(qf)):
        dist = 1.0 - gf @ qf[i]
        kept = [j for j in range(len(gf)) if not (gp[j] == qp[i] and gc[j] == qc[i])]
        ranked = sorted(kept, key=lambda j: (dist[j], j))
        hits = [r + 1 for r, j in enumerate(ranked) if gp[j] == qp[i]]
        if not hits:
            continue
        r1.append(hits[0] == 1)
        aps.append(np.mean([k / r for k, r in enumerate(hits, 1)]))
        inps.append(len(hits) / hits[-1])
    return {"R-1": 100 * np.mean(r1), "mAP": 100 * np.mean(aps), "mINP": 100 * np.mean(inps)}


def features(cfg, test):
    feats = extract_features(GridColour(), build_test_loader(cfg, test.query, test.gallery), torch.device("cpu"))
    return feats.feats.double().numpy(), feats.pids, feats.camids


@pytest.mark.parametrize("name", ["veri", "veriwild"])
def test_camera_datasets_are_evaluated_cross_camera(root, name):
    cfg = config(root)
    test = build_test_set(cfg, name, log=False)
    assert test.protocol == "cross_camera"
    res = evaluate_model(cfg, GridColour(), test.query, test.gallery, device=torch.device("cpu"), protocol=test.protocol)
    f, pids, cams = features(cfg, test)
    nq = len(test.query)
    expected = reference(f[:nq], f[nq:], pids[:nq], pids[nq:], cams[:nq], cams[nq:])
    assert {k: res.metrics["plain"][k] for k in expected} == pytest.approx(expected)
    assert not res.draws


def test_vehicleid_is_the_mean_of_ten_gallery_draws(root):
    cfg = config(root, GALLERY_DRAW_SEED=3)
    test = build_test_set(cfg, "vehicleid", log=False)
    assert test.protocol == "gallery_draws"
    res = evaluate_model(cfg, GridColour(), test.query, test.gallery, device=torch.device("cpu"), protocol=test.protocol)
    f, pids, _ = features(cfg, test)
    per_draw = []
    for mask in draw_galleries(pids, 10, seed=3):  # the draws' own test checks them by hand
        q, g = ~mask, mask
        per_draw.append(reference(f[q], f[g], pids[q], pids[g], np.ones(q.sum()), np.zeros(g.sum())))
    assert res.draws["num_draws"] == 10 and res.draws["seed"] == 3
    for key in ("R-1", "mAP", "mINP"):
        assert [row[key] for row in res.draws["per_draw"]["plain"]] == pytest.approx([row[key] for row in per_draw])
        assert res.metrics["plain"][key] == pytest.approx(np.mean([row[key] for row in per_draw]))
    # A vehicle's queries are all its images but the drawn one: 5 vehicles, every draw the same counts.
    assert len(res.gallery) == 5 and len(res.query) == len(test.query) + len(test.gallery) - 5
    other = evaluate_model(config(root, GALLERY_DRAW_SEED=4), GridColour(), test.query, test.gallery,
                           device=torch.device("cpu"), protocol=test.protocol)
    assert other.draws["per_draw"] != res.draws["per_draw"]  # another seed, other galleries
    with pytest.raises(ValueError, match="TEST.VERIFICATION.ENABLED: not available for a test set with the gallery-draws"):
        evaluate_model(cfg, GridColour(), test.query, test.gallery, device=torch.device("cpu"), protocol=test.protocol,
                       verification=True)


def test_training_evaluates_each_test_set_under_its_protocol(root, caplog):
    cfg = config(root, GALLERY_DRAWS=4)
    cfg.DATASETS.TESTS = ["vehicleid", "veri"]
    test_sets = load_test_sets(cfg)
    assert {n: t.protocol for n, t in test_sets.items()} == {"vehicleid": "gallery_draws", "veri": "cross_camera"}
    logger = logging.getLogger("reid.test_vehicle_protocols")
    with caplog.at_level(logging.INFO, logger=logger.name):
        records = make_eval_fn(cfg, [], [], test_sets, logger)(GridColour(), epoch=1)
    assert [r["dataset"] for r in records] == ["vehicleid", "veri"]
    assert "vehicleid after epoch 1 (mean of 4 gallery draws), with the standard deviation:" in caplog.text
    # Settings the draws cannot report stop training before it starts, naming the test set and the key.
    cfg.TEST.OPEN_SET.HOLDOUT_IDS = 2
    with pytest.raises(ConfigError, match=r"Test set 'vehicleid' \(DATASETS.TESTS\): TEST.OPEN_SET.HOLDOUT_IDS: not "
                                          r"available"):
        load_test_sets(cfg)
