"""Guarantees of the identity (P x K) and shuffling samplers."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from reid.data.samplers import IdentitySampler, ShuffleSampler


def market_like_pids(num_ids=40, seed=0):
    """Identity sizes like re-ID data: mostly 5-30 images, a few with 1-3 (fewer than K)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 31, num_ids)
    sizes[:4] = [1, 2, 3, 2]
    pids = np.repeat(np.arange(num_ids) * 3 + 7, sizes)  # non-contiguous original ids
    return rng.permutation(pids)


def batches(indices, bs):
    return np.asarray(indices).reshape(-1, bs)


def test_pk_structure_and_small_identities_with_replacement():
    pids = market_like_pids()
    s = IdentitySampler(pids, batch_size=16, num_instances=4, seed=0)
    idx = s.epoch_indices(0)
    assert len(idx) == len(s) == s.num_batches * 16
    for b in batches(idx, 16):
        counts = Counter(pids[b].tolist())
        assert len(counts) == 4 and set(counts.values()) == {4}  # P=4 identities x K=4 images
        for group in b.reshape(4, 4):
            assert len(set(pids[group].tolist())) == 1  # each K-group is one identity
    one_image = np.flatnonzero(pids == 7)  # the identity with a single image
    assert (np.isin(idx, one_image).sum() % 4) == 0 and np.isin(idx, one_image).sum() >= 4


def test_every_image_covered_about_once_per_epoch():
    pids = market_like_pids()
    s = IdentitySampler(pids, batch_size=16, num_instances=4, seed=1)
    for epoch in range(3):
        seen = Counter(s.epoch_indices(epoch).tolist())
        assert set(seen) == set(range(len(pids)))  # every image at least once
        # "about once": top-ups add < K per identity plus the fill of one last batch
        assert len(s) <= len(pids) + 4 * len(set(pids.tolist())) + 16


def test_deterministic_per_seed_and_different_across_epochs():
    pids = market_like_pids()
    a = IdentitySampler(pids, 16, 4, seed=3)
    b = IdentitySampler(pids, 16, 4, seed=3)
    assert np.array_equal(a.epoch_indices(2), b.epoch_indices(2))
    assert not np.array_equal(a.epoch_indices(2), a.epoch_indices(3))
    assert not np.array_equal(a.epoch_indices(2), IdentitySampler(pids, 16, 4, seed=4).epoch_indices(2))
    a.set_epoch(2)
    assert list(a) == a.epoch_indices(2).tolist()


def test_start_batch_yields_the_tail_of_the_epoch():
    pids = market_like_pids()
    s = IdentitySampler(pids, 16, 4, seed=0)
    full = s.epoch_indices(5).tolist()
    s.set_epoch(5, start_batch=3)
    assert list(s) == full[3 * 16:]
    s.set_epoch(5, start_batch=s.num_batches)
    assert list(s) == []
    with pytest.raises(ValueError, match="start_batch"):
        s.set_epoch(5, start_batch=s.num_batches + 1)


def test_pass_without_set_epoch_moves_to_next_epoch():
    s = IdentitySampler(market_like_pids(), 16, 4, seed=0)
    s.set_epoch(0, start_batch=2)
    first, second = list(s), list(s)
    assert first == s.epoch_indices(0).tolist()[32:]
    assert second == s.epoch_indices(1).tolist() and s.epoch == 1


def test_ddp_ranks_get_whole_disjoint_identities():
    pids = market_like_pids(num_ids=60)
    ranks = [IdentitySampler(pids, 16, 4, seed=0, rank=r, world_size=2) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1])  # same number of steps on every rank
    for epoch in range(3):
        idx = [r.epoch_indices(epoch) for r in ranks]
        ids = [set(pids[i].tolist()) for i in idx]
        assert ids[0].isdisjoint(ids[1])
        assert ids[0] | ids[1] == set(pids.tolist())
        for i in idx:
            for b in batches(i, 16):
                assert sorted(Counter(pids[b].tolist()).values()) == [4, 4, 4, 4]
        covered = set(idx[0].tolist()) | set(idx[1].tolist())
        assert len(covered) >= 0.95 * len(pids)  # about once overall (a few surplus groups may drop)
    # the split changes between epochs
    assert set(pids[ranks[0].epoch_indices(0)].tolist()) != set(pids[ranks[0].epoch_indices(1)].tolist())


def test_identity_sampler_errors():
    pids = market_like_pids()
    with pytest.raises(ValueError, match="multiple of DATALOADER.NUM_INSTANCE"):
        IdentitySampler(pids, 18, 4)
    with pytest.raises(ValueError, match="identities"):
        IdentitySampler(np.repeat([1, 2, 3], 10), 16, 4)


def test_shuffle_sampler_permutation_ddp_and_resume():
    s = ShuffleSampler(103, batch_size=10, seed=0)
    idx = s.epoch_indices(0)
    assert len(idx) == len(s) == 100 and len(set(idx.tolist())) == 100
    assert not np.array_equal(idx, s.epoch_indices(1))
    assert np.array_equal(idx, ShuffleSampler(103, 10, seed=0).epoch_indices(0))
    s.set_epoch(0, start_batch=4)
    assert list(s) == idx[40:].tolist()
    shards = [ShuffleSampler(103, 10, seed=0, rank=r, world_size=2).epoch_indices(0) for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 50
    assert set(shards[0].tolist()).isdisjoint(shards[1].tolist())
    with pytest.raises(ValueError, match="IMS_PER_BATCH"):
        ShuffleSampler(5, 10)
