"""The gallery-draws protocol (VehicleID): the draws, the mean over them, re-ranking per draw, refusals."""
import numpy as np
import pytest
import torch

from reid.evaluation import Features, draw_galleries, evaluate_draws, evaluate_features, format_draws
from reid.evaluation.evaluator import check_protocol
from reid.evaluation.gallery_draws import GALLERY_CAMID, QUERY_CAMID, check_num_draws, mean_and_std, split_draw

# Six test images on the unit circle (cosine distance grows with the angle between them):
# vehicle 1 at 0, 20 and 90 degrees, vehicle 2 at 50 and 190, vehicle 3 (one image) at 140.
NAMES = ["a0", "a1", "a2", "b0", "b1", "c0"]
ANGLES = [0, 20, 90, 50, 190, 140]
PIDS = [1, 1, 1, 2, 2, 3]

# Worked out by hand for every possible gallery (vehicle 1's image, vehicle 2's image; c0 is always
# the gallery, having no other image). Angles between a query and the three gallery images give each
# query's rank of its one match: AP = INP = 1 / rank, R-1 = rank 1.
#   gallery a0 b0 c0: a1 -> a0 20 < b0 30 < c0 120: rank 1; a2 -> b0 40 < c0 50 < a0 90: rank 3;
#                     b1 -> c0 50 < b0 140 < a0 170: rank 2            => R-1 1/3, mAP (1 + 1/3 + 1/2) / 3
#   gallery a0 b1 c0: a1 -> a0 20: 1; a2 -> c0 50 < a0 90: 2; b0 -> a0 50 < c0 90 < b1 140: 3  => 1/3, 11/18
#   gallery a1 b0 c0: a0 -> a1 20: 1; a2 -> b0 40 < c0 50 < a1 70: 3; b1 -> c0 50 < b0 140: 2   => 1/3, 11/18
#   gallery a1 b1 c0: a0 -> a1 20: 1; a2 -> c0 50 < a1 70: 2; b0 -> a1 30 < c0 90 < b1 140: 3   => 1/3, 11/18
#   gallery a2 b0 c0: a0 -> b0 50 < a2 90: 2; a1 -> b0 30 < a2 70: 2; b1 -> c0 50 < a2 100 < b0 140: 3
#                                                                       => R-1 0, mAP (1/2 + 1/2 + 1/3) / 3
#   gallery a2 b1 c0: a0 -> a2 90 < c0 140: 1; a1 -> a2 70 < c0 120: 1; b0 -> a2 40 < c0 90 < b1 140: 3
#                                                                       => R-1 2/3, mAP (1 + 1 + 1/3) / 3
HAND = {("a0", "b0"): (1 / 3, 11 / 18), ("a0", "b1"): (1 / 3, 11 / 18), ("a1", "b0"): (1 / 3, 11 / 18),
        ("a1", "b1"): (1 / 3, 11 / 18), ("a2", "b0"): (0.0, 4 / 9), ("a2", "b1"): (2 / 3, 7 / 9)}
# The galleries of the 10 draws of seed 0 (numpy's generator seeded [0, d] for draw d).
SEED0_DRAWS = [("a2", "b0"), ("a1", "b1"), ("a0", "b1"), ("a2", "b1"), ("a1", "b0"),
               ("a0", "b1"), ("a1", "b1"), ("a0", "b0"), ("a2", "b0"), ("a2", "b0")]


def circle_pool() -> Features:
    rad = np.deg2rad(ANGLES)
    feats = torch.tensor(np.stack([np.cos(rad), np.sin(rad)], 1), dtype=torch.float32)
    return Features(feats, np.array(PIDS), np.zeros(6, dtype=np.int64), list(NAMES))


def test_the_mean_of_ten_draws_is_the_hand_computed_one():
    pool = circle_pool()
    masks = draw_galleries(pool.pids, 10, seed=0)
    assert [tuple(np.array(NAMES)[m][:2]) for m in masks] == SEED0_DRAWS
    res = evaluate_draws(pool, num_draws=10, seed=0, metric="cosine")
    hand = np.array([HAND[d] for d in SEED0_DRAWS])  # [10, (R-1, mAP)]
    per_draw = res.draws["per_draw"]["plain"]
    assert [r["R-1"] for r in per_draw] == pytest.approx(100 * hand[:, 0])
    assert [r["mAP"] for r in per_draw] == pytest.approx(100 * hand[:, 1])
    # One match per query: INP = AP; every match within rank 3 of a 3-image gallery.
    assert [r["mINP"] for r in per_draw] == pytest.approx(100 * hand[:, 1])
    mean = res.metrics["plain"]
    assert mean["R-1"] == pytest.approx(100 * 8 / 30)  # (0 + 6 x 1/3 + 2/3 + 0 + 0) / 10
    assert mean["mAP"] == pytest.approx(100 * (3 * 4 / 9 + 6 * 11 / 18 + 7 / 9) / 10)  # 57.78
    assert mean["R-5"] == mean["R-10"] == 100.0
    assert res.draws["std"]["plain"]["R-1"] == pytest.approx(100 * np.std(hand[:, 0]))
    assert res.draws["num_draws"] == 10 and res.draws["seed"] == 0
    assert res.cmc["plain"][0] == pytest.approx(8 / 30) and len(res.cmc["plain"]) == 50
    # The rest is draw 0's (gallery a2 b0 c0): its queries, in pool order, with the bookkeeping cameras.
    assert res.query.paths == ["a0", "a1", "b1"] and res.gallery.paths == ["a2", "b0", "c0"]
    assert set(res.query.camids) == {QUERY_CAMID} and set(res.gallery.camids) == {GALLERY_CAMID}
    assert res.all_ap["plain"] == pytest.approx([1 / 2, 1 / 2, 1 / 3])
    table = format_draws(res, title="vehicleid")
    # population std: R-1 sqrt((3 x (8/30)^2 + 6 x (2/30)^2 + (12/30)^2) / 10) = 0.2, mAP likewise 0.1
    assert "26.67 +- 20.00" in table and "57.78 +- 10.00" in table


