"""``tools/test.py``: evaluate trained weights, print R-1/R-5/R-10/mAP/mINP, save what was computed."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Optional, Sequence

import numpy as np
import torch.distributed as dist

from reid.data import build_test_data
from reid.engine.checkpoint import CheckpointError, load_checkpoint
from reid.engine.distributed import cleanup_distributed, init_distributed
from reid.evaluation import save_features
from reid.evaluation.evaluator import evaluate_model, format_table
from reid.modeling import build_model, model_summary
from reid.utils.file_io import atomic_write_text
from reid.utils.device import resolve_device
from reid.utils.process import is_main_process, seed_everything
from reid.utils.run_lock import RunLock
from reid.visualization import visualize_from_features

from .args import base_parser, load_cfg_from_args, parse_args
from .common import check_test_settings, setup_run
from .errors import run_main

EPILOG = """examples:
  python tools/test.py --config-file output/demo/config.yaml MODEL.WEIGHTS output/demo/model_final.pth
  python tools/test.py --config-file output/demo/config.yaml MODEL.WEIGHTS output/demo/model_final.pth --rerank --flip --visualize 5
  python tools/test.py --config-file configs/Market1501/mgn_circle.yml MODEL.WEIGHTS mgn.pth DATASETS.ROOT /data --save-features mgn_market.npz

  torchrun --nproc_per_node 2 tools/test.py --config-file CFG MODEL.WEIGHTS w.pth   # one shard of the images per process
