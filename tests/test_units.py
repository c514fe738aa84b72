"""The one reader of durations and sizes: each notation means what the tool that defined it means."""

from __future__ import annotations

import pytest

from exporter.units import (
    format_duration,
    parse_go_duration,
    parse_prometheus_duration,
    parse_quantity_duration,
    parse_size,
)


@pytest.mark.parametrize(("text", "seconds"), [("1m30s", 90), ("250ms", 0.25), ("1.5h", 5400), ("0", 0),
                                               ("137us", 137e-6), ("2µs", 2e-6), ("+1s", 1), (" 10s ", 10)])
def test_go_durations_as_go_reads_them(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10", "1d", "-1s", "1 second", "", "s", "1s2", "1h-30m"])
def test_what_go_refuses_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid duration .*expected e\.g\. 1s, 250ms or 1m30s"):
        parse_go_duration(text)


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("1h30m", 5400), ("7d", 604800),
                                               ("2w", 1209600), ("500ms", 0.5), ("1y", 365 * 86400)])
def test_prometheus_durations(text: str, seconds: float) -> None:
    assert parse_prometheus_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("text", "message"), [("0s", "must be longer than zero"), ("1 minute", "e.g. 90s"),
                                               ("10", "e.g. 90s"), ("1us", "e.g. 90s")])
def test_prometheus_durations_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"invalid duration '{text}': .*{message}"):
        parse_prometheus_duration(text)


@pytest.mark.parametrize(("raw", "seconds"), [("4.5ms", 0.0045), ("137us", 137e-6), ("30s", 30), ("2m", 120),
                                              ("2min", 120), ("1h", 3600), ("1d", 86400), (1.5, 1.5), (3, 3),
                                              ("1.5", 1.5), ("1e-3s", 0.001)])
def test_scenario_quantities_with_one_unit_or_seconds(raw: object, seconds: float) -> None:
    assert parse_quantity_duration(raw) == pytest.approx(seconds)


@pytest.mark.parametrize(("raw", "message"), [("3 parsecs", "unknown duration unit 'parsecs'"),
                                              ("-1s", "must be zero or positive"), (True, "expected a duration"),
                                              ([1], "expected a duration"), ("1m30s", "expected a duration")])
def test_scenario_quantities_refused(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_quantity_duration(raw)


def test_sizes_in_decimal_and_binary_units_and_as_a_share() -> None:
    assert parse_size("40GiB") == 40 * 2**30
    assert parse_size("1.5GB") == 1.5e9
    assert parse_size(4096) == 4096
    assert parse_size("60%", total=1000) == 600
    with pytest.raises(ValueError, match=r"unknown size unit '%'"):
        parse_size("60%")
    with pytest.raises(ValueError, match=r"unknown size unit 'Gb' .*known: B, KB"):
        parse_size("3Gb", total=10)


@pytest.mark.parametrize(("seconds", "text"), [(172800, "2d"), (90, "1m30s"), (0, "0s"), (216000, "2d12h")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
