"""Positive vs negative pair similarities on the test set, and how much they overlap.

Pairs follow the evaluation protocol: a positive is a query and a gallery image of the same
identity from a different camera; a negative is any pair of different identities. Pairs the
metric ignores (same identity and camera, pid -1 junk) are left out.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

import numpy as np

from ..items import to_numpy_2d
from ._figure import PlotFiles, fmt, new_figure, save_plot


@dataclass
class PairSimilarities:
    """Cosine similarities of sampled positive and negative pairs, and how they were sampled."""

    positive: np.ndarray  # float32
    negative: np.ndarray  # float32
    num_positive_pairs: int  # before sampling
    num_negative_pairs: int
    positive_fraction_kept: float
    negative_fraction_kept: float


def _normalise(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def pair_similarities(
    query_feats: Any,
    gallery_feats: Any,
    q_pids: Any,
    g_pids: Any,
    q_camids: Any,
    g_camids: Any,
    max_pairs: int = 200_000,
    seed: int = 0,
    chunk: int = 256,
) -> PairSimilarities:
    """Cosine similarity of query-gallery pairs, split into positives and negatives.

    When a class has more than `max_pairs` pairs, each pair is kept with probability
    ``max_pairs / total`` (seeded), so the sample is uniform over pairs and about
    `max_pairs` long. Queries are processed `chunk` rows at a time to bound memory.
    """
    qf = _normalise(to_numpy_2d(query_feats, "query_feats"))
    gf = _normalise(to_numpy_2d(gallery_feats, "gallery_feats"))
    q_pids, g_pids = np.asarray(q_pids).reshape(-1), np.asarray(g_pids).reshape(-1)
    q_camids, g_camids = np.asarray(q_camids).reshape(-1), np.asarray(g_camids).reshape(-1)
    if not (len(qf) == len(q_pids) == len(q_camids)) or not (len(gf) == len(g_pids) == len(g_camids)):
        raise ValueError(
            f"Lengths differ: {len(qf)} query features / {len(q_pids)} pids / {len(q_camids)} camids, "
            f"{len(gf)} gallery features / {len(g_pids)} pids / {len(g_camids)} camids; they must match."
        )
    if qf.shape[1] != gf.shape[1]:
        raise ValueError(f"Query features have {qf.shape[1]} dims but gallery features {gf.shape[1]}; use one model for both.")
    # pair totals up front (from pid counts) so that one sampling rate covers the whole set
    uniq, counts = np.unique(g_pids, return_counts=True)
    pos_i = np.clip(np.searchsorted(uniq, q_pids), 0, len(uniq) - 1)
    same_pid = np.where(uniq[pos_i] == q_pids, counts[pos_i], 0)
    n_junk = int((g_pids == -1).sum())
    real_q = q_pids != -1
    # Positives exclude same-camera pairs (the protocol's junk), so the rate gives about
    # max_pairs positives. (evaluation, and torch with it, loads only here, as in cmc.py)
    from reid.evaluation import cross_camera_matches

    total_pos = int(cross_camera_matches(q_pids, g_pids, q_camids, g_camids)[real_q].sum())
    total_neg = int((len(g_pids) - same_pid - n_junk)[real_q].sum())
    p_pos = min(1.0, max_pairs / max(total_pos, 1))
    p_neg = min(1.0, max_pairs / max(total_neg, 1))
    rng = np.random.default_rng(seed)
    pos, neg = [], []
    n_pos_exact = 0
    for s in range(0, len(qf), chunk):
        sim = qf[s : s + chunk] @ gf.T
        qp, qc = q_pids[s : s + chunk, None], q_camids[s : s + chunk, None]
        real = (qp != -1) & (g_pids[None] != -1)
        same = qp == g_pids[None]
        pmask = real & same & (qc != g_camids[None])
        nmask = real & ~same
        n_pos_exact += int(pmask.sum())
        pv, nv = sim[pmask], sim[nmask]
        pos.append(pv[rng.random(pv.size) < p_pos] if p_pos < 1 else pv)
        neg.append(nv[rng.random(nv.size) < p_neg] if p_neg < 1 else nv)
    positive = np.concatenate(pos).astype(np.float32) if pos else np.zeros(0, np.float32)
    negative = np.concatenate(neg).astype(np.float32) if neg else np.zeros(0, np.float32)
    return PairSimilarities(positive, negative, n_pos_exact, total_neg, p_pos, p_neg)


def overlap_stats(positive: np.ndarray, negative: np.ndarray, bins: int = 100) -> Dict[str, Any]:
    """How well the two distributions separate.

    ``overlap_area``: area shared by the two normalised histograms (0 = apart, 1 = identical);
    ``neg_above_pos_p5``: fraction of negatives more similar than the 5th percentile of
    positives (false positives at a threshold that keeps 95% of positives); and
    ``pos_below_neg_p95`` the converse. Also means, stds and the histogram itself.
    """
    positive, negative = np.asarray(positive, np.float64), np.asarray(negative, np.float64)
    if positive.size == 0 or negative.size == 0:
        raise ValueError(
            f"Need both positive and negative pairs, got {positive.size} positive and {negative.size} negative; "
            "the test set needs identities seen by at least two cameras and at least two identities."
        )
    lo = min(positive.min(), negative.min())
    hi = max(positive.max(), negative.max())
    if hi <= lo:
        hi = lo + 1e-6
    edges = np.linspace(lo, hi, bins + 1)
    pc, _ = np.histogram(positive, edges)
    nc, _ = np.histogram(negative, edges)
    width = np.diff(edges)
    pd, nd = pc / (pc.sum() * width), nc / (nc.sum() * width)
    p5, n95 = np.percentile(positive, 5), np.percentile(negative, 95)
    return {
        "overlap_area": float(np.sum(np.minimum(pd, nd) * width)),
        "pos_p5": float(p5),
        "neg_above_pos_p5": float(np.mean(negative > p5)),
        "neg_p95": float(n95),
        "pos_below_neg_p95": float(np.mean(positive < n95)),
        "pos_mean": float(positive.mean()), "pos_std": float(positive.std()),
        "neg_mean": float(negative.mean()), "neg_std": float(negative.std()),
        "edges": edges, "pos_counts": pc, "neg_counts": nc, "pos_density": pd, "neg_density": nd,
    }


def plot_similarity_distributions(
    pairs: PairSimilarities,
    output_path: str,
    bins: int = 100,
    title: str = "Positive vs negative pair similarity (test set)",
) -> PlotFiles:
    """Overlaid histograms (densities) of positive and negative similarities, the shared area
    hatched, the positives' 5th percentile marked, and the overlap numbers in a box."""
    st = overlap_stats(pairs.positive, pairs.negative, bins)
    edges, pd, nd = st["edges"], st["pos_density"], st["neg_density"]
    fig, (ax,) = new_figure(size=(7.5, 5.0))
    ax.stairs(nd, edges, fill=True, alpha=0.45, color="tab:red", label=f"negative pairs (n={pairs.negative.size:,})")
    ax.stairs(pd, edges, fill=True, alpha=0.45, color="tab:green", label=f"positive pairs (n={pairs.positive.size:,})")
    ax.stairs(np.minimum(pd, nd), edges, fill=True, facecolor="none", edgecolor="0.2", hatch="///",
              linewidth=0, label=f"overlap area {st['overlap_area']:.3f}")
    ax.axvline(st["pos_p5"], color="k", linestyle="--", linewidth=1,
               label=f"5th percentile of positives ({st['pos_p5']:.3f})")
    ax.text(0.02, 0.97, f"negatives above it: {100 * st['neg_above_pos_p5']:.2f}%\n"
            f"positives below negatives' 95th pct: {100 * st['pos_below_neg_p95']:.2f}%",
            transform=ax.transAxes, va="top", fontsize=9, bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "0.7"})
    ax.set(title=title, xlabel="cosine similarity", ylabel="density (per unit cosine similarity)")
    ax.legend(loc="upper right", fontsize=8)
    summary = {k: v for k, v in st.items() if not isinstance(v, np.ndarray)}
    data = {
        **summary,
        "num_positive_pairs": pairs.num_positive_pairs, "num_negative_pairs": pairs.num_negative_pairs,
        "positive_sampled": int(pairs.positive.size), "negative_sampled": int(pairs.negative.size),
        "positive_fraction_kept": pairs.positive_fraction_kept,
        "negative_fraction_kept": pairs.negative_fraction_kept,
        "bin_edges": edges, "positive_counts": st["pos_counts"], "negative_counts": st["neg_counts"],
    }
    rows = [[fmt(edges[i]), fmt(edges[i + 1]), int(st["pos_counts"][i]), int(st["neg_counts"][i]), fmt(pd[i]), fmt(nd[i])]
            for i in range(len(pd))]
    return save_plot(fig, output_path, data,
                     ["bin_left", "bin_right", "positive_count", "negative_count", "positive_density", "negative_density"],
                     rows)


def similarity_from_features(features_path: str, max_pairs: int = 200_000, seed: int = 0) -> PairSimilarities:
    """:func:`pair_similarities` of a saved-features npz."""
    from ..from_features import load_saved_features

    s = load_saved_features(features_path)
    return pair_similarities(s.query_feats, s.gallery_feats, s.query.pids, s.gallery.pids,
                             s.query.camids, s.gallery.camids, max_pairs=max_pairs, seed=seed)
