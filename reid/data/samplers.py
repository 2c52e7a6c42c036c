"""Training samplers: P identities x K images (``IdentitySampler``), a plain shuffle, and P x K
over pseudo-labels that change every epoch (``PseudoLabelSampler``, learning without labels).

Both yield dataset indices (or, with ``sample_seeds=True``, ``(index, seed)`` pairs that give
every sample its own augmentation seed, see ``reid.utils.process``), take ``batch_size`` as the
batch of *this process* (the global batch divided by the world size), are seeded (``seed`` +
epoch), and split the data between DDP ranks without overlap. ``set_epoch(epoch, start_batch=0)`` picks the epoch's order and,
for a resumed run, skips the batches already done: the pass then yields exactly the tail of the
full epoch. Without a ``set_epoch`` call between two passes, the second pass uses the next
epoch's order, so forgetting it never silently repeats an order.
"""
from __future__ import annotations

import logging
import math
from typing import Dict, Iterator, Sequence, Tuple, Union

import numpy as np
from torch.utils.data import Sampler

from reid.utils.process import derive_seed, sample_seeds

logger = logging.getLogger(__name__)


class _EpochSampler(Sampler):
    """Shared epoch / resume bookkeeping; subclasses implement ``epoch_indices(epoch)``.

    With `sample_seeds`, each yielded item is ``(index, seed)``: the seed is a function of
    (seed, epoch, rank, position in the epoch), so the sample at a given position is augmented
    the same way whichever worker loads it and whether or not the epoch was resumed midway.
    """

    batch_size: int
    num_batches: int

    def __init__(self, seed: int, rank: int, world_size: int, sample_seeds: bool = False) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size), got rank={rank}, world_size={world_size}")
        self.seed, self.rank, self.world_size = int(seed), int(rank), int(world_size)
        self.sample_seeds = bool(sample_seeds)
        self.epoch = 0
        self.start_batch = 0
        self._pending = False  # True after a pass started without a new set_epoch

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Use `epoch`'s order for the next pass and skip its first `start_batch` batches."""
        if not 0 <= start_batch <= self.num_batches:
            raise ValueError(f"start_batch must be in [0, {self.num_batches}], got {start_batch}")
        self.epoch, self.start_batch, self._pending = int(epoch), int(start_batch), False

    def __iter__(self) -> Iterator[Union[int, Tuple[int, int]]]:
        if self._pending:  # a second pass without set_epoch: move on to the next epoch
            self.epoch, self.start_batch = self.epoch + 1, 0
        self._pending = True
        indices = self.epoch_indices(self.epoch)
        start = self.start_batch * self.batch_size
        if not self.sample_seeds:
            return iter(indices[start:].tolist())
        seeds = sample_seeds(derive_seed(self.seed, self.epoch, self.rank), np.arange(start, len(indices)))
        return iter(zip(indices[start:].tolist(), seeds.tolist()))

    def __len__(self) -> int:
        """Indices in one full epoch of this process (``num_batches * batch_size``)."""
        return self.num_batches * self.batch_size

    def _rng(self, epoch: int, stream: int = 0) -> np.random.Generator:
        return np.random.default_rng([self.seed, epoch, stream])

    def state_dict(self) -> Dict[str, int]:
        """Epoch, seed and the batches to skip as last given to ``set_epoch``, to resume mid-epoch.

        The sampler does not see how far the loader got; a trainer that saves mid-epoch calls
        ``set_epoch(epoch, start_batch=batches_done)`` first (or stores that count itself).
        """
        return {"epoch": self.epoch, "seed": self.seed, "start_batch": self.start_batch}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        """Restore `state_dict()`; a state saved before ``start_batch`` was stored starts the epoch."""
        self.seed = int(state["seed"])
        self.set_epoch(int(state["epoch"]), int(state.get("start_batch", 0)))

    def epoch_indices(self, epoch: int) -> np.ndarray:  # pragma: no cover - abstract
        """All indices this process yields in `epoch` (no skipping); also for tests and inspection."""
        raise NotImplementedError


