"""Split selection shared by the datasets that publish several train/test splits."""
from __future__ import annotations

from reid.data.datasets.base import DatasetFormatError


def check_split_id(split_id: object, num_splits: int, source: str) -> int:
    """`split_id` as an int, or a one-line DatasetFormatError naming the value, the valid range
    and `source` (the splits file) when it is not an integer in ``0..num_splits-1``."""
    valid = isinstance(split_id, int) and not isinstance(split_id, bool) and 0 <= split_id < num_splits
    if not valid:
        raise DatasetFormatError(f"Split index {split_id!r} is out of range: {source} has {num_splits} splits; "
                                 f"use a split index in 0..{num_splits - 1}.")
    return int(split_id)  # type: ignore[arg-type]
