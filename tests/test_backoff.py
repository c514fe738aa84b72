"""The retry schedule every API watch and the kubelet client use: its arithmetic at the real defaults."""

from __future__ import annotations

import random

import pytest

from exporter.backoff import Backoff, BackoffPolicy, retry_after_seconds
from exporter.kube.reflector import WatchTimeouts

DEFAULT = WatchTimeouts().backoff_policy()


def test_the_default_windows_double_from_one_second_to_a_minute() -> None:
    assert BackoffPolicy(initial_s=1.0, max_s=60.0, factor=2.0, retry_after_max_s=600.0) == DEFAULT
    assert [DEFAULT.window(n) for n in range(1, 10)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_the_budget_of_an_hour_of_failures_at_the_defaults() -> None:
    """An API server answering 410 forever: windows of 1..32 s fill the first 63 s, then one per
    minute. One node's two resources make at most 66 attempts each per hour (a list and a watch
    per attempt): 264 requests an hour, 0.07 per second, instead of the 83 per second of a loop
    without backoff."""
    assert DEFAULT.windows_until(63.0) == 6
    assert DEFAULT.max_attempts(3600.0) == 66
    requests_per_hour = 2 * 2 * DEFAULT.max_attempts(3600.0)
    assert requests_per_hour == 264
    assert requests_per_hour / 3600 < 0.08
    assert DEFAULT.max_attempts(60.0) == 7  # the first minute of an outage: 7 attempts per resource


def test_full_jitter_puts_the_attempt_anywhere_in_the_window() -> None:
    for draw, expected in ((0.0, 0.0), (0.5, 0.5), (0.999, 0.999)):
        backoff = Backoff(DEFAULT, lambda draw=draw: draw)  # type: ignore[misc]
        assert backoff.failed(now=100.0) == pytest.approx(expected)  # window 1: [100, 101)


def test_windows_follow_each_other_whenever_the_attempts_fall() -> None:
    """Attempt k lies in window k, which starts where window k-1 ended, however early or late the
    earlier attempts fell; a slow attempt (ending after its window) pushes the next window back."""
    draws = iter([0.999, 0.0, 0.5, 0.0])
    backoff = Backoff(DEFAULT, lambda: next(draws))
    now = 0.0
    now += backoff.failed(now)  # window 1 [0, 1): attempt at ~1.0
    assert (backoff.window_start, backoff.window_length) == (0.0, 1.0)
    now += backoff.failed(now)  # window 2 [1, 3): attempt at its start
    assert (backoff.window_start, now) == (pytest.approx(1.0), pytest.approx(1.0))
    now += backoff.failed(now)  # window 3 [3, 7): attempt in the middle
    assert (backoff.window_start, now) == (pytest.approx(3.0), pytest.approx(5.0))
    now += 20.0  # that attempt took 20 s (a slow server): window 4 begins when it ended
    now += backoff.failed(now)
    assert (backoff.window_start, backoff.window_length, now) == (pytest.approx(25.0), 8.0, pytest.approx(25.0))


def test_retry_after_is_honoured_and_capped() -> None:
    backoff = Backoff(DEFAULT, lambda: 0.0)
    assert backoff.failed(now=10.0, retry_after_s=5.0) == pytest.approx(5.0)
    assert backoff.window_start == pytest.approx(15.0)
    backoff.reset()
    assert backoff.failed(now=10.0, retry_after_s=86_400.0) == pytest.approx(600.0)  # a broken proxy's day


def test_reset_starts_again_at_the_first_window() -> None:
    backoff = Backoff(DEFAULT, lambda: 1.0)
    for _ in range(8):
        backoff.failed(now=0.0)
    assert (backoff.failures, backoff.window_length) == (8, 60.0)
    backoff.reset()
    assert backoff.failed(now=1000.0) == pytest.approx(1.0)
    assert backoff.failures == 1


def test_a_fleet_failing_together_spreads_over_each_window() -> None:
    """5,000 nodes whose watches broke at the same moment: in every window their attempts are
    spread evenly (no tenth of a window holds more than 13 % of them), never all at once."""
    rng = random.Random(15)
    attempts: list[list[float]] = [[] for _ in range(8)]
    for _ in range(5000):
        backoff = Backoff(DEFAULT, rng.random)
        now = 0.0
        for window in range(8):
            now += backoff.failed(now)
            attempts[window].append((now - backoff.window_start) / backoff.window_length)
    for shares in attempts:
        counts = [0] * 10
        for share in shares:
            counts[int(share * 10)] += 1
        assert max(counts) / len(shares) < 0.13
        assert min(counts) / len(shares) > 0.07


def test_a_bad_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid backoff policy"):
        BackoffPolicy(initial_s=5.0, max_s=1.0)
    with pytest.raises(ValueError, match="start at 1"):
        DEFAULT.window(0)


@pytest.mark.parametrize(("header", "seconds"), [
    ("7", 7.0), (" 2.5 ", 2.5), ("0", 0.0), (None, None), ("-1", None), ("inf", None), ("nan", None),
    ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("", None),
])
def test_the_one_retry_after_parser_takes_seconds_only(header: str | None, seconds: float | None) -> None:
    """Every Kubernetes request reads the header here; a date, a negative or an infinite value is no window."""
    assert retry_after_seconds(header) == seconds
