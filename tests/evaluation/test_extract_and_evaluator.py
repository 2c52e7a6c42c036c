"""Feature extraction (flip averaging, no mutation, normalisation) and the evaluator's rows."""
import numpy as np
import pytest
import torch
from torch import nn

from reid.evaluation import (
    Features,
    compute_distance,
    evaluate_features,
    evaluate_rank,
    extract_features,
    format_table,
    re_ranking,
)
from reid.evaluation.evaluator import summarize
from reid.evaluation.extract import BadFeaturesError


class ColumnProfile(nn.Module):
    """Feature = mean pixel of each image column (left-right asymmetric, so flips matter)."""

    def forward(self, x):
        return x.float().mean(dim=(1, 2)) + torch.arange(x.shape[3], dtype=torch.float32)


def make_loader(images, pids, camids):
    return [
        {
            "images": images[i : i + 2],
            "targets": torch.tensor(pids[i : i + 2]),
            "camids": torch.tensor(camids[i : i + 2]),
            "img_paths": [f"img{j}.jpg" for j in range(i, min(i + 2, len(pids)))],
        }
        for i in range(0, len(pids), 2)
    ]


def test_extract_flip_average_matches_formula_and_does_not_mutate():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (5, 3, 8, 4), dtype=torch.uint8, generator=g)
    original = images.clone()
    loader = make_loader(images, [1, 1, 2, 2, 3], [0, 1, 0, 1, 0])
    model = ColumnProfile()
    out = extract_features(model, loader, torch.device("cpu"), flip=True)
    expected = (model(images) + model(torch.flip(images, dims=[3]))) / 2
    expected = expected / expected.norm(dim=1, keepdim=True)
    assert torch.allclose(out.feats, expected, atol=1e-6)
    assert torch.equal(images, original)  # the flipped pass used a copy
    assert out.pids.tolist() == [1, 1, 2, 2, 3] and out.camids.tolist() == [0, 1, 0, 1, 0]
    assert out.paths == [f"img{j}.jpg" for j in range(5)]
    plain = extract_features(model, loader, torch.device("cpu"), flip=False)
    assert not torch.allclose(plain.feats, out.feats)  # the flip changed something


def test_extract_restores_training_mode_and_rejects_nan():
    model = ColumnProfile().train()
    loader = make_loader(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), [1, 2], [0, 1])
    extract_features(model, loader, torch.device("cpu"))
    assert model.training

    class NaNModel(nn.Module):
        def forward(self, x):
            return torch.full((x.shape[0], 3), float("nan"))

    with pytest.raises(BadFeaturesError, match="NaN"):
        extract_features(NaNModel(), loader, torch.device("cpu"))


def test_extract_fp16_on_cpu_is_refused():
    loader = make_loader(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), [1, 2], [0, 1])
    with pytest.raises(ValueError, match="fp16"):
        extract_features(ColumnProfile(), loader, torch.device("cpu"), amp="fp16")


def random_split(seed=0, nq=12, ng=40, ids=6, dim=16):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(ids, dim))
    qp, gp = rng.integers(0, ids, nq), rng.integers(0, ids, ng)
    q = torch.tensor(centers[qp] + 0.8 * rng.normal(size=(nq, dim)), dtype=torch.float32)
    g = torch.tensor(centers[gp] + 0.8 * rng.normal(size=(ng, dim)), dtype=torch.float32)
    qf = Features(nn.functional.normalize(q, dim=1), qp, rng.integers(0, 3, nq), [f"q{i}" for i in range(nq)])
    gf = Features(nn.functional.normalize(g, dim=1), gp, rng.integers(3, 6, ng), [f"g{i}" for i in range(ng)])
    return qf, gf


def test_evaluate_features_rows_equal_direct_computation():
    qf, gf = random_split()
    res = evaluate_features(qf, gf, rerank=True, k1=5, k2=2, keep_distmat=True, max_rank=10)
    ids = (qf.pids, gf.pids, qf.camids, gf.camids)
    plain = evaluate_rank(compute_distance(qf.feats, gf.feats), *ids, max_rank=10)
    rr_dist = re_ranking(qf.feats, gf.feats, k1=5, k2=2)
    rerank = evaluate_rank(rr_dist, *ids, max_rank=10)
    assert res.metrics["plain"]["R-1"] == pytest.approx(plain["cmc"][0] * 100)
    assert res.metrics["plain"]["R-5"] == pytest.approx(plain["cmc"][4] * 100)
    assert res.metrics["plain"]["mAP"] == pytest.approx(plain["mAP"] * 100)
    assert res.metrics["rerank"]["mINP"] == pytest.approx(rerank["mINP"] * 100)
    assert np.allclose(res.distmats["rerank"], rr_dist)
    np.testing.assert_allclose(res.cmc["plain"], plain["cmc"])
    np.testing.assert_allclose(res.all_ap["plain"], plain["all_AP"])
    # Without keep_distmat the plain row is computed chunk-wise from features: same numbers.
    lean = evaluate_features(qf, gf, max_rank=10)
    assert lean.distmats == {}
    assert lean.metrics["plain"] == pytest.approx(res.metrics["plain"])


def test_format_table_lists_rows_and_columns():
    table = format_table({"plain": {"R-1": 91.234, "R-5": 95, "R-10": 97, "mAP": 80.5, "mINP": 50}}, title="t")
    lines = table.splitlines()
    assert lines[0] == "t" and "R-1" in lines[1] and "mINP" in lines[1]
    assert "91.23" in lines[3] and "80.50" in lines[3]


def test_summary_refuses_a_cmc_shorter_than_the_reported_ranks():
    # R-10 from a 3-deep curve would silently be CMC@3 under the R-10 label.
    with pytest.raises(ValueError, match="R-10.*max_rank >= 10"):
        summarize({"cmc": np.array([0.5, 0.7, 0.9]), "mAP": 0.5, "mINP": 0.3})
    row = summarize({"cmc": np.linspace(0.5, 1.0, 10), "mAP": 0.5, "mINP": 0.3})
    assert row["R-10"] == pytest.approx(100.0) and row["R-5"] == pytest.approx(100 * (0.5 + 4 * 0.5 / 9))
