"""How sure a rate measured on a finite number of pairs is: Clopper-Pearson bounds, and the
number of pairs a false accept rate needs before it can be measured at all.

A rate measured as ``k`` events in ``n`` trials (accepted impostor pairs of ``n`` impostor
pairs: a FAR; accepted genuine pairs of ``n`` genuine pairs: a TAR) is uncertain by about
``sqrt(k) / n``. The exact interval of Clopper and Pearson (Biometrika 26, 1934) inverts the
binomial distribution; at confidence ``c`` (two-sided, ``alpha = 1 - c``)::

    lower(k, n) = Beta^-1(alpha / 2;     k,     n - k + 1)      (0 when k = 0)
    upper(k, n) = Beta^-1(1 - alpha / 2; k + 1, n - k)          (1 when k = n)

with ``Beta^-1(q; a, b)`` the q-quantile of the Beta(a, b) distribution. Each bound fails with
probability at most ``alpha / 2`` whatever the true rate (the interval is conservative). The
one-sided upper bound at confidence ``c`` is ``upper`` with ``alpha / 2 = 1 - c``.

With no event in ``n`` trials the one-sided upper bound solves ``(1 - p)^n = 1 - c``:
``p = 1 - (1 - c)^(1/n)``, about ``3 / n`` at 95% (the "rule of three"). No threshold chosen on
``n`` impostor pairs can show a FAR below that, not even one that accepts none of them. So a
FAR ``f`` is **resolved** by ``n`` impostor pairs when ``1 - (1 - c)^(1/n) <= f``, that is when
``n >= ln(1 - c) / ln(1 - f)`` (:func:`pairs_to_resolve`; about ``3 / f`` at 95%).
"""
from __future__ import annotations

import math
from typing import Tuple

from scipy.special import betaincinv

#: The confidence of every bound this toolkit reports (two-sided intervals, one-sided upper bounds).
CONFIDENCE = 0.95


def _check(k: int, n: int, confidence: float) -> None:
    if not (0 <= k <= n and n >= 1):
        raise ValueError(f"A rate needs 0 <= events <= trials and at least one trial, got {k} of {n}.")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"A confidence must lie in (0, 1) (e.g. 0.95), got {confidence!r}.")


def rate_upper_bound(k: int, n: int, confidence: float = CONFIDENCE) -> float:
    """One-sided Clopper-Pearson upper bound of a rate seen as `k` events in `n` trials: the true
    rate is below it with probability at least `confidence`."""
    _check(k, n, confidence)
    return 1.0 if k == n else float(betaincinv(k + 1, n - k, confidence))


def rate_interval(k: int, n: int, confidence: float = CONFIDENCE) -> Tuple[float, float]:
    """Two-sided Clopper-Pearson interval ``(lower, upper)`` of a rate seen as `k` events in `n`
    trials, at `confidence` (each side fails with probability at most ``(1 - confidence) / 2``)."""
    _check(k, n, confidence)
    half = (1.0 - confidence) / 2.0
    lower = 0.0 if k == 0 else float(betaincinv(k, n - k + 1, half))
    upper = 1.0 if k == n else float(betaincinv(k + 1, n - k, 1.0 - half))
    return lower, upper


def pairs_to_resolve(rate: float, confidence: float = CONFIDENCE) -> int:
    """The fewest impostor pairs that can resolve false accept rate `rate`: the smallest ``n`` with
    ``1 - (1 - confidence)^(1/n) <= rate`` (zero accepted pairs bound the FAR by `rate`)."""
    if not 0.0 < rate < 1.0:
        raise ValueError(f"A false accept rate must lie in (0, 1), got {rate!r}.")
    _check(0, 1, confidence)
    n = max(1, math.ceil(math.log(1.0 - confidence) / math.log1p(-rate)))
    # The logarithms are rounded: step to the exact smallest n of the inequality.
    while n > 1 and -math.expm1(math.log(1.0 - confidence) / (n - 1)) <= rate:
        n -= 1
    while -math.expm1(math.log(1.0 - confidence) / n) > rate:
        n += 1
    return n


__all__ = ["CONFIDENCE", "pairs_to_resolve", "rate_interval", "rate_upper_bound"]
