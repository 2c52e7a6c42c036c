"""Checks of a training config that need no data read: each refuses, naming the key, what would
train to no purpose (made before the training set is loaded)."""
from __future__ import annotations

from reid.config import ConfigError
from reid.config.sie_keys import sie_node


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


def check_unlabelled_keys(cfg) -> None:
    """Refuse unlabelled crops named in DATASETS.UNLABELLED that training would never read."""
    u = cfg.DATASETS.UNLABELLED
    given = [f"DATASETS.UNLABELLED.{k} {v!r}" for k, v in (("DIR", u.DIR), ("LIST", u.LIST)) if v]
    if given and "unlabelled" not in [str(n).lower() for n in cfg.DATASETS.NAMES]:
        raise ConfigError(
            f"{' and '.join(given)} names unlabelled crops, but DATASETS.NAMES {list(cfg.DATASETS.NAMES)} does not "
            "include 'unlabelled', so they would not be read. Add it (e.g. DATASETS.NAMES [unlabelled]) or clear the key."
        )


def check_camera_count(cfg, items) -> int:
    """The cameras SIE embeds: ``NUM_CAMERAS`` of the model's node (``reid.config.sie_keys``), or when 0
    there: counted from the training `items` (a ValueError when the data has more than the key allows)."""
    node, key = sie_node(cfg)
    cameras = 1 + max((int(item[2]) for item in items), default=0)
    if cameras > int(node.NUM_CAMERAS) > 0:
        raise ValueError(f"The training data has camera ids up to {cameras - 1} but {key}.NUM_CAMERAS "
                         f"is {node.NUM_CAMERAS}: set it to {cameras} (or 0 to count them).")
    return int(node.NUM_CAMERAS) or cameras


__all__ = ["check_batch_identities", "check_camera_count", "check_unlabelled_keys"]
