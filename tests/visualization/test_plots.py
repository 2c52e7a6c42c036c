"""Plots: CMC, similarity distributions, training dynamics, decision boundary, loss gradients."""
from __future__ import annotations

import csv
import json
import logging
import os

import numpy as np
import pytest
import torch

from reid.visualization import plots
from tests._tools import load_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MIN_PNG_BYTES = 10_000  # a titled, labelled figure with data; an empty canvas is ~2-5 KB


def _csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _png_ok(path):
    assert os.path.isfile(path) and os.path.getsize(path) > MIN_PNG_BYTES
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def _write_run(folder, records):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(folder)


def _train(it, sp, sn):
    return {"type": "train", "epoch": it // 10, "iter": it, "lr": 1e-3, "loss": 1.0, "s_p": sp, "s_n": sn}


@pytest.mark.slow
def test_dynamics_from_metrics_files(tmp_path):
    circle = _write_run(tmp_path / "circle", [
        _train(10, 0.2, 0.1), _train(20, 0.4, 0.05),
        {"type": "eval", "split": "test", "epoch": 2, "iter": 20, "R-1": 50.0, "mAP": 30.0},
        "",  # blank lines are allowed
        _train(30, 0.6, 0.02),
        _train(20, 0.45, 0.04),  # a resumed run logs iteration 20 again: the later record wins
    ])
    am = _write_run(tmp_path / "amsoftmax", [_train(10, 0.3, 0.2), _train(30, 0.5, 0.1)])
    out = str(tmp_path / "plots" / "dyn.png")
    files = plots.plot_dynamics([circle, os.path.join(am, "metrics.jsonl")], out)
    _png_ok(files.png)
    rows = _csv(files.csv)
    got = [(r["run"], int(r["iter"]), float(r["s_p"]), float(r["s_n"])) for r in rows]
    assert got == [("circle", 10, 0.2, 0.1), ("circle", 20, 0.45, 0.04), ("circle", 30, 0.6, 0.02),
                   ("amsoftmax", 10, 0.3, 0.2), ("amsoftmax", 30, 0.5, 0.1)]
    data = json.load(open(files.json))
    assert data["runs"]["amsoftmax"]["s_p"] == [0.3, 0.5]
    labelled = plots.plot_dynamics([circle, am], str(tmp_path / "d2.png"), labels=["Circle", "AM"])
    assert set(json.load(open(labelled.json))["runs"]) == {"Circle", "AM"}


def test_dynamics_errors_name_the_file(tmp_path, caplog):
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        plots.plot_dynamics([str(tmp_path / "nope")], str(tmp_path / "d.png"))
    bad = tmp_path / "bad"
    bad.mkdir()
    # A line cut short (a crash, a full disk) and a record of the wrong types are skipped with a warning.
    (bad / "metrics.jsonl").write_text(json.dumps(_train(1, 0.1, 0.0)) + '\n{"type": "train", "it\n'
                                       + json.dumps({"type": "train", "iter": "x", "s_p": [], "s_n": 1}) + "\n")
    with caplog.at_level(logging.WARNING):
        run = plots.read_train_dynamics(str(bad))
    assert run["iter"].tolist() == [1]
    assert any("skipped 2 line(s)" in r.getMessage() and "line 2" in r.getMessage() for r in caplog.records)
    (bad / "metrics.jsonl").write_text(json.dumps({"type": "eval", "iter": 1, "mAP": 1.0}) + "\n")
    with pytest.raises(ValueError, match="no training record with s_p and s_n"):
        plots.read_train_dynamics(str(bad))
    with pytest.raises(ValueError, match="2 labels for 1 runs"):
        plots.plot_dynamics([str(bad)], str(tmp_path / "d.png"), labels=["a", "b"])


def test_cmc_plot_and_json_readers(tmp_path):
    cmc = np.linspace(0.5, 1.0, 60)
    files = plots.plot_cmc({"original": cmc, "re-ranked": np.minimum(cmc + 0.1, 1.0)}, str(tmp_path / "cmc.png"))
    _png_ok(files.png)
    rows = _csv(files.csv)
    assert len(rows) == 50 and rows[0]["rank"] == "1"
    assert [float(r["original"]) for r in rows] == cmc[:50].tolist()
    data = json.load(open(files.json))
    assert data["curves"]["original"] == cmc[:50].tolist()

    nested = tmp_path / "run_a" / "metrics.json"
    nested.parent.mkdir()
    nested.write_text(json.dumps({"plain": {"cmc": [90.0, 95.0, 100.0]}, "rerank": {"cmc": [0.93, 0.97, 1.0]}}))
    curves = plots.read_cmc_json(str(nested))
    assert set(curves) == {"run_a / plain", "run_a / rerank"}
    assert curves["run_a / plain"].tolist() == pytest.approx([0.9, 0.95, 1.0])  # percentages converted
    assert plots.read_cmc_json(files.json)["cmc / original"].tolist() == cmc[:50].tolist()  # our own output
    with pytest.raises(ValueError, match="No 'cmc' list"):
        (tmp_path / "x.json").write_text("{}")
        plots.read_cmc_json(str(tmp_path / "x.json"))
    with pytest.raises(ValueError, match="fractions"):
        plots.plot_cmc({"a": [50.0, 60.0]}, str(tmp_path / "c.png"))
    with pytest.raises(ValueError, match=r"\.png"):
        plots.plot_cmc({"a": cmc}, str(tmp_path / "c.jpg"))


def _clustered_features(rng, pids, dim=16, noise=0.25):
    centres = rng.normal(size=(int(max(pids)) + 1, dim))
    return centres[pids] + noise * rng.normal(size=(len(pids), dim))


@pytest.mark.slow
def test_pair_similarities_follow_protocol_and_overlap(tmp_path):
    rng = np.random.default_rng(0)
    q_pids, q_cams = np.array([0, 1, 2]), np.array([0, 0, 1])
    g_pids, g_cams = np.array([0, 0, 1, 1, 2, 3, -1]), np.array([0, 1, 0, 2, 1, 0, 1])
    qf, gf = _clustered_features(rng, q_pids), _clustered_features(rng, np.maximum(g_pids, 0))
    pairs = plots.pair_similarities(qf, gf, q_pids, g_pids, q_cams, g_cams)
    # positives: (q0,g1) (q1,g3); (q0,g0) (q1,g2) (q2,g4) are same camera; pid -1 never counts
    qn = qf / np.linalg.norm(qf, axis=1, keepdims=True)
    gn = gf / np.linalg.norm(gf, axis=1, keepdims=True)
    sim = qn @ gn.T
    assert sorted(pairs.positive.tolist()) == pytest.approx(sorted([sim[0, 1], sim[1, 3]]), abs=1e-6)
    neg_idx = [(q, g) for q in range(3) for g in range(6) if q_pids[q] != g_pids[g]]
    assert sorted(pairs.negative.tolist()) == pytest.approx(sorted(sim[q, g] for q, g in neg_idx), abs=1e-6)
    assert pairs.num_positive_pairs == 2 and pairs.num_negative_pairs == len(neg_idx)

    sampled = plots.pair_similarities(qf, gf, q_pids, g_pids, q_cams, g_cams, max_pairs=5, seed=1)
    assert sampled.negative_fraction_kept == pytest.approx(5 / len(neg_idx))
    assert 0 < sampled.negative.size < len(neg_idx)

    apart = plots.overlap_stats(np.full(50, 0.9), np.linspace(-0.2, 0.3, 200))
    assert apart["overlap_area"] == 0.0 and apart["neg_above_pos_p5"] == 0.0
    same = plots.overlap_stats(np.linspace(0, 1, 1000), np.linspace(0, 1, 1000))
    assert same["overlap_area"] == pytest.approx(1.0)

    big_q = np.repeat(np.arange(20), 2)
    big_g = np.repeat(np.arange(20), 5)
    qf2, gf2 = _clustered_features(rng, big_q), _clustered_features(rng, big_g)
    p2 = plots.pair_similarities(qf2, gf2, big_q, big_g, np.zeros(40, int), np.tile(np.arange(5), 20))
    files = plots.plot_similarity_distributions(p2, str(tmp_path / "sim.png"), bins=40)
    _png_ok(files.png)
    data = json.load(open(files.json))
    rows = _csv(files.csv)
    assert sum(int(r["positive_count"]) for r in rows) == p2.positive.size == data["positive_sampled"]
    assert sum(int(r["negative_count"]) for r in rows) == p2.negative.size
    expected = plots.overlap_stats(p2.positive, p2.negative, bins=40)
    assert data["overlap_area"] == pytest.approx(expected["overlap_area"])
    assert data["neg_above_pos_p5"] == pytest.approx(np.mean(p2.negative > np.percentile(p2.positive, 5)))
    with pytest.raises(ValueError, match="same length|Lengths differ"):
        plots.pair_similarities(qf, gf, q_pids[:2], g_pids, q_cams, g_cams)


def test_decision_boundary_pairs_and_plot(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(5, 8))
    labels = rng.integers(0, 5, size=200)
    feats = w[labels] + 0.8 * rng.normal(size=(200, 8))
    s_n, s_p = plots.similarity_pairs(feats, labels, w)
    fn, wn = feats / np.linalg.norm(feats, axis=1, keepdims=True), w / np.linalg.norm(w, axis=1, keepdims=True)
    cos = fn @ wn.T
    assert s_p[7] == pytest.approx(cos[7, labels[7]], abs=1e-6)
    assert s_n[7] == pytest.approx(np.delete(cos[7], labels[7]).max(), abs=1e-6)

    # the boundary: points on the circle / line and the side test agree with the equations
    bn, bp = plots.decision_boundary("circle", 0.25)
    ok = ~np.isnan(bn)
    assert np.allclose(bn[ok] ** 2 + (bp[ok] - 1) ** 2, 2 * 0.25**2)
    assert plots.past_boundary(np.array([0.0, 0.5]), np.array([0.95, 0.5]), "circle", 0.25).tolist() == [True, False]
    assert plots.past_boundary(np.array([0.1, 0.1]), np.array([0.5, 0.3]), "amsoftmax", 0.35).tolist() == [True, False]
    assert plots.resolve_margin("circle") == 0.25 and plots.resolve_margin("amsoftmax", 0.2) == 0.2

    npz = tmp_path / "pairs.npz"
    np.savez(npz, features=feats, labels=labels, class_weights=w)
    ln, lp = plots.load_pairs_npz(str(npz))
    assert np.allclose(ln, s_n) and np.allclose(lp, s_p)
    files = plots.plot_decision_boundary(s_n, s_p, str(tmp_path / "b.png"), head="circle", max_points=150)
    _png_ok(files.png)
    data = json.load(open(files.json))
    assert data["margin"] == 0.25 and data["num_points"] == 200 and data["num_plotted"] == 150
    assert data["fraction_past_boundary"] == pytest.approx(np.mean(s_n**2 + (s_p - 1) ** 2 < 2 * 0.25**2))
    rows = _csv(files.csv)
    assert len(rows) == 150 and all(float(r["s_n"]) in set(s_n.astype(float).tolist()) for r in rows[:5])
    with pytest.raises(ValueError, match="s_n has 3 values but s_p 2"):
        plots.plot_decision_boundary([0, 0, 0], [1, 1], str(tmp_path / "x.png"))
    with pytest.raises(ValueError, match="No decision boundary for head 'softmax'"):
        plots.plot_decision_boundary([0.1], [0.9], str(tmp_path / "x.png"), head="softmax")
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        plots.load_pairs_npz(str(tmp_path / "missing.npz"))


@pytest.mark.slow
def test_gradient_data_equals_autograd_of_the_losses(tmp_path):
    from reid.modeling.losses import similarity_losses as sl

    fields = plots.gradient_grid(grid=11, params={"circle": {"gamma": 32.0}})
    files = plots.plot_gradients(fields, str(tmp_path / "g.png"), arrows=5)
    _png_ok(files.png)
    rows = _csv(files.csv)
    assert len(rows) == 3 * 11 * 11
    # spot-check grid point (s_n=0.4, s_p=0.5) of each loss against autograd on the loss itself
    fns = {
        "triplet": lambda p, n: sl.triplet_loss_sp_sn(p, n, 0.3),
        "amsoftmax": lambda p, n: sl.amsoftmax_loss_sp_sn(p, n, 64.0, 0.35),
        "circle": lambda p, n: sl.circle_loss_sp_sn(p, n, 32.0, 0.25),
    }
    for name, fn in fns.items():
        (row,) = [r for r in rows if r["loss"] == name and float(r["s_n"]) == pytest.approx(0.4)
                  and float(r["s_p"]) == pytest.approx(0.5)]
        sp = torch.tensor([float(row["s_p"])], dtype=torch.float64, requires_grad=True)
        sn = torch.tensor([float(row["s_n"])], dtype=torch.float64, requires_grad=True)
        loss = fn(sp, sn)
        gp, gn = torch.autograd.grad(loss.sum(), [sp, sn])
        assert float(row["loss_value"]) == pytest.approx(float(loss.detach()))
        assert float(row["grad_s_p"]) == pytest.approx(float(gp))
        assert float(row["grad_s_n"]) == pytest.approx(float(gn))
    data = json.load(open(files.json))
    assert data["losses"]["circle"]["params"] == {"gamma": 32.0, "margin": 0.25}
    assert data["losses"]["amsoftmax"]["function"] == "amsoftmax_loss_sp_sn"
    with pytest.raises(ValueError, match="Unknown loss 'arcface'"):
        plots.loss_gradients("arcface", np.zeros(1), np.zeros(1), margin=0.5)


@pytest.mark.slow
def test_tools_plot_subcommands(tmp_path, capsys):
    tool = load_tool("plot")
    run = _write_run(tmp_path / "run", [_train(10, 0.2, 0.1), _train(20, 0.5, 0.05)])
    assert tool.main(["dynamics", run, "-o", str(tmp_path / "dyn.png")]) == 0
    _png_ok(str(tmp_path / "dyn.png"))
    assert tool.main(["gradients", "--grid", "9", "--gamma", "64", "-o", str(tmp_path / "g.png")]) == 0
    assert json.load(open(tmp_path / "g.json"))["losses"]["circle"]["params"]["gamma"] == 64.0
    np.savez(tmp_path / "sn_sp.npz", s_n=np.array([0.1, 0.4]), s_p=np.array([0.9, 0.5]))
    assert tool.main(["boundary", "--arrays", str(tmp_path / "sn_sp.npz"), "--head", "amsoftmax",
                      "-o", str(tmp_path / "b.png")]) == 0
    assert json.load(open(tmp_path / "b.json"))["margin"] == 0.35
    metrics = tmp_path / "m.json"
    metrics.write_text(json.dumps({"cmc": [0.5, 0.8, 1.0]}))
    assert tool.main(["cmc", "--metrics", str(metrics), "--labels", "mine", "-o", str(tmp_path / "c.png")]) == 0
    assert _csv(str(tmp_path / "c.csv"))[1] == {"rank": "2", "mine": "0.8"}
    assert tool.main(["similarity", "--features", str(tmp_path / "none.npz"), "-o", str(tmp_path / "s.png")]) == 1
    assert "none.npz" in capsys.readouterr().err
    for sub in ("cmc", "similarity", "dynamics", "boundary", "gradients"):
        with pytest.raises(SystemExit) as e:
            tool.main([sub, "--help"])
        assert e.value.code == 0
        assert "examples:" in capsys.readouterr().out


@pytest.mark.slow
def test_tools_plot_from_saved_features(tmp_path):
    """cmc and similarity straight from a saved-features npz (the evaluation layer computes CMC)."""
    rng = np.random.default_rng(0)
    q_pids, g_pids = np.repeat(np.arange(8), 2), np.repeat(np.arange(8), 4)
    q_cams, g_cams = np.zeros(16, int), np.tile(np.arange(4), 8)
    np.savez(tmp_path / "f.npz", query_feats=_clustered_features(rng, q_pids).astype(np.float32),
             gallery_feats=_clustered_features(rng, g_pids).astype(np.float32), query_pids=q_pids,
             gallery_pids=g_pids, query_camids=q_cams, gallery_camids=g_cams,
             query_paths=np.array([f"q{i}.jpg" for i in range(16)]), gallery_paths=np.array([f"g{i}.jpg" for i in range(32)]))
    tool = load_tool("plot")
    assert tool.main(["cmc", "--features", str(tmp_path / "f.npz"), "--k1", "4", "--k2", "2", "-o", str(tmp_path / "c.png")]) == 0
    data = json.load(open(tmp_path / "c.json"))
    assert set(data["curves"]) == {"original", "re-ranked"}
    from reid.evaluation import compute_distance, evaluate_rank

    s = np.load(tmp_path / "f.npz")
    ref = evaluate_rank(compute_distance(s["query_feats"], s["gallery_feats"]), q_pids, g_pids, q_cams, g_cams)["cmc"]
    assert data["curves"]["original"] == pytest.approx(np.asarray(ref).tolist())
    assert tool.main(["similarity", "--features", str(tmp_path / "f.npz"), "-o", str(tmp_path / "s.png")]) == 0
    _png_ok(str(tmp_path / "s.png"))


def test_pair_sampling_rate_gives_about_max_pairs_positives():
    # Same-camera same-identity pairs are not positives (protocol junk); the sampling rate
    # must be computed from the cross-camera ones, or far fewer than max_pairs come out.
    rng = np.random.default_rng(0)
    qf, gf = rng.normal(size=(200, 8)), rng.normal(size=(3000, 8))
    qp, gp = rng.integers(0, 20, 200), rng.integers(0, 20, 3000)
    qc, gc = rng.integers(0, 3, 200), rng.integers(0, 3, 3000)
    res = plots.pair_similarities(qf, gf, qp, gp, qc, gc, max_pairs=1000, seed=1)
    assert 900 < len(res.positive) < 1100 and 900 < len(res.negative) < 1100
