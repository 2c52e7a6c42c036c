"""Checks on the numbers inside files: weights that can be used, feature rows that can be searched.

Two ways a file from someone else gives a wrong answer with exit code 0:

* weights of the wrong kind: an integer tensor copies into a float parameter without
  complaint (every feature then looks alike), and an infinite BatchNorm variance or a NaN
  weight makes every feature zero or NaN. :func:`weight_problem` finds the first such tensor;
  checkpoint loading (``reid.engine.checkpoint_files.load_model_state``, which fast-reid and every
  other format pass through) refuses the file with its name.
* feature rows that are not unit length: a cosine score is the dot product of unit rows, so a
  row of length 1e10 outscores every true match and an all-zero row matches nothing, in
  arbitrary order. :func:`unit_rows` normalises rows of any length (huge values included)
  and refuses zero and non-finite rows, naming the first. Every search index is built
  through it (``reid.search.index_base.as_unit_rows``), and saved galleries and indexes
  are checked with it when loaded.
"""
from __future__ import annotations

from typing import Mapping, Optional, Tuple, Union

import numpy as np
import torch

# A row counts as unit length within this tolerance (float32 rounding of a normalised row is ~1e-7).
UNIT_TOLERANCE = 1e-3


def weight_problem(state: Mapping[str, torch.Tensor],
                   reference: Optional[Mapping[str, torch.Tensor]] = None) -> Optional[str]:
    """What is wrong with the first unusable tensor of `state`, or None when all are usable.

    A tensor is unusable when the model's tensor of that name (in `reference`, a state dict)
    is floating point but the file's is not (integers, booleans), when a floating tensor holds
    NaN or inf, or when a BatchNorm ``running_var`` is negative. Without `reference`, only
    floating tensors are checked.
    """
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            return f"{key} is a {type(value).__name__}, not a tensor"
        ref = reference.get(key) if reference is not None else None
        if ref is not None and ref.is_floating_point() and not value.is_floating_point():
            return f"{key} is {value.dtype} where the model has {ref.dtype} (the file was not saved from a float model)"
        if not value.is_floating_point():
            continue
        finite = torch.isfinite(value)
        if not bool(finite.all()):
            bad = "NaN" if bool(torch.isnan(value).any()) else "inf"
            return f"{key} holds {bad} ({int((~finite).sum())} of {value.numel()} values)"
        if key.endswith("running_var") and bool((value < 0).any()):
            return f"{key} (a BatchNorm variance) holds negative values"
    return None


# Rows checked at a time by check_rows: bounded extra memory for galleries of millions of rows.
_CHUNK = 1 << 16


def _row_peaks(x: torch.Tensor, what: str, offset: int = 0) -> torch.Tensor:
    """Each row's largest absolute value ``[N, 1]``; BadRowsError for a NaN/inf or all-zero row."""
    finite = torch.isfinite(x).all(dim=1)
    if not bool(finite.all()):
        rows = torch.nonzero(~finite).flatten()
        raise BadRowsError(what, f"feature row {offset + int(rows[0])} holds NaN or inf ({len(rows)} such rows)")
    peak = x.abs().amax(dim=1, keepdim=True) if x.shape[1] else torch.zeros(x.shape[0], 1, device=x.device)
    zero = (peak == 0).flatten()
    if bool(zero.any()):
        rows = torch.nonzero(zero).flatten()
        raise BadRowsError(what, f"feature row {offset + int(rows[0])} is all zero ({len(rows)} such rows); a zero "
                                 "row has no direction and matches nothing")
    return peak


def check_rows(feats: np.ndarray, what: str) -> None:
    """Raise BadRowsError (naming the row) unless every row of `feats` is finite and not all zero.

    Checks a chunk at a time, so validating a gallery of millions of rows costs little memory.
    """
    for start in range(0, len(feats), _CHUNK):
        _row_peaks(torch.as_tensor(np.asarray(feats[start:start + _CHUNK])).float(), what, start)


class BadRowsError(ValueError):
    """Feature rows that cannot be normalised; ``reason`` is the message without `what`."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"{what}: {reason}")
        self.reason = reason


def unit_rows(feats: Union[np.ndarray, torch.Tensor], what: str) -> Tuple[torch.Tensor, int]:
    """`feats` (``[N, D]``) as float32 rows of unit length (a new tensor), and how many rows
    were not unit length before.

    Each row is first divided by its largest absolute value, so that its squared sum cannot
    overflow float32 (a row of 1e30 normalises like any other). Raises ValueError naming
    `what` and the first row index (BadRowsError) when a row holds NaN/inf or is all zero (it has no
    direction: it would score 0 against every row, in arbitrary order).
    """
    x = feats.detach() if isinstance(feats, torch.Tensor) else torch.as_tensor(np.asarray(feats))
    if x.dim() != 2:
        raise BadRowsError(what, f"features must be a 2-d array [N, D], got shape {tuple(x.shape)}")
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64)):
        raise BadRowsError(what, f"features are {x.dtype}, not numbers")
    x = x.to(torch.float32)
    peak = _row_peaks(x, what)
    scaled = x / peak
    norms = torch.linalg.vector_norm(scaled, dim=1, keepdim=True)
    changed = int(((peak * norms - 1).abs() > UNIT_TOLERANCE).sum())
    return scaled / norms, changed


__all__ = ["BadRowsError", "UNIT_TOLERANCE", "check_rows", "unit_rows", "weight_problem"]
