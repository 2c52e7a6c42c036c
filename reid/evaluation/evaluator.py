"""The evaluator: dataset items -> features -> distances -> metrics (-> re-ranking) -> report.

Used by training's periodic evaluation and by ``tools/test.py``. Without re-ranking, distances
are computed chunk-wise from the features, so the query x gallery matrix never exists in full
(MSMT17: 11,659 x 82,161). Re-ranking needs its Q x G output matrix anyway.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from reid.utils.process import get_rank, get_world_size, shard_bounds

from .extract import Features, extract_features
from .neighbours import NeighbourSearch, neighbour_search
from .open_set import holdout_gallery, open_set_metrics, open_set_metrics_from_features
from .query_expansion import aqe
from .rank import evaluate_rank, evaluate_rank_from_features
from .rerank import re_ranking
from .verification import DEFAULT_FARS, verification_metrics, verification_metrics_from_features

logger = logging.getLogger("reid.evaluation")

Item = Tuple[str, int, int]
REPORTED_RANKS = (1, 5, 10)


@dataclass
class EvalResult:
    """What one evaluation produced: metric rows, and the features for saving/visualising."""

    metrics: Dict[str, Dict[str, float]]  # row name ("plain", "rerank") -> {"R-1": %, ...}
    query: Features
    gallery: Features
    all_ap: Dict[str, np.ndarray] = field(default_factory=dict)  # row name -> per-query AP
    distmats: Dict[str, np.ndarray] = field(default_factory=dict)  # only rows that built one
    cmc: Dict[str, np.ndarray] = field(default_factory=dict)  # row name -> CMC curve (fractions)
    seconds: float = 0.0
    # row name -> verification_metrics(...) / open_set_metrics(...) result, when asked for
    verification: Dict[str, Dict] = field(default_factory=dict)
    open_set: Dict[str, Dict] = field(default_factory=dict)


def summarize(result: dict, ranks: Sequence[int] = REPORTED_RANKS) -> Dict[str, float]:
    """Turn an `evaluate_rank` result into percentages keyed "R-1", "R-5", "R-10", "mAP", "mINP".

    The CMC curve must reach the largest rank asked for (evaluate with ``max_rank`` at least
    that deep); a shorter one is an error rather than a silently mislabelled number.
    """
    cmc = np.asarray(result["cmc"])
    if max(ranks) > len(cmc):
        raise ValueError(
            f"The CMC curve has {len(cmc)} ranks but R-{max(ranks)} was asked for; evaluate with "
            f"max_rank >= {max(ranks)}."
        )
    row = {f"R-{r}": float(cmc[r - 1]) * 100.0 for r in ranks}
    row["mAP"] = float(result["mAP"]) * 100.0
    row["mINP"] = float(result["mINP"]) * 100.0
    return row


def _text_table(rows: Dict[str, Sequence[str]], cols: Sequence[str], width: int, title: str = "") -> str:
    """A fixed-width text table: one row per entry of `rows` (its cells, already formatted)."""
    name_w = max([len("method")] + [len(k) for k in rows])
    lines = [title] if title else []
    header = f"| {'method':<{name_w}} | " + " | ".join(f"{c:>{width}}" for c in cols) + " |"
    lines += [header, "|" + "-" * (len(header) - 2) + "|"]
    for name, cells in rows.items():
        lines.append(f"| {name:<{name_w}} | " + " | ".join(f"{c:>{width}}" for c in cells) + " |")
    return "\n".join(lines)


def format_table(metrics: Dict[str, Dict[str, float]], title: str = "") -> str:
    """A fixed-width text table with one row per metric row (e.g. plain and re-ranked)."""
    cols = ["R-1", "R-5", "R-10", "mAP", "mINP"]
    return _text_table({name: [f"{row[c]:6.2f}" for c in cols] for name, row in metrics.items()}, cols, 6, title)


def format_verification(verification: Dict[str, Dict], title: str = "") -> str:
    """A text table of TAR at each FAR (with its threshold) and the EER, one row per metric row."""
    if not verification:
        return ""
    fars = list(next(iter(verification.values()))["tar"])
    rows = {name: [f"{100 * v['tar'][f]:6.2f} (t {v['threshold'][f]:.4f})" for f in fars]
            + [f"{100 * v['eer']:6.2f} (t {v['eer_threshold']:.4f})"] for name, v in verification.items()}
    return _text_table(rows, [f"TAR@{f:g}" for f in fars] + ["EER"], 17, title)


def format_open_set(open_set: Dict[str, Dict], title: str = "") -> str:
    """A text table of DIR at each FAR (with its threshold) and rank-1, one row per metric row."""
    if not open_set:
        return ""
    fars = list(next(iter(open_set.values()))["dir"])
    rows = {name: [f"{100 * v['dir'][f]:6.2f} (t {v['threshold'][f]:.4f})" for f in fars]
            + [f"{100 * v['rank1']:6.2f}", f"{v['num_known']}/{v['num_unknown']}"] for name, v in open_set.items()}
    return _text_table(rows, [f"DIR@{f:g}" for f in fars] + ["rank-1", "known/unknown"], 17, title)


def _open_set_rows(query: Features, gallery: Features, qf, gf, metric: str, rerank: bool, rerank_args: dict,
                   fars: Sequence[float], holdout_ids: int, seed: int) -> Dict[str, Dict]:
    """DIR at FAR with `holdout_ids` query identities removed from the gallery (plain, re-ranked)."""
    keep = holdout_gallery(query.pids, gallery.pids, holdout_ids, seed)
    g_ids = (gallery.pids[keep], gallery.camids[keep])
    gk = gf[torch.from_numpy(keep)]
    rows = {"plain": open_set_metrics_from_features(qf, gk, query.pids, g_ids[0], query.camids, g_ids[1],
                                                    metric=metric, fars=fars)}
    if rerank:
        reranked = re_ranking(qf, gk, metric=metric, **rerank_args)
        rows["rerank"] = open_set_metrics(reranked, query.pids, g_ids[0], query.camids, g_ids[1], fars=fars)
    return rows


def evaluate_features(
    query: Features,
    gallery: Features,
    metric: str = "cosine",
    max_rank: int = 50,
    rerank: bool = False,
    k1: int = 20,
    k2: int = 6,
    lambda_value: float = 0.3,
    neighbours: Optional[NeighbourSearch] = None,
    aqe_k: int = 0,
    aqe_alpha: float = 3.0,
    keep_distmat: bool = False,
    verification: bool = False,
    fars: Sequence[float] = DEFAULT_FARS,
    open_set_ids: int = 0,
    open_set_seed: int = 0,
) -> EvalResult:
    """Metrics for already extracted features: the plain row, and the re-ranked row when asked.

    With ``aqe_k > 0`` queries are expanded with their top-k gallery neighbours first.
    ``keep_distmat`` keeps the plain query x gallery matrix (for pictures); it is built only then.
    The CMC curves go to ``max_rank``, and at least to the deepest reported rank (R-10).
    `neighbours` is re-ranking's neighbour pass (reid.evaluation.neighbours; default exact).
    `verification` adds ROC / TAR@FAR / EER per row (reid/evaluation/verification.py);
    ``open_set_ids > 0`` adds DIR@FAR with that many query identities held out of the gallery
    (reid/evaluation/open_set.py); both at `fars`.
    """
    start = time.perf_counter()
    max_rank = max(int(max_rank), max(REPORTED_RANKS))
    qf, gf = query.feats, gallery.feats
    if aqe_k > 0:
        qf = aqe(qf, gf, k=aqe_k, alpha=aqe_alpha)
    metrics: Dict[str, Dict[str, float]] = {}
    all_ap: Dict[str, np.ndarray] = {}
    distmats: Dict[str, np.ndarray] = {}
    ids = (query.pids, gallery.pids, query.camids, gallery.camids)
    if keep_distmat:
        from .distance import compute_distance

        plain = compute_distance(qf, gf, metric=metric)
        distmats["plain"] = plain
        res = evaluate_rank(plain, *ids, max_rank=max_rank)
    else:
        res = evaluate_rank_from_features(qf, gf, *ids, metric=metric, max_rank=max_rank)
    metrics["plain"] = summarize(res)
    all_ap["plain"] = res["all_AP"]
    cmc = {"plain": np.asarray(res["cmc"])}
    verif: Dict[str, Dict] = {}
    if verification:
        verif["plain"] = (verification_metrics(distmats["plain"], *ids, fars=fars) if keep_distmat
                          else verification_metrics_from_features(qf, gf, *ids, metric=metric, fars=fars))
    rerank_args = dict(k1=k1, k2=k2, lambda_value=lambda_value, neighbours=neighbours)
    if rerank:
        reranked = re_ranking(qf, gf, metric=metric, **rerank_args)
        res = evaluate_rank(reranked, *ids, max_rank=max_rank)
        metrics["rerank"] = summarize(res)
        all_ap["rerank"] = res["all_AP"]
        cmc["rerank"] = np.asarray(res["cmc"])
        if verification:
            verif["rerank"] = verification_metrics(reranked, *ids, fars=fars)
        if keep_distmat:
            distmats["rerank"] = reranked
    open_set = (_open_set_rows(query, gallery, qf, gf, metric, rerank, rerank_args, fars, open_set_ids, open_set_seed)
                if open_set_ids > 0 else {})
    return EvalResult(metrics, query, gallery, all_ap, distmats, cmc, time.perf_counter() - start, verif, open_set)


def _extract_sharded(cfg, model: torch.nn.Module, items: List[Item], device, flip: bool) -> Optional[Features]:
    """This process's contiguous shard of `items`, gathered on rank 0 in rank order (None elsewhere)."""
    from reid.data import build_test_loader

    rank, world = get_rank(), get_world_size()
    lo, hi = shard_bounds(len(items), rank, world)
    mine = extract_features(model, build_test_loader(cfg, items[lo:hi], []), device, flip=flip, amp=cfg.TEST.AMP) \
        if hi > lo else None
    shards: Optional[list] = [None] * world if rank == 0 else None
    dist.gather_object(mine, shards, dst=0)
    if rank != 0:
        return None
    parts = [s for s in shards if s is not None]
    return Features(torch.cat([p.feats for p in parts]), np.concatenate([p.pids for p in parts]),
                    np.concatenate([p.camids for p in parts]), [x for p in parts for x in p.paths])


