"""Ranked pictures from features: what ``tools/test.py --visualize K`` and
``tools/visualize.py`` call. Computes distances (and re-ranking) only when not given."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence, Union

import numpy as np

from reid.utils.path_kinds import check_file

from .items import Items, as_items, to_numpy_2d
from .ranked_list import RankedVisualization, visualize_ranked_results


@dataclass
class SavedFeatures:
    """A saved-features file in memory: features plus identities of query and gallery."""

    query_feats: np.ndarray
    gallery_feats: np.ndarray
    query: Items
    gallery: Items


def load_saved_features(path: str) -> SavedFeatures:
    """Read a ``--save-features`` npz (format in docs/evaluation.md) with a clear error if absent.

    Reading goes through ``reid.evaluation.load_features`` so there is one reader of the format.
    """
    check_file(path, "Saved features file", "write one with `python tools/test.py --run RUN_FOLDER --save-features "
               "FILE.npz`.")
    from reid.evaluation import load_features  # evaluation pulls in torch; loaded on use

    q, g = load_features(path)
    return SavedFeatures(to_numpy_2d(q.feats, "query_feats"), to_numpy_2d(g.feats, "gallery_feats"),
                         as_items(q, "query"), as_items(g, "gallery"))


def visualize_from_features(
    query_feats: Any,
    gallery_feats: Any,
    query_info: Any,
    gallery_info: Any,
    output_dir: str,
    topk: int = 10,
    num_queries: int = 10,
    mode: str = "worst",
    metric: str = "cosine",
    distmat: Optional[np.ndarray] = None,
    rerank_distmat: Optional[np.ndarray] = None,
    rerank: bool = False,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    both_rows: bool = False,
    show_junk: bool = False,
    seed: int = 0,
    indices: Optional[Sequence[Union[int, str]]] = None,
    names: Optional[Sequence[str]] = None,
    all_AP: Optional[np.ndarray] = None,
    rerank_all_AP: Optional[np.ndarray] = None,
    image_root: Optional[str] = None,
    tile_height: int = 256,
    image_format: str = "jpg",
    description: str = "",
) -> RankedVisualization:
    """Draw ranked-result pictures, ``index.html`` and ``ranked_results.csv`` into `output_dir`.

    Args:
        query_feats, gallery_feats: ``[Q, D]`` / ``[G, D]`` features (numpy or torch); may be
            None when `distmat` (and, with re-ranking, `rerank_distmat`) are given.
        query_info, gallery_info: ``Features`` objects, lists of ``(path, pid, camid)`` or
            mappings with ``paths``/``pids``/``camids``.
        distmat: plain distances; computed with ``compute_distance(metric)`` when None.
        rerank_distmat: re-ranked distances; computed with ``re_ranking(k1, k2, lambda_value,
            metric)`` when None and `rerank` is True. When present, pictures show this order.
        all_AP, rerank_all_AP: per-query AP of the two orders, if already computed (saves a pass).
        Other arguments: see :func:`reid.visualization.visualize_ranked_results`.
    """
    q_items, g_items = as_items(query_info, "query_info"), as_items(gallery_info, "gallery_info")
    # re-ranking parameters are named only when the distances are computed here
    rerank_text = "; re-ranked distances" if rerank_distmat is not None else ""
    need_feats = distmat is None or (rerank and rerank_distmat is None)
    if need_feats:
        if query_feats is None or gallery_feats is None:
            raise ValueError("Features are needed to compute distances; pass query_feats and gallery_feats or distmat.")
        qf, gf = to_numpy_2d(query_feats, "query_feats"), to_numpy_2d(gallery_feats, "gallery_feats")
        if len(qf) != len(q_items) or len(gf) != len(g_items):
            raise ValueError(
                f"{len(qf)} query features for {len(q_items)} query images and {len(gf)} gallery features for "
                f"{len(g_items)} gallery images; features and identities must come from the same run."
            )
        from reid.evaluation import compute_distance, re_ranking  # torch, loaded on use

        if distmat is None:
            distmat = np.asarray(compute_distance(qf, gf, metric=metric))
        if rerank and rerank_distmat is None:
            rerank_distmat = np.asarray(re_ranking(qf, gf, k1=k1, k2=k2, lambda_value=lambda_value, metric=metric))
            rerank_text = f"; k-reciprocal re-ranking (k1={k1}, k2={k2}, lambda={lambda_value})"
    if not description:
        description = f"distance: {metric}{rerank_text}; query choice: {mode}; top-{topk}"
    return visualize_ranked_results(
        distmat, q_items, g_items, output_dir, topk=topk, mode=mode, num_queries=num_queries, seed=seed,
        indices=indices, names=names, rerank_distmat=rerank_distmat, both_rows=both_rows, show_junk=show_junk,
        all_AP=all_AP, rerank_all_AP=rerank_all_AP, tile_height=tile_height, image_format=image_format,
        image_root=image_root, description=description,
    )


def visualize_from_npz(features_path: str, output_dir: str, **kwargs: Any) -> RankedVisualization:
    """:func:`visualize_from_features` on a saved-features npz (``tools/visualize.py``)."""
    saved = load_saved_features(features_path)
    return visualize_from_features(
        saved.query_feats, saved.gallery_feats, saved.query, saved.gallery, output_dir, **kwargs
    )
