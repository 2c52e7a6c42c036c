"""k-reciprocal re-ranking (Zhong et al., "Re-ranking Person Re-identification with
k-reciprocal Encoding", CVPR 2017), exact and sparse.

The algorithm, as the authors' published code computes it (N = Q + G items, queries first;
N(i, k) = the k + 1 nearest items of i, itself included, by ascending distance):

  S1  d(i, j) = squared Euclidean distance over all N items, each row divided by its
      maximum: d(i, j) = E(i, j) / max_j' E(i, j'). For euclidean, E = D^2 with D the plain
      (not squared) distance; for cosine, E = 1 - cos, which is half the squared Euclidean
      distance of the L2-normalised features (the published code's 2 - 2 cos), so both
      metrics give the same result on normalised features.
  S2  k-reciprocal set R(i, k) = {j in N(i, k) : i in N(j, k)}  (paper Sec. 3.2).
  S3  expansion: R*(i) = R(i, k1) united with R(c, round(k1 / 2)) for every c in R(i, k1)
      with |R(c, round(k1/2)) & R(i, k1)| > 2/3 |R(c, round(k1/2))|  (paper Sec. 3.2;
      round = numpy.around, halves to even).
  S4  V[i, j] = exp(-d(i, j)) / sum_{j' in R*(i)} exp(-d(i, j')) for j in R*(i), else 0
      (Gaussian-kernel encoding, paper Sec. 3.3).
  S5  local query expansion, for k2 > 1: V[i] <- mean of V[j] over the k2 nearest j of i,
      i itself first (paper Sec. 3.4).
  S6  s(q, g) = sum_k min(V[q, k], V[g, k]); Jaccard distance 1 - s / (2 - s)
      (= 1 - sum min / sum max, as V rows sum to 1; paper Sec. 3.3);
      final(q, g) = (1 - lambda) * Jaccard + lambda * d(q, g)  (paper Sec. 3.4).

The output equals this to float rounding; what differs is only how it is computed. The
original keeps several dense N x N matrices: 1.5 GB each at Market-1501 size, 35 GB at
MSMT17 size. Every step, however, only reads the nearest neighbours of each item and the
non-zero entries of V (O(k1^2) per row). So here:

  * one pass over the N x N distances in symmetric blocks (each block computed once, used
    for its rows and, transposed, for its columns) keeps a sorted nearest-neighbour list
    and the maximum distance of every item, and the query x gallery block of the output
    (reid.evaluation.neighbours; from a size on, optionally an approximate inverted-file
    pass instead, which no longer gives the published algorithm's output exactly);
  * S2-S4 work on those lists for all items at once (padded index arrays, no Python loop
    over items) and store V as sparse CSR rows;
  * S5 is a sparse product; S6 accumulates the min-sum over the gallery items sharing a
    non-zero column of V (inverted index), one chunk of output rows at a time.

Memory: O(N * k1 + nnz(V) + Q * G); no N x N matrix is ever formed. Equal distances may be
ordered differently from the original's quicksort (whose order among ties is itself
arbitrary), so exact equality holds for inputs without tied distances.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import numpy as np
import scipy.sparse as sp
import torch

from reid.utils.stop_request import check_stop

from .distance import (
    ArrayLike,
    as_query_gallery,
    check_metric,
    feature_center,
    pair_distances,
    prepare_features,
)
from .camera_neighbours import camera_balanced_pass
from .neighbours import EXACT_BLOCK, NeighbourSearch, nearest_neighbours

# Items per chunk when building reciprocal sets and V rows.
_ROW_CHUNK = 4096
# (query, gallery, column) triples materialised at once in the Jaccard min-sum.
_TRIPLES = 1 << 22
# Output entries (query x gallery) combined at once in the final mix (16 MB as float64).
_OUT_ELEMENTS = 1 << 21


def _check_params(k1: int, k2: int, lambda_value: float) -> Tuple[int, int, float]:
    if int(k1) != k1 or k1 < 1:
        raise ValueError(f"k1 must be an integer >= 1, got {k1}.")
    if int(k2) != k2 or k2 < 1:
        raise ValueError(f"k2 must be an integer >= 1, got {k2}.")
    lam = float(lambda_value)
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda_value must lie in [0, 1], got {lambda_value}.")
    return int(k1), int(k2), lam


def _reciprocal(nbr: np.ndarray, k: int) -> np.ndarray:
    """S2: mask[i, p] = True iff nbr[i, p] (p < k) is a reciprocal neighbour of i, i.e. i is
    among the first k entries of nbr[nbr[i, p]] (k = k1 + 1: the list includes the item)."""
    f = nbr[:, :k]
    out = np.empty(f.shape, dtype=bool)
    for r0 in range(0, f.shape[0], _ROW_CHUNK):
        r1 = min(r0 + _ROW_CHUNK, f.shape[0])
        out[r0:r1] = (f[f[r0:r1]] == np.arange(r0, r1)[:, None, None]).any(axis=2)
    return out


def _members_of(items: np.ndarray, sets: np.ndarray, n: int) -> np.ndarray:
    """Whether each of row r's `items` (``[R, ...]``, ids in [0, n)) is in its set ``sets[r]``
    (``[R, m]``, -1 = no member): one sorted array of (row, id) keys searched for all of them
    (comparing every item with every member costs m times as much: a quarter of the clustering
    step at 1,000,000 items)."""
    rows = np.arange(sets.shape[0], dtype=np.int64)
    keys = np.where(sets >= 0, rows[:, None] * n + sets, -1).ravel()
    keys.sort()
    wanted = (rows.reshape((-1,) + (1,) * (items.ndim - 1)) * n + items).ravel()
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return (keys[at] == wanted).reshape(items.shape)


def _expanded_sets(nbr: np.ndarray, k1: int) -> Tuple[np.ndarray, np.ndarray]:
    """S3: R*(i), the k1-reciprocal set of i expanded with the half-k1 reciprocal sets
    R(c, round(k1/2)) of its members c that share more than 2/3 of their items with R(i).
    Returns (row, col) index arrays of all members, sorted and unique per row."""
    n = nbr.shape[0]
    kf = min(k1 + 1, n)
    # Half of k1 rounded like the published code (numpy.around: halves to even).
    kh = min(int(np.around(k1 / 2.0)) + 1, n)
    fwd, fwd_ok = nbr[:, :kf], _reciprocal(nbr, kf)
    half, half_ok = nbr[:, :kh], _reciprocal(nbr, kh)
    rows_out, cols_out = [], []
    for r0 in range(0, n, _ROW_CHUNK):
        r1 = min(r0 + _ROW_CHUNK, n)
        f, ok = fwd[r0:r1], fwd_ok[r0:r1]
        cand, cand_ok = half[f], half_ok[f]  # [c, kf, kh]: R(c, kh) of each forward neighbour
        in_r = _members_of(cand, np.where(ok, f, -1), n)  # in R(i): the forward neighbours that are reciprocal
        inter = (in_r & cand_ok).sum(axis=2)
        size = cand_ok.sum(axis=2)
        # Same comparison as the published code: |R(c) & R(i)| > 2/3 * |R(c)| in float64.
        accept = ok & (inter > (2.0 / 3.0) * size)
        members = np.concatenate(
            [np.where(ok, f, n), np.where(accept[:, :, None] & cand_ok, cand, n).reshape(r1 - r0, -1)], axis=1
        )
        members.sort(axis=1)
        keep = members < n
        keep[:, 1:] &= members[:, 1:] != members[:, :-1]
        r, c = np.nonzero(keep)
        rows_out.append(r + r0)
        cols_out.append(members[r, c])
    return np.concatenate(rows_out), np.concatenate(cols_out)


def _member_distances(
    rows: np.ndarray,
    cols: np.ndarray,
    nbr_i: np.ndarray,
    nbr_d: np.ndarray,
    x: torch.Tensor,
    x_sq: Optional[torch.Tensor],
    metric: str,
) -> np.ndarray:
    """Plain D(i, j) for every S3 member pair (for S4's weights): read from i's neighbour
    list when j is on it (most pairs), computed from the features otherwise (members
    reached through a neighbour's set)."""
    out = np.empty(rows.shape[0], dtype=np.float32)
    step = 1 << 18
    for a in range(0, rows.shape[0], step):
        r, c = rows[a : a + step], cols[a : a + step]
        hit = nbr_i[r] == c[:, None]
        found = hit.any(axis=1)
        out[a : a + step] = np.take_along_axis(nbr_d[r], hit.argmax(axis=1)[:, None], axis=1)[:, 0]
        miss = np.flatnonzero(~found)
        if miss.size:
            out[a + miss] = pair_distances(x, x_sq, r[miss], c[miss], metric)
    return out


def _shared_triples(
    v_rows: sp.csr_matrix, v_cols: sp.csr_matrix, rows_cap: int
) -> Iterator[Tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """The (a, b, min(V_ak, V_bk)) triples of rows a of `v_rows` and b of `v_cols` sharing a
    non-zero column k, from the inverted index (the `v_cols` rows of each column), one chunk
    of at most `rows_cap` rows a (and about _TRIPLES triples, at least one row) at a time:
    yields ``(r0, r1, a - r0, b, min)``; the pairs repeat, once per shared column."""
    cols_t = v_cols.T.tocsr()
    col_ptr, col_rows, col_vals = cols_t.indptr, cols_t.indices, cols_t.data
    # Triples per entry of V and their running total per row (not per entry: at 1,000,000
    # items V has ~10^8 entries, and an int64 per entry is most of a gigabyte).
    per_entry = np.diff(col_ptr).astype(np.int32)[v_rows.indices]
    row_total = np.zeros(v_rows.shape[0], dtype=np.int64)
    filled = np.diff(v_rows.indptr) > 0
    row_total[filled] = np.add.reduceat(per_entry, v_rows.indptr[:-1][filled], dtype=np.int64)
    cum_row = np.concatenate([[0], np.cumsum(row_total)])
    del row_total
    num_a = v_rows.shape[0]
    r0 = 0
    while r0 < num_a:
        check_stop("the k-reciprocal distances")  # a run asked to stop gives this up (stop_request.py)
        r1 = min(num_a, r0 + rows_cap, int(np.searchsorted(cum_row, cum_row[r0] + _TRIPLES, side="right")) - 1)
        r1 = max(r1, r0 + 1)
        e0, e1 = v_rows.indptr[r0], v_rows.indptr[r1]
        cnt = per_entry[e0:e1].astype(np.int64)
        total = int(cum_row[r1] - cum_row[r0])
        k, a = v_rows.indices[e0:e1], v_rows.data[e0:e1]
        row = np.repeat(np.arange(r1 - r0), np.diff(v_rows.indptr[r0 : r1 + 1]))
        # Ragged gather: entry e expands to positions col_ptr[k_e] ... col_ptr[k_e + 1] - 1.
        offs = np.repeat(col_ptr[k] - (np.cumsum(cnt) - cnt), cnt) + np.arange(total)
        mins = np.minimum(np.repeat(a, cnt), col_vals[offs])
        yield r0, r1, np.repeat(row, cnt), col_rows[offs], mins
        r0 = r1


def shared_mass_chunks(
    v_rows: sp.csr_matrix, v_cols: sp.csr_matrix, out_elements: int = _OUT_ELEMENTS
) -> Iterator[Tuple[int, int, np.ndarray]]:
    """S6's shared mass s(a, b) = sum_k min(V_ak, V_bk) of every row a of `v_rows` with every
    row b of `v_cols`, one chunk of rows at a time: yields ``(r0, r1, s)`` with s a dense
    float64 ``[r1 - r0, B]`` array (B = rows of `v_cols`).

    s is non-zero only where a and b share a non-zero column of V, so it is accumulated from
    the (a entry, b entry) triples sharing a column (:func:`_shared_triples`); a chunk holds as
    many rows as fit both `out_elements` output entries and the triple budget (at least one
    row). Re-ranking (query x gallery) reads V through this function, the Jaccard graph of
    clustering (all x all, sparse) through :func:`shared_mass_sparse`.
    """
    num_b = v_cols.shape[0]
    rows_cap = max(1, out_elements // max(1, num_b))
    for r0, r1, row, col, mins in _shared_triples(v_rows, v_cols, rows_cap):
        if not mins.size:  # (bincount would give integers)
            yield r0, r1, np.zeros((r1 - r0, num_b))
            continue
        yield r0, r1, np.bincount(row * num_b + col, weights=mins, minlength=(r1 - r0) * num_b).reshape(r1 - r0, num_b)


def shared_mass_sparse(
    v: sp.csr_matrix, s_min: float
) -> Iterator[Tuple[int, sp.csr_matrix]]:
    """The shared masses s(a, b) >= `s_min` of the rows of `v` with each other for b >= a (s is
    symmetric), one chunk of rows at a time: yields ``(r0, s)`` with s a sparse CSR
    ``[rows, N]`` (float64) holding only those pairs. The triples of a chunk are summed per pair
    after one sort of their pair keys (torch's, on every core; scipy's COO to CSR conversion
    sorts each row on one core: a third of the clustering step at 1,000,000 items), so no dense
    row of N entries is ever formed: at 1,000,000 items a dense chunk would hold two rows at most."""
    num_b = v.shape[0]
    for r0, r1, row, col, mins in _shared_triples(v, v, v.shape[0]):
        upper = col >= row + r0
        # int32 keys where a chunk's pairs fit (always at 1,000,000 items): a radix sort of half the passes
        key = row[upper].astype(np.int64) * num_b + col[upper]
        if (r1 - r0) * num_b < 2**31:
            key = key.astype(np.int32)
        # stable: each pair's triples are summed in the order they came, whatever the sort
        key_t, order = torch.sort(torch.from_numpy(key), stable=True)
        key, vals = key_t.numpy(), mins[upper][order.numpy()]
        first = np.flatnonzero(np.concatenate([[True], key[1:] != key[:-1]])) if len(key) else np.zeros(0, np.int64)
        mass = np.add.reduceat(vals, first) if len(key) else vals
        keep = mass >= s_min
        pair, mass = key[first[keep]], mass[keep]
        counts = np.bincount(pair // num_b, minlength=r1 - r0)
        indptr = np.concatenate([[0], np.cumsum(counts)])
        yield r0, sp.csr_matrix((mass, (pair % num_b).astype(np.int32), indptr), shape=(r1 - r0, num_b))


def _jaccard_into(
    out: np.ndarray, v: sp.csr_matrix, num_q: int, lam: float, row_max: np.ndarray, power: int
) -> None:
    """S6, in place on `out` (which holds the plain q x g distances D):
    out = (1 - lam) * (1 - s / (2 - s)) + lam * E / max E, s = sum_k min(V_qk, V_gk), with
    E = D^`power` (2 for euclidean, 1 for cosine; `row_max` is max D). The dense part
    (s = 0, Jaccard distance 1) is written with float32 array operations, s comes from
    :func:`shared_mass_chunks`.
    """
    scale = (lam / row_max[:num_q].astype(np.float64) ** power).astype(np.float32)
    for r0, r1, ssum in shared_mass_chunks(v[:num_q], v[num_q:]):
        blk = out[r0:r1]
        if power == 2:
            blk *= blk
        blk *= scale[r0:r1, None]
        blk += np.float32(1.0 - lam)
        # (1 - lam) * jaccard = (1 - lam) * (1 - s / (2 - s)); the 1 is already added.
        # In place: this chunk's float64 buffers are the largest temporaries here.
        ssum /= 2.0 - ssum
        ssum *= 1.0 - lam
        blk -= ssum


@dataclass
class KReciprocalVectors:
    """S1-S5 of all N items: V (sparse CSR ``[N, N]``, rows sum to 1), the maximum plain
    distance of every row (S1's normaliser), the exponent of S1 (2 euclidean, 1 cosine) and the
    plain query x gallery distances of the neighbour pass (``[Q, N - Q]``; empty for Q = 0)."""

    v: sp.csr_matrix
    row_max: np.ndarray
    power: int
    qg: np.ndarray


def k_reciprocal_vectors(
    x: torch.Tensor, num_q: int, k1: int, k2: int, metric: str, block_size: Optional[int] = None,
    neighbours: Optional[NeighbourSearch] = None, cameras: Optional[np.ndarray] = None,
) -> KReciprocalVectors:
    """S1-S5 for checked features `x` ``[N, D]`` (queries first, `num_q` of them): the
    k-reciprocal encoding V that re-ranking and the clustering Jaccard distance share.
    `neighbours` picks the neighbour pass (default: exact; reid.evaluation.neighbours); with
    `cameras` (int ``[N]``, no queries) the lists are camera-balanced instead
    (reid.evaluation.camera_neighbours).

    `x` is consumed (normalised or centred in place). Memory O(N * k1 + nnz(V) + Q * G).
    """
    n = x.shape[0]
    x, x_sq = prepare_features(x, metric, feature_center(x) if metric == "euclidean" else None, inplace=True)
    # The algorithm reads the first k1 + 1 (and k2) neighbours; keeping twice that many
    # costs little and holds almost every expanded-set member, whose distance is then
    # looked up instead of recomputed from gathered features (slow: random row reads).
    k = min(max(2 * (k1 + 1), k2), n)
    block = int(block_size) if block_size is not None else EXACT_BLOCK
    if block < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}.")

    if cameras is not None:
        if num_q:
            raise ValueError("camera-balanced neighbour lists are for clustering (no queries), got num_q > 0.")
        nb = camera_balanced_pass(x, x_sq, metric, k, cameras)
    else:
        nb = nearest_neighbours(x, x_sq, num_q, metric, k, neighbours, block)
    nbr_i, nbr_d, row_max, qg = nb.indices, nb.distances, nb.row_max, nb.qg
    del nb
    # A row whose items are all identical has maximum 0; its normalised distances are 0/0
    # in the original. Dividing by 1 instead keeps them 0 (and the output finite).
    row_max = np.where(row_max > 0, row_max, 1.0).astype(np.float32)

    rows, cols = _expanded_sets(nbr_i, k1)  # S2, S3
    dist = _member_distances(rows, cols, nbr_i, nbr_d, x, x_sq, metric).astype(np.float64)
    # S1's squared Euclidean distance from the plain one: D^2 for euclidean; for cosine the
    # plain 1 - cos is already (half) the squared Euclidean distance of unit vectors.
    power = 2 if metric == "euclidean" else 1
    # S4 with S1's normalised distance.
    weight = np.exp(-(dist**power) / row_max[rows].astype(np.float64) ** power)
    weight /= np.bincount(rows, weights=weight, minlength=n)[rows]
    v = sp.csr_matrix((weight.astype(np.float32), (rows, cols)), shape=(n, n))
    del rows, cols, dist, weight

    kq = min(k2, n)
    if k2 != 1:
        # S5: V_i <- mean of V over i's k2 nearest items (itself first), as a sparse product.
        avg = sp.csr_matrix(
            (np.full(n * kq, 1.0 / kq, dtype=np.float32),
             nbr_i[:, :kq].ravel(),
             np.arange(0, n * kq + 1, kq)),
            shape=(n, n),
        )
        v = (avg @ v).tocsr()
    v.sort_indices()
    return KReciprocalVectors(v, row_max, power, qg)


def re_ranking(
    q_feats: ArrayLike,
    g_feats: ArrayLike,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    metric: str = "cosine",
    block_size: Optional[int] = None,
    neighbours: Optional[NeighbourSearch] = None,
) -> np.ndarray:
    """k-reciprocal re-ranked query x gallery distances, numpy float32 ``[Q, G]``.

    Equal (up to float rounding) to the published algorithm (S1-S6 of the module docstring) on
    inputs without tied distances: ``(1 - lambda) * jaccard + lambda * d`` on the query x gallery block.

    Args:
        q_feats, g_feats: ``[Q, D]`` and ``[G, D]`` features (numpy or torch; CUDA tensors
            run the neighbour pass on the GPU).
        k1: size of the k-reciprocal neighbourhood (the paper's k1).
        k2: neighbours averaged in local query expansion.
        lambda_value: weight of the original distance in the final distance, in [0, 1].
        metric: ``"cosine"`` or ``"euclidean"``.
        block_size: items per side of a distance block in the exact neighbour pass.
        neighbours: how the neighbour lists are made (reid.evaluation.neighbours.NeighbourSearch;
            default exact). An approximate pass (``NeighbourSearch("ivf")``, or "auto" above its
            size) gives approximately this result, at a fraction of the time for large N.

    Memory is O(N * k1 + nnz(V) + Q * G); no N x N matrix is built.

    Raises:
        ValueError: bad parameters, unknown metric, empty inputs, mismatched dimensions,
            NaN/inf features.
    """
    k1, k2, lam = _check_params(k1, k2, lambda_value)
    metric = check_metric(metric)
    q, g = as_query_gallery(q_feats, g_feats)
    num_q = q.shape[0]
    x = torch.cat([q, g], dim=0)
    del q, g
    enc = k_reciprocal_vectors(x, num_q, k1, k2, metric, block_size, neighbours)
    del x
    out = enc.qg
    _jaccard_into(out, enc.v, num_q, lam, enc.row_max, enc.power)  # S6
    return out