def evaluate_model(
    cfg,
    model: torch.nn.Module,
    query: List[Item],
    gallery: List[Item],
    device: Optional[torch.device] = None,
    rerank: Optional[bool] = None,
    flip: Optional[bool] = None,
    keep_distmat: bool = False,
    verification: Optional[bool] = None,
    open_set: bool = True,
    shard: bool = False,
) -> Optional[EvalResult]:
    """Extract features of `query` and `gallery` with `model` and evaluate them per `cfg.TEST`.

    `rerank`, `flip` and `verification` default to ``cfg.TEST.RERANK.ENABLED``, ``cfg.TEST.FLIP``
    and ``cfg.TEST.VERIFICATION.ENABLED``; `open_set` False skips ``cfg.TEST.OPEN_SET`` (a
    validation split during training). With `shard` in a torchrun job, every process extracts
    one contiguous shard of the images, rank 0 gathers them (the single-process order) and
    evaluates; the other ranks return None. Every rank must call it then (never from
    rank-0-only code such as a training hook).
    """
    from reid.data import build_test_loader

    if not query:
        raise ValueError("The query set is empty: nothing to evaluate. Check the dataset's query folder/list.")
    if not gallery:
        raise ValueError("The gallery set is empty: nothing to evaluate. Check the dataset's gallery folder/list.")
    if device is None:
        device = next(model.parameters()).device
    rerank = cfg.TEST.RERANK.ENABLED if rerank is None else rerank
    flip = cfg.TEST.FLIP if flip is None else flip
    t0 = time.perf_counter()
    if shard and get_world_size() > 1:
        feats = _extract_sharded(cfg, model, list(query) + list(gallery), device, flip)
        if feats is None:
            return None
    else:
        feats = extract_features(model, build_test_loader(cfg, query, gallery), device, flip=flip, amp=cfg.TEST.AMP)
    extract_s = time.perf_counter() - t0
    nq = len(query)
    qfeat, gfeat = feats.split(nq)
    logger.info(
        "Extracted %d query + %d gallery features of dim %d in %.1f s",
        nq, len(gallery), feats.feats.shape[1], extract_s,
    )
    result = evaluate_features(
        qfeat,
        gfeat,
        metric=cfg.TEST.METRIC,
        max_rank=cfg.TEST.MAX_RANK,
        rerank=rerank,
        k1=cfg.TEST.RERANK.K1,
        k2=cfg.TEST.RERANK.K2,
        lambda_value=cfg.TEST.RERANK.LAMBDA,
        neighbours=neighbour_search(cfg.TEST.RERANK, "TEST.RERANK"),
        aqe_k=cfg.TEST.AQE.QE_K if cfg.TEST.AQE.ENABLED else 0,
        aqe_alpha=cfg.TEST.AQE.ALPHA,
        keep_distmat=keep_distmat,
        verification=bool(cfg.TEST.VERIFICATION.ENABLED) if verification is None else verification,
        fars=list(cfg.TEST.VERIFICATION.FARS),
        open_set_ids=int(cfg.TEST.OPEN_SET.HOLDOUT_IDS) if open_set else 0,
        open_set_seed=int(cfg.TEST.OPEN_SET.SEED),
    )
    result.seconds += extract_s
    return result
