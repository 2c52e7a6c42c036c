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

from reid.data.build import is_tracklet_items
from reid.evaluation.evaluator import extract_items
from reid.evaluation.thresholds import (
    calibrate,
    calibrated_for,
    check_thresholds,
    describe_threshold,
    extraction_difference,
    extraction_settings,
    find_thresholds,
    load_thresholds,
    save_thresholds,
    similarity_at,
    unresolved_reason,
)

from .loading import build_inference_model, run_weights

Item = Tuple[str, int, int]

logger = logging.getLogger(__name__)


def calibrate_run(cfg, run_dir: str, val_query: List[Item], val_gallery: List[Item]) -> Tuple[str, Dict[str, Any]]:
    """Write ``run_dir/thresholds.json`` from the run's result on its validation split; returns
    (path, record)."""
    weights = run_weights(run_dir)
    model = build_inference_model(cfg, weights)
    # Images or tracklets (a video model's validation split: one pooled feature each), as the evaluator makes them.
    feats = extract_items(cfg, model, list(val_query) + list(val_gallery), next(model.parameters()).device,
                          bool(cfg.TEST.FLIP))
    q, g = feats.split(len(val_query))
    unit = "tracklets" if is_tracklet_items(val_query) else "images"
    record = calibrate(q.feats, g.feats, q.pids, g.pids, q.camids, g.camids, list(cfg.TEST.VERIFICATION.FARS),
                       source=f"validation split: {int(cfg.TEST.VAL_IDS)} identities held out of training "
                              f"({len(val_query)} query / {len(val_gallery)} gallery {unit})")
    record["weights"] = os.path.basename(weights)
    # The thresholds hold for features made this way only: search --far compares (input size, flip).
    record["extraction"] = extraction_settings(cfg)
    path = save_thresholds(run_dir, record)
    for far in record["unresolved"]:
        logger.warning("No threshold at FAR %s: %s. It is listed as unresolved in %s (search --far %s is refused).",
                       far, unresolved_reason(record, far), path, far)
    return path, record


def calibrated_similarity(cfg, weights: str, far: float, other: str = "pass --threshold S") -> Tuple[float, str, str]:
    """The cosine-similarity threshold at FAR `far` from the thresholds.json calibrated on `weights`
    (the model's config `cfg`): ``(similarity, path, description)``.

    One-line ValueErrors (ending with `other`, what to do instead) when there is no calibration
    next to the weights, when it was made on other weights or on features extracted otherwise
    (input size, flip), or when the validation split cannot resolve `far`.
    """
    path = find_thresholds(weights)
    if path is None:
        raise ValueError(f"--far {far:g}: no calibrated thresholds next to {weights} (thresholds.json, written "
                         "by tools/train.py at the end of a run with a validation split, TEST.VAL_IDS > 0); "
                         f"calibrate that way, or {other}.")
    record = load_thresholds(path)
    if not calibrated_for(record, weights):
        raise ValueError(f"--far {far:g}: {path} was calibrated on {record['weights']}, not on "
                         f"{os.path.basename(weights)}, and thresholds hold only for the weights they were measured "
                         f"on; use --weights {os.path.join(os.path.dirname(path), record['weights'])}, or {other}.")
    changed = extraction_difference(record, cfg)
    if changed:  # other features give other scores: the FAR measured on the calibrated ones would not hold
        raise ValueError(f"--far {far:g}: {path} was calibrated on features made otherwise than these are "
                         f"made: {changed}; thresholds hold only for the features they were measured on. Drop "
                         f"the override (or undo the edit of the run's config.yaml), or {other}.")
    similarity = similarity_at(record, far, path)  # refused where the split cannot resolve the FAR
    return similarity, path, describe_threshold(record, far)


def exported_similarity(record: Dict[str, Any], path: str, far: float,
                        other: str = "pass --threshold S") -> Tuple[float, str, str]:
    """The cosine-similarity threshold at FAR `far` that an exported file carries (its ``circle_reid``
    `record`'s ``decision_thresholds``: the run's thresholds.json, stored by tools/export.py where they
    hold for the file's features): ``(similarity, path, description)``; one-line ValueErrors as
    :func:`calibrated_similarity`'s."""
    stored = record.get("decision_thresholds")
    if not stored:
        raise ValueError(f"--far {far:g}: {path} carries no calibrated thresholds (tools/export.py stores those of "
                         "a run with a validation split, TEST.VAL_IDS > 0, when they hold for the file's features); "
                         f"export such a run, or {other}.")
    try:
        table = check_thresholds(stored)
    except ValueError as e:
        raise ValueError(f"--far {far:g}: {path}: its stored thresholds are damaged ({e}); export the model again, or "
                         f"{other}.") from None
    return similarity_at(table, far, path), path, describe_threshold(table, far)


def model_similarity(predictor: Any, far: float, other: str = "pass --threshold S") -> Tuple[float, str, str]:
    """The threshold at FAR `far` of the model a :class:`~reid.inference.predictor.Predictor` runs: the
    one an exported file run on its own carries, else the thresholds.json beside its checkpoint."""
    if predictor.model is None:
        return exported_similarity(predictor.file_record, predictor.exported, far, other)
    return calibrated_similarity(predictor.cfg, str(predictor.cfg.MODEL.WEIGHTS), far, other)


__all__ = ["calibrate_run", "calibrated_similarity", "exported_similarity", "model_similarity"]
