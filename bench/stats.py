"""Small statistics the report needs: percentiles, medians and ratios (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks (numpy's default).

    NaN for an empty sequence, so a phase where every request failed shows as "n/a", never as 0.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be within 0..100, got {q}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = math.ceil(position)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def percentile_counting_failures(latencies: Sequence[float], failed: int, failed_as_s: float, q: float) -> float:
    """The q-th percentile with each of ``failed`` scrapes counted as taking ``failed_as_s`` seconds.

    A failed scrape (refused, reset, timed out, short or non-200) is no faster than the scrape
    timeout for whoever waited on it: counted as the timeout, it can only push a percentile up, so an
    exporter that fails under load is never flattered by its failures being left out.
    """
    if failed < 0:
        raise ValueError(f"failed must not be negative, got {failed}")
    return percentile([*latencies, *([failed_as_s] * failed)], q)


def median(values: Sequence[float]) -> float:
    finite = [value for value in values if not math.isnan(value)]
    return percentile(finite, 50) if finite else math.nan


def ratio(ours: float, theirs: float) -> float:
    """ours / theirs; NaN when either side is missing or theirs is zero (no meaningful ratio)."""
    if math.isnan(ours) or math.isnan(theirs) or theirs == 0:
        return math.nan
    return ours / theirs


def paired_ratio(ours: Sequence[float], theirs: Sequence[float]) -> float:
    """Median of the ratios of runs taken next to each other (A, B, A, B ...).

    Pairing runs that ran back to back cancels slow drifts of a shared machine's load better than
    the ratio of two medians would.
    """
    ratios = [ratio(a, b) for a, b in zip(ours, theirs, strict=False)]
    return median(ratios)
