"""The evaluator: dataset items -> features -> distances -> metrics (-> re-ranking) -> report.

Used by training's periodic evaluation and by ``tools/test.py``. Without re-ranking, distances
are computed chunk-wise from the features, so the query x gallery matrix never exists in full
(MSMT17: 11,659 x 82,161). Re-ranking needs its Q x G output matrix anyway.

A test set is evaluated under its dataset's protocol (``ReIDDataset.test_protocol``):
"cross_camera" (Market-1501's, rank.py) or "gallery_draws" (VehicleID's: query and gallery pooled,
the gallery drawn again TEST.GALLERY_DRAWS times and the metrics averaged; gallery_draws.py).
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.distributed as dist

from reid.utils.process import get_rank, get_world_size, shard_bounds

from .distance import compute_distance
from .extract import Features, extract_features
from .gallery_draws import check_num_draws, draw_galleries, mean_and_std, split_draw
from .neighbours import NeighbourSearch, neighbour_search
from .open_set import holdout_gallery, open_set_metrics, open_set_metrics_from_features
from .query_expansion import aqe
from .rank import evaluate_rank, evaluate_rank_from_features
from .rerank import re_ranking
from .tracklet_extract import extract_tracklet_features
from .verification import DEFAULT_FARS, verification_metrics, verification_metrics_from_features

logger = logging.getLogger("reid.evaluation")

Item = Tuple[str, int, int]
REPORTED_RANKS = (1, 5, 10)
#: Test protocols (``ReIDDataset.test_protocol``) the evaluator knows.
PROTOCOLS = ("cross_camera", "gallery_draws")


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
    # gallery-draws protocol only: {"num_draws", "seed", "std": {row: metrics}, "per_draw": {row: [metrics]}};
    # `metrics` and `cmc` then hold the means over the draws, the rest is draw 0's
    draws: Dict[str, Any] = field(default_factory=dict)


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


def format_draws(result: EvalResult, title: str = "") -> str:
    """A text table of the gallery-draws means with their standard deviation ("mean +- std"), one row
    per metric row; empty when `result` was not evaluated with gallery draws."""
    if not result.draws:
        return ""
    cols = ["R-1", "R-5", "R-10", "mAP", "mINP"]
    std = result.draws["std"]
    rows = {name: [f"{row[c]:6.2f} +- {std[name][c]:4.2f}" for c in cols] for name, row in result.metrics.items()}
    return _text_table(rows, cols, 14, title)


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


def evaluate_draws(pool: Features, num_draws: int = 10, seed: int = 0, keep_distmat: bool = False,
                   **kwargs: Any) -> EvalResult:
    """Metrics of test images `pool` under the gallery-draws protocol (reid/evaluation/gallery_draws.py).

    Each of `num_draws` draws (seeded ``[seed, d]``) makes one random image per identity the gallery
    and the others queries, and is evaluated by :func:`evaluate_features` (`kwargs`: metric,
    max_rank, rerank and its settings, aqe: re-ranking and query expansion run per draw, on that
    draw's query and gallery). The result's ``metrics`` and ``cmc`` are the means over the draws;
    ``draws`` holds their standard deviations and every draw's metrics; ``query``, ``gallery``,
    ``all_ap`` and (with `keep_distmat`) ``distmats`` are draw 0's. Verification and open-set rows are
    not defined for it: ``kwargs`` asking for them raise ValueError (:func:`check_protocol`).
    """
    check_protocol("gallery_draws", bool(kwargs.get("verification")), int(kwargs.get("open_set_ids", 0)))
    start = time.perf_counter()
    num_draws = check_num_draws(num_draws)
    if len(pool) == len(np.unique(pool.pids)):
        raise ValueError(f"Gallery draws need identities with two images or more (one is drawn as the gallery, the "
                         f"others are queries), but each of the {len(pool)} test images has an identity of its own.")
    masks = draw_galleries(pool.pids, num_draws, seed)
    runs = [evaluate_features(*split_draw(pool, mask), keep_distmat=keep_distmat and d == 0, **kwargs)
            for d, mask in enumerate(masks)]
    return mean_of_runs(runs, start, {"num_draws": len(runs), "seed": int(seed)})


def mean_of_runs(runs: Sequence[EvalResult], start: float, info: Dict[str, Any]) -> EvalResult:
    """One result for several evaluations of one protocol (gallery draws, a dataset's published
    splits): ``metrics`` and ``cmc`` are the means over `runs`; ``draws`` holds `info`, their
    standard deviations (``std``) and every run's metrics (``per_draw``); the rest is run 0's.
    `start` is the ``time.perf_counter()`` the evaluation began at."""
    first = runs[0]
    metrics, std, per_draw = {}, {}, {}
    for row in first.metrics:
        per_draw[row] = [run.metrics[row] for run in runs]
        metrics[row], std[row] = mean_and_std(per_draw[row])
    cmc = {row: np.mean([run.cmc[row] for run in runs], axis=0) for row in first.cmc}
    return EvalResult(metrics, first.query, first.gallery, first.all_ap, first.distmats, cmc,
                      time.perf_counter() - start, draws={**info, "std": std, "per_draw": per_draw})


def extract_items(cfg, model: torch.nn.Module, items: List[Item], device, flip: bool) -> Features:
    """Features of `items` in order: images, or tracklets (``(frame paths, pid, camid)``, one pooled
    feature each, reid/evaluation/tracklet_extract.py, frames per DATALOADER.VIDEO.TEST_SAMPLER)."""
    from reid.data import build_test_loader

    if items and isinstance(items[0][0], tuple):
        video = cfg.DATALOADER.VIDEO
        return extract_tracklet_features(model, items, lambda frames: build_test_loader(cfg, frames, []), device,
                                         flip=flip, amp=cfg.TEST.AMP, sampler=str(video.TEST_SAMPLER),
                                         seq_len=int(video.SEQ_LEN))
    return extract_features(model, build_test_loader(cfg, items, []), device, flip=flip, amp=cfg.TEST.AMP)


def _extract_sharded(cfg, model: torch.nn.Module, items: List[Item], device, flip: bool) -> Optional[Features]:
    """This process's contiguous shard of `items`, gathered on rank 0 in rank order (None elsewhere)."""
    rank, world = get_rank(), get_world_size()
    lo, hi = shard_bounds(len(items), rank, world)
    mine = extract_items(cfg, model, items[lo:hi], device, flip) if hi > lo else None
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
    protocol: str = "cross_camera",
    junk_pids: Sequence[int] = (),
) -> Optional[EvalResult]:
    """Extract features of `query` and `gallery` with `model` and evaluate them per `cfg.TEST`.

    `rerank`, `flip` and `verification` default to ``cfg.TEST.RERANK.ENABLED``, ``cfg.TEST.FLIP``
    and ``cfg.TEST.VERIFICATION.ENABLED``; `open_set` False skips ``cfg.TEST.OPEN_SET`` (a
    validation split during training). With `shard` in a torchrun job, every process extracts
    one contiguous shard of the images, rank 0 gathers them (the single-process order) and
    evaluates; the other ranks return None. Every rank must call it then (never from
    rank-0-only code such as a training hook).

    `protocol` is the test set's (``TestSet.protocol``): "cross_camera", or "gallery_draws", under
    which query and gallery are pooled and evaluated with :func:`evaluate_draws`
    (TEST.GALLERY_DRAWS draws seeded by TEST.GALLERY_DRAW_SEED); verification and open-set
    metrics are refused for it before any feature is extracted. Items may be tracklets (video
    datasets: one pooled feature each); gallery items with a pid in `junk_pids` (MARS's -1) are
    ignored by every query (left out of the ranking, reid/evaluation/tracklet_protocol.py).
    """
    verification = bool(cfg.TEST.VERIFICATION.ENABLED) if verification is None else verification
    open_set_ids = int(cfg.TEST.OPEN_SET.HOLDOUT_IDS) if open_set else 0
    check_protocol(protocol, verification, open_set_ids)
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
        feats = extract_items(cfg, model, list(query) + list(gallery), device, flip)
    extract_s = time.perf_counter() - t0
    nq = len(query)
    logger.info(
        "Extracted %d query + %d gallery features of dim %d in %.1f s",
        nq, len(gallery), feats.feats.shape[1], extract_s,
    )
    ranking = dict(
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
    )
    if protocol == "gallery_draws":
        # Extracted once; every draw re-splits the same features.
        result = evaluate_draws(feats, int(cfg.TEST.GALLERY_DRAWS), int(cfg.TEST.GALLERY_DRAW_SEED), **ranking)
    else:
        query_feats, gallery_feats = feats.split(nq)
        gallery_feats = gallery_feats.without_pids(junk_pids)
        if len(gallery_feats) == 0:
            raise ValueError(f"Every gallery item has a junk pid ({', '.join(map(str, junk_pids))}): nothing to rank; "
                             "check the dataset's test files.")
        result = evaluate_features(query_feats, gallery_feats, verification=verification, fars=list(cfg.TEST.VERIFICATION.FARS),
                                   open_set_ids=open_set_ids, open_set_seed=int(cfg.TEST.OPEN_SET.SEED), **ranking)
    result.seconds += extract_s
    return result


def check_protocol(protocol: str, verification: bool = False, open_set_ids: int = 0) -> None:
    """Refuse an unknown test protocol, and verification or open-set metrics under "gallery_draws"
    (a random gallery per draw has no fixed pairs or held-out identities to report), naming the key."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"Unknown test protocol {protocol!r}; valid: {', '.join(PROTOCOLS)}.")
    if protocol != "gallery_draws":
        return
    asked = [k for k, on in (("TEST.VERIFICATION.ENABLED", verification), ("TEST.OPEN_SET.HOLDOUT_IDS", open_set_ids))
             if on]
    if asked:
        raise ValueError(f"{' and '.join(asked)}: not available for a test set with the gallery-draws protocol "
                         f"(VehicleID: a new random gallery per draw, results averaged); turn it off for this test set.")
