"""The test sets of a config (``DATASETS.TESTS``), loaded and checked before any model runs: names,
metric and re-ranking settings, protocols, and a query set that the evaluation can use."""
from __future__ import annotations

from typing import Dict

import numpy as np

from reid.config import ConfigError
from reid.data import TestSet, build_test_set
from reid.data.build import check_dataset_names, is_video_dataset
from reid.data.frame_sampling import check_sampling

from .distance import check_metric
from .evaluator import check_protocol
from .gallery_draws import check_num_draws
from .neighbours import neighbour_search
from .rank import cross_camera_matches
from .tracklet_extract import tracklet_frames

#: Query, gallery and protocol of each test set, by its DATASETS.TESTS name.
TestSets = Dict[str, TestSet]


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
    if any(is_video_dataset(n) for n in cfg.DATASETS.TESTS):
        video = cfg.DATALOADER.VIDEO
        try:
            tracklet_frames([], str(video.TEST_SAMPLER), video.SEQ_LEN)
            check_sampling(str(video.TEST_SAMPLER), video.SEQ_LEN)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    try:
        neighbour_search(cfg.TEST.RERANK, "TEST.RERANK")
        check_num_draws(cfg.TEST.GALLERY_DRAWS)
    except ValueError as e:
        raise ConfigError(str(e)) from e


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


__all__ = ["TestSets", "check_test_settings", "load_test_sets"]
