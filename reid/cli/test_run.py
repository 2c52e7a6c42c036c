"""What ``tools/test.py`` runs: evaluate trained weights, print R-1/R-5/R-10/mAP/mINP, save what
was computed (the flags are parsed in reid/cli/test.py, without loading torch)."""
from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Optional

import numpy as np
import torch.distributed as dist

from reid.data import build_test_set
from reid.data.build import is_tracklet_items
from reid.data.datasets.folders import check_folder_cameras
from reid.engine.checkpoint_files import load_checkpoint
from reid.engine.distributed import cleanup_distributed, init_distributed
from reid.evaluation import save_features
from reid.evaluation.evaluator import (
    evaluate_model, format_draws, format_open_set, format_table, format_verification,
)
from reid.evaluation.eval_sets import check_test_settings
from reid.export.options import is_exported_file
from reid.inference.backends import build_runtime, file_backend, file_runtime
from reid.inference.file_model import ExportedFeatures
from reid.inference.loading import build_inference_model, config_for_exported, resolve_model
from reid.modeling import build_model, model_summary, takes_camera_ids
from reid.utils.device import resolve_device
from reid.utils.file_io import atomic_write_text
from reid.utils.json_values import jsonable
from reid.utils.logger import setup_run_logger
from reid.utils.process import is_main_process, seed_everything
from reid.utils.run_lock import RunLock
from reid.visualization import visualize_from_features

from .args import overrides
from .model_args import model_config


def run_command(args: argparse.Namespace) -> int:
    """What ``tools/test.py`` runs once its arguments are parsed (reid/cli/test.py)."""
    # Testing needs no identity head and the checkpoint replaces every weight, so the model's
    # config is the inference one (resolve_model: no head, no ImageNet download).
    # --rerank / --flip / --device are shorthands for their config keys: resolved here, once,
    # so that everything below (and the metrics.json record) reads the config alone.
    flags = (["TEST.RERANK.ENABLED", True] if args.rerank else []) + (["TEST.FLIP", True] if args.flip else [])
    flags += ["MODEL.DEVICE", args.device] if args.device else []
    flags += ["TEST.VERIFICATION.ENABLED", True] if args.verification else []
    flags += ["TEST.OPEN_SET.HOLDOUT_IDS", args.open_set] if args.open_set else []
    if args.query is not None:
        flags += ["DATASETS.TESTS", ["folders"], "DATASETS.FOLDERS.QUERY_PATH", args.query,
                  "DATASETS.FOLDERS.GALLERY_PATH", args.gallery]
    exported = args.weights if args.weights and is_exported_file(args.weights) else None
    cfg = _exported_config(args, flags, exported) if exported else model_config(args, flags)[0]
    check_test_settings(cfg)
    out = args.output_dir or os.path.join(args.run or str(cfg.OUTPUT_DIR), "test")
    # One process per results folder: two tests writing metrics.json and pictures into the same
    # folder would mix their outputs.
    hint = "choose another --output-dir (default: DIR/test with --run, else OUTPUT_DIR/test)"
    # Under torchrun every process extracts one shard of the images and rank 0 evaluates and
    # writes (evaluate_model(shard=True)); the other ranks only compute features.
    joined = not (dist.is_available() and dist.is_initialized())
    rank = init_distributed(str(cfg.MODEL.DEVICE)).rank
    try:
        if rank != 0:
            seed_everything(int(cfg.SEED))
            return run_test(cfg, args, out, logging.getLogger("reid"), exported)
        with RunLock(out, "testing", hint, command=args.command):
            logger = setup_run_logger(out, output_hint=hint)
            seed_everything(int(cfg.SEED))
            return run_test(cfg, args, out, logger, exported)
    finally:
        if joined:  # leave only a process group this call created
            cleanup_distributed()


def _exported_config(args: argparse.Namespace, flags: list, exported: str):
    """The config of a test of an exported file: the run's / config file's (the file then runs instead of
    that checkpoint, checked against it), or the defaults and overrides with the file's input size."""
    opts = overrides(args) + flags
    flip = dict(zip(map(str, opts[::2]), opts[1::2])).get("TEST.FLIP")
    if args.flip or str(flip).lower() in ("true", "1"):
        raise ValueError(f"--flip (TEST.FLIP True) averages unnormalised features, which the exported file {exported} "
                         "does not return; leave it out, or test the checkpoint.")
    if args.run or args.config_file:
        cfg, _ = resolve_model(args.run, args.config_file, None, opts)
        if bool(cfg.TEST.FLIP):
            raise ValueError(f"TEST.FLIP True in the run's config averages unnormalised features, which the exported "
                             f"file {exported} does not return; add TEST.FLIP False.")
        return cfg
    return config_for_exported(file_runtime(exported).file, opts)


def _test_model(cfg, exported: Optional[str], device):
    """The model to evaluate: the checkpoint's, or an exported file (alone, or checked against it)."""
    if exported is None:
        model = build_model(cfg)
        load_checkpoint(str(cfg.MODEL.WEIGHTS), model=model)
        return model.to(device)
    if not cfg.MODEL.WEIGHTS:  # the file alone
        return ExportedFeatures(file_runtime(exported))
    model = build_inference_model(cfg, str(cfg.MODEL.WEIGHTS), "cpu")
    return ExportedFeatures(build_runtime(file_backend(exported), model, cfg.INPUT.SIZE_TEST, exported,
                                          weights=str(cfg.MODEL.WEIGHTS)))


