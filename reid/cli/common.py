"""Pieces shared by the command-line programs: the argument parser, run setup and the checks
made before any slow work."""
from __future__ import annotations

import logging

import numpy as np
from typing import Dict, Optional, Tuple

from reid.config import ConfigError
from reid.data import DATASET_REGISTRY, TestSet, build_test_set
from reid.evaluation import cross_camera_matches
from reid.evaluation.distance import check_metric
from reid.evaluation.evaluator import check_protocol
from reid.evaluation.gallery_draws import check_num_draws
from reid.evaluation.neighbours import neighbour_search
from reid.utils.logger import setup_logger

#: Query, gallery and protocol of each test set, by its DATASETS.TESTS name.
TestSets = Dict[str, TestSet]


class OutputDirError(OSError):
    """The output folder cannot be created or written; the message says which and what to do."""


def setup_run(
    cfg, rank: int = 0, output_dir: Optional[str] = None, output_hint: str = "choose another OUTPUT_DIR"
) -> Tuple[logging.Logger, str]:
    """Logger writing to `output_dir` (default ``cfg.OUTPUT_DIR``)/log.txt on rank 0.

    A folder that cannot be created or written raises :class:`OutputDirError` naming it and
    ending with `output_hint` (what the user should change).
    """
    out = output_dir or str(cfg.OUTPUT_DIR)
    try:
        return setup_logger(out, rank=rank), out
    except OSError as e:
        reason = e.strerror or str(e)
        raise OutputDirError(
            f"Cannot write the run's files into {out!r} ({reason}: {e.filename or out}); "
            f"{output_hint}, or make that folder writable."
        ) from e


def check_test_settings(cfg) -> None:
    """Refuse, naming the key, an unknown or repeated DATASETS.TESTS name, a bad TEST.METRIC or
    re-ranking neighbour setting."""
    names = [str(n).lower() for n in cfg.DATASETS.TESTS]
    check_dataset_names(cfg.DATASETS.TESTS, "DATASETS.TESTS")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        # Results are keyed by dataset name: a repeated name would overwrite its own results.
        raise ConfigError(
            f"DATASETS.TESTS {list(cfg.DATASETS.TESTS)} names {', '.join(map(repr, dup))} more than once; "
            "list each test set once."
        )
    try:
        check_metric(str(cfg.TEST.METRIC))
    except ValueError as e:
        raise ConfigError(f"TEST.METRIC: {e} Set TEST.METRIC to one of them.") from e
    try:
        neighbour_search(cfg.TEST.RERANK, "TEST.RERANK")
        check_num_draws(cfg.TEST.GALLERY_DRAWS)
    except ValueError as e:
        raise ConfigError(str(e)) from e


def check_batch_identities(cfg, world_size: int = 1) -> None:
    """Refuse P x K batches of a single identity when a pair loss is trained.

    Triplet and pair-wise Circle compare each image with other identities of its batch; with
    one identity per batch they have no negatives and learn nothing (the sampler itself only
    warns, since a softmax-only run can still train).
    """
    if str(cfg.DATALOADER.SAMPLER).lower() != "identity":
        return
    pair = [n for n in cfg.MODEL.LOSSES.NAMES if str(n).lower() in ("triplet", "pair_circle")]
    k = max(int(cfg.DATALOADER.NUM_INSTANCE), 1)
    per_process = int(cfg.SOLVER.IMS_PER_BATCH) // max(int(world_size), 1)
    if pair and per_process // k < 2:
        raise ConfigError(
            f"MODEL.LOSSES.NAMES includes {', '.join(pair)}, which needs other identities in each batch, but "
            f"SOLVER.IMS_PER_BATCH {cfg.SOLVER.IMS_PER_BATCH} on {world_size} process(es) with "
            f"DATALOADER.NUM_INSTANCE {k} gives one identity per batch. Set SOLVER.IMS_PER_BATCH to at least "
            f"{2 * k * max(int(world_size), 1)} or lower DATALOADER.NUM_INSTANCE."
        )


def check_dataset_names(names, key: str) -> None:
    """Raise ConfigError naming `key` for a dataset name that is not registered."""
    unknown = [n for n in names if n not in DATASET_REGISTRY]
    if unknown:
        raise ConfigError(
            f"{key} {list(names)}: unknown dataset {', '.join(map(repr, unknown))}. Valid names: "
            f"{', '.join(DATASET_REGISTRY.names())}. Fix the spelling in the config file or the override."
        )


def check_unlabelled_keys(cfg) -> None:
    """Refuse unlabelled crops named in DATASETS.UNLABELLED that training would never read."""
    u = cfg.DATASETS.UNLABELLED
    given = [f"DATASETS.UNLABELLED.{k} {v!r}" for k, v in (("DIR", u.DIR), ("LIST", u.LIST)) if v]
    if given and "unlabelled" not in [str(n).lower() for n in cfg.DATASETS.NAMES]:
        raise ConfigError(
            f"{' and '.join(given)} names unlabelled crops, but DATASETS.NAMES {list(cfg.DATASETS.NAMES)} does not "
            "include 'unlabelled', so they would not be read. Add it (e.g. DATASETS.NAMES [unlabelled]) or clear the key."
        )


def load_test_sets(cfg) -> TestSets:
    """Check the test settings and load every test set of DATASETS.TESTS (lists only, no images).

    Also refuses a test set in which no query has a match that the evaluation can use (same
    person in the gallery, seen by another camera), and settings that its protocol cannot report
    (verification or open-set metrics under gallery draws), which would otherwise only fail when
    the model is evaluated.
    """
    check_test_settings(cfg)
    test_sets: TestSets = {}
    trained_on = {str(n).lower() for n in cfg.DATASETS.NAMES}
    for name in cfg.DATASETS.TESTS:
        # A training dataset's table (with its query and gallery rows) is already in the log.
        test = build_test_set(cfg, name, log=str(name).lower() not in trained_on)
        query, gallery = test.query, test.gallery
        try:
            check_protocol(test.protocol, bool(cfg.TEST.VERIFICATION.ENABLED), int(cfg.TEST.OPEN_SET.HOLDOUT_IDS))
        except ValueError as e:
            raise ConfigError(f"Test set {name!r} (DATASETS.TESTS): {e}") from e
        q_ids, g_ids = np.asarray([q[1:] for q in query]), np.asarray([g[1:] for g in gallery])
        # Under gallery draws every query has its identity's gallery image (no cameras to rule it out).
        if test.protocol == "cross_camera" and not cross_camera_matches(q_ids[:, 0], g_ids[:, 0], q_ids[:, 1],
                                                                        g_ids[:, 1]).any():
            raise ConfigError(
                f"Test set {name!r} (DATASETS.TESTS): none of its {len(query)} query images has a match in "
                f"its {len(gallery)} gallery images (the same pid seen by a different camera), so it cannot "
                "be evaluated. Check the pids and camids of its query/gallery lists or folders."
            )
        test_sets[str(name)] = test
    return test_sets


def check_folder_cameras(cfg) -> None:
    """A model with SIE embeds each image with its camera: folders without camera ids cannot feed it
    (the cameras the evaluation assigns them are bookkeeping, not the images' cameras)."""
    from reid.data.datasets.folders import folders_have_cameras

    f = cfg.DATASETS.FOLDERS
    if not folders_have_cameras(f.QUERY_PATH, f.GALLERY_PATH):
        raise ValueError("This model uses camera ids (SIE, MODEL.TRANSREID.SIE_CAMERA True), and the --check-on or "
                         "--query / --gallery images have none: give list files of 'path identity camid' lines.")


