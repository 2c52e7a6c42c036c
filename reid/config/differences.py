"""Which settings differ between two configs, and which of them a resumed run may change.

``--resume`` continues a run exactly only with the settings it was trained with; a run's
config.yaml edited in between (the input size, the learning rate) would otherwise be used
silently for the rest of the run (or ignored, for what the checkpoint restores, like the
schedule). The checkpoint stores its config; :func:`changed_keys` compares it with the
resumed run's.
"""
from __future__ import annotations

from typing import Any, Iterator, List, Tuple

from .defaults import FILE_KEYS

# Keys a resumed run may change without changing what it trains. Everything else, keys added
# later included, must match the checkpoint's config unless the user says otherwise.
RESUME_FREE_KEYS = frozenset(FILE_KEYS) | {  # where files are, not what they hold
    "MODEL.DEVICE",  # where the run computes (a job moved to another node)
    "MODEL.BACKBONE.PRETRAINED",  # a resume replaces every weight
    "CUDNN_DETERMINISTIC",  # how kernels are picked, not what they compute
    "DATALOADER.NUM_WORKERS",  # batches are the same whatever the workers (per-sample seeds)
    "SOLVER.CHECKPOINT_PERIOD", "SOLVER.CHECKPOINT_KEEP", "SOLVER.LOG_PERIOD",  # what is written, and when
    # The length of the run: the checkpoint's learning-rate schedule is kept, and the trainer
    # refuses a run longer than that schedule (reid.engine.checkpointer), so it is checked there.
    "SOLVER.MAX_EPOCH",
    # Evaluation only.
    "DATASETS.TESTS", "TEST.EVAL_PERIOD", "TEST.MAX_RANK", "TEST.RERANK.ENABLED", "TEST.RERANK.K1",
    "TEST.RERANK.K2", "TEST.RERANK.LAMBDA", "TEST.RERANK.NEIGHBOURS", "TEST.RERANK.APPROX_MIN_SIZE",
    "TEST.RERANK.APPROX_PROBES", "TEST.VERIFICATION.ENABLED", "TEST.VERIFICATION.FARS",
    "TEST.OPEN_SET.HOLDOUT_IDS", "TEST.OPEN_SET.SEED", "TEST.AQE.ENABLED", "TEST.AQE.QE_K", "TEST.AQE.ALPHA",
    "TEST.GALLERY_DRAWS", "TEST.GALLERY_DRAW_SEED",
    # Which test list of a vehicle dataset (the training list is the same for every size).
    "DATASETS.VEHICLEID.TEST_SIZE", "DATASETS.VERIWILD.TEST_SIZE",
}
# How features are extracted: evaluation only in a supervised run, but learning without labels
# clusters the features it extracts this way, so there they change what is trained.
EXTRACTION_KEYS = frozenset({"TEST.IMS_PER_BATCH", "TEST.FLIP", "TEST.AMP", "TEST.METRIC"})


def resume_free_keys(cfg) -> frozenset:
    """The keys a resumed run with config `cfg` may change (see RESUME_FREE_KEYS)."""
    return RESUME_FREE_KEYS if bool(cfg.UDA.ENABLED) else RESUME_FREE_KEYS | EXTRACTION_KEYS


def leaves(node: Any, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """``(dotted key, value)`` of every key of config `node` (a tuple value as a list)."""
    for key, value in node.items():
        if hasattr(value, "items"):
            yield from leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", list(value) if isinstance(value, tuple) else value


def changed_keys(before, after, free: frozenset = RESUME_FREE_KEYS) -> List[Tuple[str, Any, Any]]:
    """(key, value in `before`, value in `after`) for each key outside `free` whose values differ.

    `before` and `after` are CfgNodes with the same keys (both built from the defaults).
    """
    old = dict(leaves(before))
    return [(k, old.get(k), v) for k, v in leaves(after) if k not in free and old.get(k) != v]


def describe_changes(changes: List[Tuple[str, Any, Any]]) -> str:
    """``KEY (checkpoint X, now Y), ...`` for the message of a refused resume."""
    return ", ".join(f"{k} (checkpoint {a!r}, now {b!r})" for k, a, b in changes)


__all__ = ["EXTRACTION_KEYS", "RESUME_FREE_KEYS", "changed_keys", "describe_changes", "leaves", "resume_free_keys"]