Writes OUTPUT_DIR/test/metrics.json (or --output-dir), ranked-result pictures with --visualize,
and features with --save-features (redraw pictures later with tools/visualize.py)."""


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Evaluate MODEL.WEIGHTS on DATASETS.TESTS; returns the exit code (1 with ``error:`` on bad input)."""
    parser = base_parser("Evaluate a trained re-ID model on the test sets of DATASETS.TESTS.", EPILOG)
    parser.add_argument("--rerank", action="store_true", help="also report k-reciprocal re-ranking (TEST.RERANK.*)")
    parser.add_argument("--flip", action="store_true", help="average features of each image and its mirror")
    parser.add_argument("--visualize", type=int, default=0, metavar="K", help="draw ranked results of K queries")
    parser.add_argument("--vis-mode", default="worst", choices=["worst", "best", "random"], help="which queries to draw")
    parser.add_argument("--vis-topk", type=int, default=10, help="gallery images per ranked row")
    parser.add_argument("--save-features", default="", metavar="FILE", help="save query/gallery features (.npz)")
    parser.add_argument("--output-dir", default="", help="where results go (default OUTPUT_DIR/test)")
    args = parse_args(parser, argv)
    if args.visualize < 0:
        parser.error(f"--visualize takes the number of queries to draw (0 = none), got {args.visualize}")
    if args.vis_topk < 1:
        parser.error(f"--vis-topk takes the gallery images per ranked row (at least 1), got {args.vis_topk}")
    return run_main(lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    # Testing needs no identity head (NUM_CLASSES 0 builds the model without it), and the
    # checkpoint replaces every weight, so ImageNet weights would be downloaded for nothing
    # (and fail offline).
    # --rerank / --flip are shorthands for their config keys: resolved here, once, so that
    # everything below (and the metrics.json record) reads the config alone.
    flags = (["TEST.RERANK.ENABLED", True] if args.rerank else []) + (["TEST.FLIP", True] if args.flip else [])
    cfg = load_cfg_from_args(args, ["MODEL.HEADS.NUM_CLASSES", 0, "MODEL.BACKBONE.PRETRAINED", False] + flags)
    check_test_settings(cfg)
    out = args.output_dir or os.path.join(str(cfg.OUTPUT_DIR), "test")
    # One process per results folder: two tests writing metrics.json and pictures into the same
    # folder would mix their outputs.
    hint = "choose another --output-dir (default OUTPUT_DIR/test)"
    # Under torchrun every process extracts one shard of the images and rank 0 evaluates and
    # writes (evaluate_model(shard=True)); the other ranks only compute features.
    joined = not (dist.is_available() and dist.is_initialized())
    rank = init_distributed(str(cfg.MODEL.DEVICE)).rank
    try:
        if rank != 0:
            seed_everything(int(cfg.SEED))
            return run_test(cfg, args, out, logging.getLogger("reid"))
        with RunLock(out, "testing", hint):
            logger, _ = setup_run(cfg, output_dir=out, output_hint=hint)
            seed_everything(int(cfg.SEED))
            return run_test(cfg, args, out, logger)
    finally:
        if joined:  # leave only a process group this call created
            cleanup_distributed()


def run_test(cfg, args, out: str, logger: logging.Logger) -> int:
    """Evaluate ``cfg.MODEL.WEIGHTS`` on every test set; write metrics.json (and pictures)."""
    if not cfg.MODEL.WEIGHTS:
        raise CheckpointError(
            "No weights to test: pass MODEL.WEIGHTS path/to/model_final.pth after the flags."
        )
    device = resolve_device(str(cfg.MODEL.DEVICE))
    model = build_model(cfg)
    load_checkpoint(str(cfg.MODEL.WEIGHTS), model=model)
    model.to(device)
    logger.info("Model: %s; weights %s; device %s", model_summary(model), cfg.MODEL.WEIGHTS, device)
    t = cfg.TEST
    report = {
        "weights": str(cfg.MODEL.WEIGHTS),
        "flip": bool(t.FLIP),
        # What the numbers depend on beyond the weights, so they can be reproduced (the saved
        # features are the un-expanded ones: AQE, when on, is applied at evaluation time).
        "settings": {
            "metric": str(t.METRIC), "max_rank": int(t.MAX_RANK),
            "rerank": {"k1": int(t.RERANK.K1), "k2": int(t.RERANK.K2), "lambda": float(t.RERANK.LAMBDA)}
            if t.RERANK.ENABLED else None,
            "aqe": {"k": int(t.AQE.QE_K), "alpha": float(t.AQE.ALPHA)} if t.AQE.ENABLED else None,
        },
        "results": {},
    }
    metrics_path = os.path.join(out, "metrics.json")
    for name in cfg.DATASETS.TESTS:
        query, gallery = build_test_data(cfg, name)
        res = evaluate_model(cfg, model, query, gallery, device=device, keep_distmat=args.visualize > 0, shard=True)
        if res is None:  # a rank other than 0 of a torchrun job: its shard went to rank 0
            continue
        print(format_table(res.metrics, title=f"{name}: {len(query)} query / {len(gallery)} gallery images"))
        valid = int(np.isfinite(res.all_ap["plain"]).sum())
        if valid < len(query):
            logger.info("%s: %d of %d queries have no match in the gallery from another camera; they are "
                        "left out of every metric.", name, len(query) - valid, len(query))
        report["results"][name] = {
            row: {**metrics, "num_valid_queries": int(np.isfinite(res.all_ap[row]).sum()),
                  "cmc": [round(float(v), 6) for v in res.cmc[row]]}
            for row, metrics in res.metrics.items()
        }
        # Written after every test set, before any picture: a failure later keeps the numbers.
        atomic_write_text(metrics_path, json.dumps(report, indent=2))
        if args.save_features:
            features_path = args.save_features
            if len(cfg.DATASETS.TESTS) > 1:
                stem, ext = os.path.splitext(features_path)
                features_path = f"{stem}_{name}{ext or '.npz'}"
            save_features(features_path, res.query, res.gallery)
            logger.info("Saved features to %s", features_path)
        if args.visualize > 0:
            vis_dir = os.path.join(out, "ranked", name)
            rerank_dist = res.distmats.get("rerank")
            drawn = visualize_from_features(
                res.query.feats, res.gallery.feats, res.query, res.gallery, vis_dir,
                topk=args.vis_topk, num_queries=args.visualize, mode=args.vis_mode,
                metric=str(cfg.TEST.METRIC), distmat=res.distmats["plain"], rerank_distmat=rerank_dist,
                both_rows=rerank_dist is not None, all_AP=res.all_ap["plain"],
                rerank_all_AP=res.all_ap.get("rerank"), seed=int(cfg.SEED),
            )
            # Fewer than --visualize when the set has fewer (valid) queries.
            logger.info("Ranked results of %d queries: %s", len(drawn.pictures), os.path.join(vis_dir, "index.html"))
    if is_main_process():
        logger.info("Wrote %s", metrics_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
