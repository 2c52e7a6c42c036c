"""Calibrating a finished run's decision thresholds on its validation split (never the test split).

Called by tools/train.py when a run with ``TEST.VAL_IDS > 0`` finishes: the weights the run
gives (``model_best.pth`` when it selected on the validation split, else ``model_final.pth``)
are evaluated on the held-out identities, and the thresholds at ``TEST.VERIFICATION.FARS`` are
written to ``OUTPUT_DIR/thresholds.json`` (reid/evaluation/thresholds.py), where tools/search.py
(``--far``) and tools/export.py (the exported model's metadata) find them. A FAR the split's
impostor pairs cannot resolve gets no threshold (a warning in the run's log says so).
"""
from __future__ import annotations

import logging
import os
from typing import Any, Dict, List, Tuple

from reid.data import build_test_loader
from reid.evaluation.extract import extract_features
from reid.evaluation.thresholds import calibrate, extraction_settings, save_thresholds, unresolved_reason

from .loading import build_inference_model, run_weights

Item = Tuple[str, int, int]

logger = logging.getLogger(__name__)


def calibrate_run(cfg, run_dir: str, val_query: List[Item], val_gallery: List[Item]) -> Tuple[str, Dict[str, Any]]:
    """Write ``run_dir/thresholds.json`` from the run's result on its validation split; returns
    (path, record)."""
    weights = run_weights(run_dir)
    model = build_inference_model(cfg, weights)
    feats = extract_features(model, build_test_loader(cfg, val_query, val_gallery), next(model.parameters()).device,
                             flip=bool(cfg.TEST.FLIP), amp=str(cfg.TEST.AMP))
    q, g = feats.split(len(val_query))
    record = calibrate(q.feats, g.feats, q.pids, g.pids, q.camids, g.camids, list(cfg.TEST.VERIFICATION.FARS),
                       source=f"validation split: {int(cfg.TEST.VAL_IDS)} identities held out of training "
                              f"({len(val_query)} query / {len(val_gallery)} gallery images)")
    record["weights"] = os.path.basename(weights)
    # The thresholds hold for features made this way only: search --far compares (input size, flip).
    record["extraction"] = extraction_settings(cfg)
    path = save_thresholds(run_dir, record)
    for far in record["unresolved"]:
        logger.warning("No threshold at FAR %s: %s. It is listed as unresolved in %s (search --far %s is refused).",
                       far, unresolved_reason(record, far), path, far)
    return path, record


__all__ = ["calibrate_run"]