def run_test(cfg, args, out: str, logger: logging.Logger, exported: Optional[str] = None) -> int:
    """Evaluate ``cfg.MODEL.WEIGHTS`` (or the `exported` file) on every test set; write metrics.json
    (and pictures)."""
    if not list(cfg.DATASETS.TESTS):  # e.g. a run adapted to unlabelled crops: nothing to score it on
        raise ValueError("DATASETS.TESTS is empty: there is no test set to evaluate on. Name one (e.g. DATASETS.TESTS "
                         "[market1501]), or give --query and --gallery (folders or list files of labelled images).")
    device = resolve_device(str(cfg.MODEL.DEVICE))
    model = _test_model(cfg, exported, device)
    if exported:
        logger.info("Model: exported file %s (%s, %s); checked against %s", exported, model.runtime.file.runtime,
                    model.runtime.precision, cfg.MODEL.WEIGHTS or "no checkpoint (it runs on its own)")
    else:
        logger.info("Model: %s; weights %s; device %s", model_summary(model), cfg.MODEL.WEIGHTS, device)
    t = cfg.TEST
    report = {
        "weights": str(exported or cfg.MODEL.WEIGHTS),
        "flip": bool(t.FLIP),
        # What the numbers depend on beyond the weights, so they can be reproduced (the saved
        # features are the un-expanded ones: AQE, when on, is applied at evaluation time).
        "settings": {
            "metric": str(t.METRIC), "max_rank": int(t.MAX_RANK),
            "rerank": {"k1": int(t.RERANK.K1), "k2": int(t.RERANK.K2), "lambda": float(t.RERANK.LAMBDA),
                       "neighbours": str(t.RERANK.NEIGHBOURS), "approx_min_size": int(t.RERANK.APPROX_MIN_SIZE)}
            if t.RERANK.ENABLED else None,
            "aqe": {"k": int(t.AQE.QE_K), "alpha": float(t.AQE.ALPHA)} if t.AQE.ENABLED else None,
            "fars": [float(f) for f in t.VERIFICATION.FARS]
            if t.VERIFICATION.ENABLED or t.OPEN_SET.HOLDOUT_IDS else None,
            "open_set": {"holdout_ids": int(t.OPEN_SET.HOLDOUT_IDS), "seed": int(t.OPEN_SET.SEED)}
            if t.OPEN_SET.HOLDOUT_IDS else None,
        },
        "results": {},
    }
    metrics_path = os.path.join(out, "metrics.json")
    for name in cfg.DATASETS.TESTS:
        if takes_camera_ids(model) and str(name).lower() == "folders":
            check_folder_cameras(cfg.DATASETS.FOLDERS.QUERY_PATH, cfg.DATASETS.FOLDERS.GALLERY_PATH)
        notes: dict = {}  # e.g. query images found in the gallery (and left out for their query)
        test = build_test_set(cfg, name, notes=notes)
        query, gallery = test.query, test.gallery
        res = evaluate_model(cfg, model, query, gallery, device=device, keep_distmat=args.visualize > 0, shard=True,
                             protocol=test.protocol, junk_pids=test.junk_pids)
        if res is None:  # a rank other than 0 of a torchrun job: its shard went to rank 0
            continue
        if res.draws:  # the pooled images, re-split per draw: the query / gallery counts are each draw's
            d = res.draws
            print(format_draws(res, title=f"{name}: {len(query) + len(gallery)} images, mean +- std of {d['num_draws']} "
                                          f"gallery draws (seed {d['seed']}; each {len(res.query)} query / "
                                          f"{len(res.gallery)} gallery images)"))
            report.setdefault("gallery_draws", {})[name] = jsonable(d)
        else:
            unit = "tracklets" if is_tracklet_items(query) else "images"
            print(format_table(res.metrics, title=f"{name}: {len(query)} query / {len(gallery)} gallery {unit}"))
        valid = int(np.isfinite(res.all_ap["plain"]).sum())
        if valid < len(res.query):
            logger.info("%s: %d of %d queries have no match in the gallery from another camera; they are "
                        "left out of every metric.", name, len(res.query) - valid, len(res.query))
        for key, value in notes.items():
            report.setdefault(key, {})[name] = value
        report["results"][name] = {
            row: {**metrics, "num_valid_queries": int(np.isfinite(res.all_ap[row]).sum()),
                  "cmc": [round(float(v), 6) for v in res.cmc[row]]}
            for row, metrics in res.metrics.items()
        }
        if res.verification:
            print(format_verification(res.verification, title=f"{name}: verification (percent; t = distance threshold)"))
            report.setdefault("verification", {})[name] = {row: jsonable(v) for row, v in res.verification.items()}
        if res.open_set:
            print(format_open_set(res.open_set, title=f"{name}: open-set identification, {cfg.TEST.OPEN_SET.HOLDOUT_IDS} "
                                                      "identities held out of the gallery (DIR, percent)"))
            report.setdefault("open_set", {})[name] = {row: jsonable(v) for row, v in res.open_set.items()}
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


__all__ = ["run_test", "run_command"]