class IdentitySampler(_EpochSampler):
    """P x K identity sampler for metric / margin losses, DDP-aware.

    Args:
        pids: the person id of every dataset item (any integers).
        batch_size: images per batch in this process, ``P * K``; must be divisible by K.
        num_instances: K, images per identity in a batch.
        seed, rank, world_size: seeding and the DDP position of this process.
        sample_seeds: yield ``(index, seed)`` pairs (the train loader's per-sample seeds).

    One epoch: the identities are shuffled and dealt to the ranks as whole identities, balanced
    by image count (every rank sees different people). On each rank every identity's images are
    shuffled and cut into groups of K; the last group is topped up by wrapping around to the
    start of that shuffled order, so every group holds K distinct images whenever the identity
    has at least K, and an identity with fewer than K images gets one group that repeats its
    images as evenly as possible (counts differ by at most one). So every image appears at
    least once per epoch and about once overall. Groups are then scheduled into batches of P
    distinct identities, drawing identities in proportion to the groups they have left (and
    taking any identity whose groups would otherwise not fit), so all groups are used; a last,
    partly empty batch is topped up with fresh groups (K distinct images where possible).

    The epoch length is fixed by the pids alone so that all ranks run the same number of
    batches: ``num_batches = max(ceil(groups / (P * world_size)), largest group count)``. Under
    DDP a rank whose identities hold more groups than that drops a few surplus groups that
    epoch (a different few every epoch), taken from identities with more than one group first,
    so every identity of the rank still appears when its batches can hold one group of each.
    """

    def __init__(
        self,
        pids: Sequence[int],
        batch_size: int,
        num_instances: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        sample_seeds: bool = False,
    ) -> None:
        super().__init__(seed, rank, world_size, sample_seeds)
        k = int(num_instances)
        if k < 1 or batch_size < k or batch_size % k:
            raise ValueError(
                f"IdentitySampler: the per-process batch size ({batch_size}) must be a positive multiple "
                f"of DATALOADER.NUM_INSTANCE ({num_instances}); adjust SOLVER.IMS_PER_BATCH or NUM_INSTANCE."
            )
        pids = np.asarray(pids, dtype=np.int64)
        self.batch_size, self.num_instances, self.num_identities = int(batch_size), k, batch_size // k
        if self.num_identities < 2:
            logger.warning(
                "The identity sampler gets a batch of %d images per process with %d per identity "
                "(DATALOADER.NUM_INSTANCE): one identity per batch. Pair losses then have no negatives and an "
                "identity head sees one class per step. Use SOLVER.IMS_PER_BATCH of at least 2 x NUM_INSTANCE x "
                "processes.", batch_size, k,
            )
        uniq, inverse, counts = np.unique(pids, return_inverse=True, return_counts=True)
        p, w = self.num_identities, self.world_size
        if len(uniq) < p * w:
            raise ValueError(
                f"IdentitySampler: {len(uniq)} identities cannot fill batches of P={p} distinct identities "
                f"on {w} process(es) (needs {p * w}); lower SOLVER.IMS_PER_BATCH or raise DATALOADER.NUM_INSTANCE."
            )
        self.pids = pids
        self._order = np.argsort(inverse, kind="stable")  # item indices grouped by identity
        self._counts = counts
        self._starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        self._groups = np.maximum(1, -(-counts // k))  # ceil(n / K), at least one
        total = int(self._groups.sum())
        self.num_batches = max(math.ceil(total / (p * w)), int(self._groups.max()))

    # -- epoch construction -------------------------------------------------------------
    def _split_identities(self, rng: np.random.Generator) -> np.ndarray:
        """Identity ids (0..n-1) of this rank for one epoch: whole identities, balanced by groups."""
        perm = rng.permutation(len(self._counts))
        if self.world_size == 1:
            return perm
        g = self._groups[perm]
        mid = np.cumsum(g) - g / 2.0
        owner = np.minimum((mid * self.world_size / g.sum()).astype(np.int64), self.world_size - 1)
        if np.bincount(owner, minlength=self.world_size).min() < self.num_identities:
            owner = np.arange(len(perm)) % self.world_size  # few, large identities: deal round-robin
        return perm[owner == self.rank]

    def _make_groups(self, ids: np.ndarray, rng: np.random.Generator):
        """Shuffle each identity's images and cut them into K-groups (vectorised over identities).

        Returns ``(groups [G, K] of item indices, first group row of each identity, groups per identity)``.
        """
        k = self.num_instances
        cnt, ngr = self._counts[ids], self._groups[ids]
        owner = np.repeat(np.arange(len(ids)), cnt)
        first_img = np.cumsum(cnt) - cnt
        offset = np.arange(cnt.sum()) - np.repeat(first_img, cnt)
        items = self._order[np.repeat(self._starts[ids], cnt) + offset]
        items = items[np.lexsort((rng.random(len(items)), owner))]  # shuffled within identity
        slots = ngr * k
        slot_owner = np.repeat(np.arange(len(ids)), slots)
        slot_off = np.arange(slots.sum()) - np.repeat(np.cumsum(slots) - slots, slots)
        # Top up the last group by wrapping around the already-shuffled images: re-drawing from
        # all of them would often repeat an image that is already in the same group.
        pick = slot_off % cnt[slot_owner]
        groups = items[first_img[slot_owner] + pick].reshape(-1, k)
        return groups, np.cumsum(ngr) - ngr, ngr.copy()

    def _fresh_group(self, ident: int, rng: np.random.Generator) -> np.ndarray:
        """K new images of identity `ident` (without replacement when it has K or more)."""
        n, k = int(self._counts[ident]), self.num_instances
        pos = rng.choice(n, k, replace=False) if n >= k else rng.integers(0, n, k)
        return self._order[self._starts[ident] + pos]

    def epoch_indices(self, epoch: int) -> np.ndarray:
        shared = self._rng(epoch)  # identical on every rank: the identity split must agree
        ids = self._split_identities(shared)
        rng = self._rng(epoch, 1 + self.rank)
        groups, first, left = self._make_groups(ids, rng)
        p, nb = self.num_identities, self.num_batches
        # Enforce what a schedule of nb batches can hold: <= nb groups per identity and
        # <= P * nb in all (only DDP imbalance can break these; the surplus is dropped at random,
        # from identities' second and later groups first so that no identity misses the epoch).
        left = np.minimum(left, nb)
        surplus = int(left.sum()) - p * nb
        for floor in (1, 0):
            if surplus <= 0:
                break
            pool = np.repeat(np.arange(len(ids)), np.maximum(left - floor, 0))
            drop = rng.choice(pool, min(surplus, len(pool)), replace=False)
            left -= np.bincount(drop, minlength=len(ids))
            surplus -= len(drop)
        taken = np.zeros(len(ids), dtype=np.int64)
        batches = np.empty((nb, p, self.num_instances), dtype=np.int64)
        for b in range(nb):
            batches_left = nb - b
            forced = np.flatnonzero(left == batches_left)
            others = np.flatnonzero((left > 0) & (left < batches_left))
            need = p - len(forced)
            if len(others) > need:
                w = left[others].astype(np.float64)
                others = rng.choice(others, need, replace=False, p=w / w.sum())
            chosen = np.concatenate([forced, others])
            rows = [groups[first[chosen] + taken[chosen]]]
            taken[chosen] += 1
            left[chosen] -= 1
            if len(chosen) < p:  # end of the epoch: top up with fresh groups of other identities
                spare = np.setdiff1d(np.arange(len(ids)), chosen)
                extra = rng.choice(spare, p - len(chosen), replace=False)
                rows.append(np.stack([self._fresh_group(int(ids[e]), rng) for e in extra]))
            batch = np.concatenate(rows)
            batches[b] = batch[rng.permutation(p)]
        return batches.reshape(-1)


class ShuffleSampler(_EpochSampler):
    """Plain shuffling for softmax-only training (DATALOADER.SAMPLER "random"), DDP-aware.

    Each epoch one seeded permutation of all items is shared by the ranks; rank r takes every
    ``world_size``-th index starting at r, so shards are disjoint and equally long
    (``num_items // world_size``; the few left over change every epoch). ``num_batches`` counts
    full batches (the loader drops the last partial one).
    """

    def __init__(self, num_items: int, batch_size: int, seed: int = 0, rank: int = 0, world_size: int = 1,
                 sample_seeds: bool = False) -> None:
        super().__init__(seed, rank, world_size, sample_seeds)
        self.num_items, self.batch_size = int(num_items), int(batch_size)
        self.num_samples = self.num_items // self.world_size
        if self.batch_size < 1 or self.num_samples < self.batch_size:
            raise ValueError(
                f"ShuffleSampler: {self.num_items} images on {self.world_size} process(es) do not fill one "
                f"batch of {self.batch_size}; lower SOLVER.IMS_PER_BATCH."
            )
        self.num_batches = self.num_samples // self.batch_size

    def epoch_indices(self, epoch: int) -> np.ndarray:
        perm = self._rng(epoch).permutation(self.num_items)
        mine = perm[self.rank : self.num_samples * self.world_size : self.world_size]
        return mine[: self.num_batches * self.batch_size]


class PseudoLabelSampler(_EpochSampler):
    """P x K batches over pseudo-labels that change every epoch, in a fixed number of batches.

    Learning without labels re-clusters before each epoch: :meth:`set_labels` gives the label
    of every dataset item (-1 = an outlier, left out). An epoch is always `num_batches` batches
    (so the loop's length and LR schedule stay fixed whatever the clustering finds): passes of
    an :class:`IdentitySampler` over the labelled items, each from its own seed, cut at
    `num_batches`. Yields ``(index, seed, label)``: the dataset trains on `label`, never on an
    item's own pid (which holds the withheld ground truth when there is one).
    """

    def __init__(self, batch_size: int, num_instances: int, num_batches: int, seed: int = 0, rank: int = 0,
                 world_size: int = 1) -> None:
        super().__init__(seed, rank, world_size, sample_seeds=True)
        if int(num_batches) < 1:
            raise ValueError(f"PseudoLabelSampler: num_batches (UDA.ITERS_PER_EPOCH) must be >= 1, got {num_batches}.")
        self.batch_size, self.num_instances, self.num_batches = int(batch_size), int(num_instances), int(num_batches)
        self.labels: np.ndarray = np.zeros(0, dtype=np.int64)
        self._kept = np.zeros(0, dtype=np.int64)
        self._inner = None

    def set_labels(self, labels: Sequence[int]) -> None:
        """Pseudo-label of every item (-1 = left out) for the epochs from now on."""
        labels = np.asarray(labels, dtype=np.int64)
        kept = np.flatnonzero(labels >= 0)
        self._inner = IdentitySampler(labels[kept], self.batch_size, self.num_instances, self.seed, self.rank,
                                      self.world_size)
        self.labels, self._kept = labels, kept

    def epoch_indices(self, epoch: int) -> np.ndarray:
        if self._inner is None:
            raise RuntimeError("PseudoLabelSampler: set_labels() must be called before the first epoch.")
        need, parts, have, j = self.num_batches * self.batch_size, [], 0, 0
        while have < need:
            part = self._kept[self._inner.epoch_indices(derive_seed(self.seed, epoch, j))]
            parts.append(part)
            have, j = have + len(part), j + 1
        return np.concatenate(parts)[:need]

    def __iter__(self) -> Iterator[Tuple[int, int, int]]:
        for index, seed in super().__iter__():
            yield index, seed, int(self.labels[index])
