import math

import pytest

from bench.stats import median, paired_ratio, percentile, percentile_counting_failures, ratio


def test_percentile_interpolates_between_closest_ranks():
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)


def test_percentile_of_nothing_is_nan_not_zero():
    assert math.isnan(percentile([], 99))


def test_percentile_outside_0_to_100_is_rejected():
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)


def test_median_ignores_missing_values():
    assert median([3.0, math.nan, 1.0, 2.0]) == 2.0
    assert math.isnan(median([math.nan]))


def test_ratio_is_undefined_without_a_denominator():
    assert ratio(2.0, 4.0) == 0.5
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(math.nan, 1.0))


def test_paired_ratio_takes_the_median_of_ratios_of_neighbouring_runs():
    # Machine got slower during the second pair: ratios 0.5, 0.5, 0.25 -> median 0.5,
    # whereas the ratio of medians would be 2/6.
    assert paired_ratio([1.0, 2.0, 2.0], [2.0, 4.0, 8.0]) == 0.5


def test_a_failed_scrape_counts_as_the_timeout_in_the_percentiles():
    successes = [0.001] * 99
    # Left out, the failure would leave p99 at 1 ms; counted as the 10 s timeout it lifts the tail.
    assert percentile(successes, 99) == pytest.approx(0.001)
    assert percentile_counting_failures(successes, 1, 10.0, 99) == pytest.approx(0.001 + 0.01 * (10.0 - 0.001))
    assert percentile_counting_failures(successes, 1, 10.0, 100) == 10.0
    assert percentile_counting_failures(successes, 1, 10.0, 50) == pytest.approx(0.001)
    assert percentile_counting_failures(successes, 0, 10.0, 99) == percentile(successes, 99)


def test_a_phase_where_everything_failed_has_the_timeout_as_its_percentiles():
    assert percentile_counting_failures([], 5, 10.0, 50) == 10.0
    assert math.isnan(percentile_counting_failures([], 0, 10.0, 50))
    with pytest.raises(ValueError, match="negative"):
        percentile_counting_failures([0.1], -1, 10.0, 50)
