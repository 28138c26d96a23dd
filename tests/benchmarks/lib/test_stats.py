"""The p-values and the Holm adjustment the study reports use (benchmarks/lib/stats.py), against scipy (a test
dependency only) and against a family worked by hand."""

from __future__ import annotations

import math

import pytest


def test_the_two_sample_and_paired_p_values_are_scipys():
    from scipy import stats as scipy_stats

    from benchmarks.lib.stats import paired_interval, paired_p, two_sample_p

    # the long study's test NLL: RWS against JSA without the cache, and a clearly separated pair
    rws, jsa = [71.6565, 71.7927, 72.1245], [71.7565, 71.4630, 72.2060]
    for a, b in ((rws, jsa), ([1.0, 1.2, 0.9, 1.1], [2.0, 2.3, 1.9]), ([5.0, 5.1], [4.0, 4.2, 4.1, 4.05])):
        assert math.isclose(two_sample_p(a, b), scipy_stats.ttest_ind(a, b).pvalue, rel_tol=1e-9)
    before, after = [80.3, 80.0, 80.6, 80.9, 80.1], [80.1, 79.7, 80.5, 80.4, 80.2]
    assert math.isclose(paired_p(after, before), scipy_stats.ttest_rel(after, before).pvalue, rel_tol=1e-9)
    low, high = paired_interval(after, before)
    interval = scipy_stats.ttest_rel(after, before).confidence_interval(0.95)
    assert math.isclose(low, interval.low, rel_tol=1e-9) and math.isclose(high, interval.high, rel_tol=1e-9)
    assert math.isnan(two_sample_p([1.0], [2.0, 3.0])) and math.isnan(paired_p([1.0], [2.0]))
    with pytest.raises(ValueError, match="as many values"):
        paired_p([1.0, 2.0], [1.0])


def test_holm_multiplies_the_kth_smallest_by_m_minus_k_plus_1_keeps_the_order_and_skips_nan():
    from benchmarks.lib.stats import holm

    # sorted: 0.01 * 4 = 0.04, 0.02 * 3 = 0.06, 0.015 -> max(0.06, 0.03 * 2) = 0.06, 0.5 * 1 -> 0.5
    adjusted = holm([0.5, 0.01, float("nan"), 0.03, 0.02])
    assert adjusted[:2] == pytest.approx([0.5, 0.04]) and math.isnan(adjusted[2])
    assert adjusted[3:] == pytest.approx([0.06, 0.06])
    assert holm([0.04, 0.03]) == pytest.approx([0.06, 0.06])  # monotone: never below a smaller p's adjustment
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.6, 0.7, 0.1]) == pytest.approx([1.0, 1.0, 0.3])