def test_draws_are_seeded_one_gallery_image_per_identity_and_uniform():
    pids = np.repeat([7, 3, 9, 3], [3, 1, 4, 2])  # identities need not be contiguous or sorted
    masks = draw_galleries(pids, 4000, seed=5)
    for pid in np.unique(pids):
        assert (masks[:, pids == pid].sum(axis=1) == 1).all()
    # Each image of a 4-image identity is drawn about a quarter of the time.
    share = masks[:, pids == 9].mean(axis=0)
    assert np.allclose(share, 0.25, atol=0.03)
    # Draw d depends on the seed and d only, not on how many draws are made.
    assert np.array_equal(draw_galleries(pids, 3, seed=5), masks[:3])
    assert not np.array_equal(draw_galleries(pids, 3, seed=6), masks[:3])


def test_rerank_and_aqe_run_per_draw_on_that_draws_split():
    rng = np.random.default_rng(0)
    pids = np.repeat(np.arange(8), 5)
    feats = torch.tensor(rng.normal(size=(8, 16))[pids] + 0.9 * rng.normal(size=(40, 16)), dtype=torch.float32)
    pool = Features(torch.nn.functional.normalize(feats, dim=1), pids, np.zeros(40, np.int64),
                    [f"{i}.jpg" for i in range(40)])
    opts = dict(metric="cosine", rerank=True, k1=4, k2=2, aqe_k=2)
    res = evaluate_draws(pool, num_draws=3, seed=1, keep_distmat=True, **opts)
    assert set(res.metrics) == {"plain", "rerank"} and set(res.draws["per_draw"]) == {"plain", "rerank"}
    for mask, row in zip(draw_galleries(pids, 3, seed=1), res.draws["per_draw"]["rerank"]):
        alone = evaluate_features(*split_draw(pool, mask), **opts)
        assert alone.metrics["rerank"] == pytest.approx(row)
    means, _ = mean_and_std(res.draws["per_draw"]["rerank"])
    assert res.metrics["rerank"] == pytest.approx(means)
    assert res.distmats["plain"].shape == res.distmats["rerank"].shape == (32, 8)  # draw 0's


@pytest.mark.parametrize("bad", [0, -2, 2.5, "10", True, None])
def test_number_of_draws_is_checked_by_key(bad):
    with pytest.raises(ValueError, match=r"TEST.GALLERY_DRAWS must be an integer >= 1 .* got "):
        check_num_draws(bad)
    with pytest.raises(ValueError, match="TEST.GALLERY_DRAWS"):
        evaluate_draws(circle_pool(), num_draws=bad)


def test_verification_and_open_set_are_refused_under_draws_and_unknown_protocols_named():
    check_protocol("gallery_draws")
    check_protocol("cross_camera", verification=True, open_set_ids=3)
    with pytest.raises(ValueError, match=r"^TEST.VERIFICATION.ENABLED: not available .* gallery-draws protocol"):
        check_protocol("gallery_draws", verification=True)
    with pytest.raises(ValueError, match=r"^TEST.VERIFICATION.ENABLED and TEST.OPEN_SET.HOLDOUT_IDS: not available"):
        check_protocol("gallery_draws", verification=True, open_set_ids=2)
    with pytest.raises(ValueError, match=r"Unknown test protocol 'random'; valid: cross_camera, gallery_draws"):
        check_protocol("random")
    with pytest.raises(ValueError, match=r"^TEST.OPEN_SET.HOLDOUT_IDS: not available"):
        evaluate_draws(circle_pool(), num_draws=2, open_set_ids=1)


def test_tools_refuse_a_bad_number_of_draws_before_any_work():
    from reid.evaluation.eval_sets import check_test_settings
    from reid.config import ConfigError, get_cfg, load_config

    cfg = get_cfg()
    check_test_settings(cfg)
    cfg.TEST.GALLERY_DRAWS = 0
    with pytest.raises(ConfigError, match=r"^TEST.GALLERY_DRAWS must be an integer >= 1 \(the number of random gallery "
                                          r"draws whose results are averaged; 10 is usual for VehicleID\), got 0\.$"):
        check_test_settings(cfg)
    with pytest.raises(ConfigError, match="TEST.GALLERY_DRAWS expects a value of type int"):
        load_config(None, ["TEST.GALLERY_DRAWS", "ten"])


def test_draws_without_any_repeated_identity_are_refused():
    pool = circle_pool()
    single = Features(pool.feats[[0, 3, 5]], pool.pids[[0, 3, 5]], pool.camids[[0, 3, 5]], ["a0", "b0", "c0"])
    with pytest.raises(ValueError, match=r"^Gallery draws need identities with two images or more .* each of the 3 "
                                         r"test images has an identity of its own\.$"):
        evaluate_draws(single)
