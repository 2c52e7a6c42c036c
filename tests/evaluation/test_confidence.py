"""Clopper-Pearson bounds and the pairs a FAR needs, against published values and the binomial law."""
import math

import pytest
from scipy.optimize import brentq
from scipy.stats import binom

from reid.evaluation.confidence import pairs_to_resolve, rate_interval, rate_upper_bound


def test_the_interval_matches_published_clopper_pearson_values():
    # 95% two-sided intervals as tabulated (e.g. Brown, Cai & DasGupta 2001; R's binom.test).
    assert rate_interval(5, 10) == pytest.approx((0.187086, 0.812914), abs=1e-6)
    assert rate_interval(0, 10) == pytest.approx((0.0, 1 - 0.025 ** (1 / 10)), abs=1e-12)
    assert rate_interval(10, 10) == pytest.approx((0.025 ** (1 / 10), 1.0), abs=1e-12)
    assert rate_interval(1, 20) == pytest.approx((0.001265, 0.248733), abs=1e-6)


@pytest.mark.parametrize("k, n", [(0, 69), (3, 300), (17, 17100), (250, 1000)])
def test_the_upper_bound_is_the_rate_at_which_k_or_fewer_events_have_probability_5_percent(k, n):
    # Solved here on the binomial law itself, not through the Beta quantile the module uses.
    expected = brentq(lambda p: binom.cdf(k, n, p) - 0.05, 1e-12, 1 - 1e-12, xtol=1e-14)
    assert rate_upper_bound(k, n) == pytest.approx(expected, rel=1e-7)
    lo, hi = rate_interval(k, n)
    assert lo <= k / n <= hi


def test_zero_events_give_the_rule_of_three():
    assert rate_upper_bound(0, 100) == pytest.approx(1 - 0.05 ** (1 / 100))
    assert rate_upper_bound(0, 100_000) == pytest.approx(3 / 100_000, rel=0.002)


@pytest.mark.parametrize("far", [0.5, 0.1, 0.05, 0.01, 1e-3, 1e-4, 1e-6])
def test_pairs_to_resolve_is_the_smallest_split_that_can_show_the_far(far):
    n = pairs_to_resolve(far)
    assert (1 - far) ** n <= 0.05 < (1 - far) ** (n - 1)
    assert rate_upper_bound(0, n) <= far < rate_upper_bound(0, n - 1)
    assert n == pytest.approx(3 / far, rel=0.01) or far >= 0.05  # the rule of three for small FARs


def test_known_counts_and_bad_arguments():
    assert pairs_to_resolve(1e-4) == 29956 and pairs_to_resolve(0.01) == 299
    for bad in (lambda: rate_interval(3, 2), lambda: rate_upper_bound(0, 0), lambda: pairs_to_resolve(0.0),
                lambda: pairs_to_resolve(1.0), lambda: rate_interval(1, 2, confidence=1.0)):
        with pytest.raises(ValueError):
            bad()
    assert math.isclose(rate_upper_bound(4, 4), 1.0)
