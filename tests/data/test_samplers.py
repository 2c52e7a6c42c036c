"""Guarantees of the identity (P x K) and shuffling samplers."""
from __future__ import annotations

import logging
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


@pytest.mark.parametrize("k", [3, 4])
def test_groups_never_repeat_an_image_when_the_identity_has_k(k):
    # Sizes not divisible by K (and some below K) exercise the topped-up last group.
    rng = np.random.default_rng(5)
    sizes = rng.integers(k + 1, 4 * k, 30)
    sizes[sizes % k == 0] += 1
    sizes[:3] = [1, 2, k - 1]
    pids = rng.permutation(np.repeat(np.arange(30), sizes))
    count = np.bincount(pids)
    bs = 4 * k
    for seed in range(3):
        s = IdentitySampler(pids, bs, k, seed=seed)
        for epoch in range(4):
            for group in s.epoch_indices(epoch).reshape(-1, k):  # groups stay contiguous in a batch
                pid = pids[group[0]]
                assert (pids[group] == pid).all()
                uses = np.unique(group, return_counts=True)[1]
                if count[pid] >= k:
                    assert len(uses) == k, f"seed {seed} epoch {epoch}: repeated image in {group}"
                else:  # fewer than K images: all of them, spread evenly
                    assert len(uses) == count[pid] and uses.max() - uses.min() <= 1


def test_state_dict_restores_the_resume_point():
    pids = market_like_pids()
    s = IdentitySampler(pids, 16, 4, seed=3)
    s.set_epoch(4, start_batch=5)
    state = s.state_dict()
    assert state == {"epoch": 4, "seed": 3, "start_batch": 5}
    t = IdentitySampler(pids, 16, 4, seed=0)
    t.load_state_dict(state)
    assert (t.epoch, t.seed, t.start_batch) == (4, 3, 5)
    assert list(t) == s.epoch_indices(4).tolist()[5 * 16:] == list(s)
    old = ShuffleSampler(103, 10, seed=0)
    old.load_state_dict({"epoch": 2, "seed": 9})  # saved before start_batch was stored
    assert (old.epoch, old.seed, old.start_batch) == (2, 9, 0)
    assert list(old) == ShuffleSampler(103, 10, seed=9).epoch_indices(2).tolist()


def test_ddp_surplus_drop_keeps_every_identity():
    # Many one-group identities next to large ones: a rank over its share must drop surplus
    # groups from the large identities, never an identity's only group.
    rng = np.random.default_rng(0)
    sizes = np.where(np.arange(50) % 5 == 0, rng.integers(30, 60, 50), rng.integers(1, 5, 50))
    pids = np.repeat(np.arange(50), sizes)
    for seed in range(10):
        ranks = [IdentitySampler(pids, 16, 4, seed=seed, rank=r, world_size=2) for r in range(2)]
        for epoch in range(3):
            seen = set(pids[ranks[0].epoch_indices(epoch)].tolist()) | set(pids[ranks[1].epoch_indices(epoch)].tolist())
            assert seen == set(range(50)), f"seed {seed} epoch {epoch}: missing {set(range(50)) - seen}"


def test_one_identity_per_batch_is_warned_about(reid_log):
    pids = [i // 4 for i in range(24)]  # 6 identities x 4 images
    with reid_log.at_level(logging.WARNING, logger="reid"):
        IdentitySampler(pids, batch_size=8, num_instances=4)
    assert reid_log.text == ""  # P = 2: fine
    with reid_log.at_level(logging.WARNING, logger="reid"):
        IdentitySampler(pids, batch_size=4, num_instances=4)
    assert "one identity per batch" in reid_log.text and "NUM_INSTANCE" in reid_log.text


def test_pseudo_label_sampler_fixed_length_pk_batches_without_outliers():
    from reid.data import PseudoLabelSampler

    labels = np.array([0, 0, 0, -1, 1, 1, 2, 2, 2, 2, -1, 3, 3, 1])
    sampler = PseudoLabelSampler(batch_size=4, num_instances=2, num_batches=7, seed=5)
    sampler.set_labels(labels)
    sampler.set_epoch(3)
    out = list(sampler)
    assert len(out) == len(sampler) == 28
    idx = np.array([o[0] for o in out])
    assert all(o[2] == labels[o[0]] for o in out)  # the pseudo-label travels with the index
    assert (labels[idx] >= 0).all()  # outliers are never drawn
    for batch in labels[idx].reshape(7, 2, 2):  # P=2 distinct pseudo-identities x K=2
        assert (batch[:, 0] == batch[:, 1]).all() and batch[0, 0] != batch[1, 0]
    assert set(labels[idx]) == {0, 1, 2, 3}
    # A resume at batch 4 yields exactly the tail of the same epoch, seeds included.
    sampler.set_epoch(3, start_batch=4)
    assert list(sampler) == out[16:]
    sampler.set_epoch(4)
    assert [o[0] for o in sampler] != idx.tolist()


def test_pseudo_label_sampler_needs_labels_and_enough_clusters():
    from reid.data import PseudoLabelSampler

    sampler = PseudoLabelSampler(batch_size=4, num_instances=2, num_batches=2)
    with pytest.raises(RuntimeError, match="set_labels"):
        list(sampler)
    with pytest.raises(ValueError, match="1 identities cannot fill batches of P=2"):
        sampler.set_labels([0, 0, -1, -1])
