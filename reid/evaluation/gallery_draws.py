"""The gallery-draws protocol of VehicleID (Liu et al., CVPR 2016): a random gallery, drawn again.

VehicleID's test lists name the images of N vehicles and nothing else: no query/gallery split,
no cameras. Vehicle re-ID papers report it this way (the random one-image gallery per vehicle
goes back to the dataset's paper; averaging 10 draws is the common practice, which fast-reid's
model zoo calls "10-fold cross-validation"):

1. for every vehicle, ONE of its images, drawn at random, is the gallery; all its other images
   are queries (a vehicle with a single image is then a gallery image nobody queries for);
2. every query is ranked against that gallery of N images; there are no cameras, so no gallery
   image is ignored (no same-camera rule);
3. CMC and mAP (and here mINP) of the draw are computed as usual, and the reported figure is the
   MEAN over the draws (TEST.GALLERY_DRAWS, 10).

Here the features of all test images are extracted once; each draw only selects rows. Draw d
picks its gallery with numpy's generator seeded ``[seed, d]`` (TEST.GALLERY_DRAW_SEED), so a draw
does not depend on how many draws are made and results repeat exactly. The metrics of each draw
come from the ordinary, vectorised ranking code (reid/evaluation/rank.py) through the evaluator;
the loop is over draws only (10), never over images or queries. The mean is reported as the
result and the standard deviation and every draw's figures beside it (``EvalResult.draws``).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import torch

from .extract import Features

#: Bookkeeping cameras of a draw: query and gallery differ, so no same-camera rule applies.
QUERY_CAMID, GALLERY_CAMID = 1, 0


def check_num_draws(num_draws: object) -> int:
    """`num_draws` as an int >= 1; ValueError naming TEST.GALLERY_DRAWS otherwise."""
    if isinstance(num_draws, bool) or not isinstance(num_draws, (int, np.integer)) or int(num_draws) < 1:
        raise ValueError(f"TEST.GALLERY_DRAWS must be an integer >= 1 (the number of random gallery draws whose "
                         f"results are averaged; 10 is usual for VehicleID), got {num_draws!r}.")
    return int(num_draws)


def draw_galleries(pids: Sequence[int], num_draws: int, seed: int) -> np.ndarray:
    """Which images are the gallery in each draw: bool ``[num_draws, N]``, one True per identity.

    Draw d gives every image a random key from ``np.random.default_rng([seed, d])`` and takes, per
    identity, the image with the smallest key (sorted by identity, then key). Vectorised over images.
    """
    num_draws = check_num_draws(num_draws)
    pids = np.asarray(pids, dtype=np.int64).reshape(-1)
    masks = np.zeros((num_draws, len(pids)), dtype=bool)
    for d in range(num_draws):
        keys = np.random.default_rng([int(seed), d]).random(len(pids))
        order = np.lexsort((keys, pids))
        first = np.ones(len(order), dtype=bool)
        first[1:] = pids[order[1:]] != pids[order[:-1]]
        masks[d, order[first]] = True
    return masks


def split_draw(pool: Features, gallery_mask: np.ndarray) -> Tuple[Features, Features]:
    """(query, gallery) Features of one draw: the pool's rows where `gallery_mask` is False / True,
    in pool order, with the bookkeeping cameras QUERY_CAMID / GALLERY_CAMID."""
    mask = np.asarray(gallery_mask, dtype=bool)
    q_idx, g_idx = np.flatnonzero(~mask), np.flatnonzero(mask)

    def take(idx: np.ndarray, camid: int) -> Features:
        return Features(pool.feats[torch.from_numpy(idx)], pool.pids[idx], np.full(len(idx), camid, np.int64),
                        [pool.paths[i] for i in idx.tolist()])

    return take(q_idx, QUERY_CAMID), take(g_idx, GALLERY_CAMID)


def mean_and_std(per_draw: List[Dict[str, float]]) -> Tuple[Dict[str, float], Dict[str, float]]:
    """Mean and (population) standard deviation over draws of each metric of `per_draw` rows."""
    keys = list(per_draw[0])
    values = np.array([[row[k] for k in keys] for row in per_draw], dtype=np.float64)
    return dict(zip(keys, values.mean(axis=0).tolist())), dict(zip(keys, values.std(axis=0).tolist()))


__all__ = ["GALLERY_CAMID", "QUERY_CAMID", "check_num_draws", "draw_galleries", "mean_and_std", "split_draw"]
