"""Values as strict JSON can hold them: one rule for every JSON file the toolkit writes."""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np


def jsonable(value: Any) -> Any:
    """`value` as plain JSON: numpy arrays and tensors as lists, numpy/0-d scalars as numbers, NaN and
    infinities as null (strict JSON has no NaN, and every reader must be able to parse the file),
    float keys as their shortest form (``1e-3`` -> ``"0.001"``), other keys as strings."""
    if isinstance(value, Mapping):
        return {(f"{k:g}" if isinstance(k, float) else str(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist") and callable(value.tolist) and getattr(value, "ndim", 0) > 0:
        return jsonable(value.tolist())  # numpy arrays, tensors
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", None) == 0:
        value = value.item()  # numpy scalars, 0-d arrays and tensors
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


__all__ = ["jsonable"]
