"""Durations and points in time on the report's command line.

Durations use Prometheus' notation (``90s``, ``15m``, ``1h30m``, ``7d``, ``2w``) so that the
values users already type into PromQL work here. Times are RFC 3339 (``2025-06-01T00:00:00Z``,
or a bare date meaning midnight UTC) or Unix seconds; the report works in UTC throughout, so
that a month's bill is the same wherever it is run.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0, "y": 365 * 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus-style duration; ValueError with the accepted form otherwise."""
    spec = text.strip()
    position = 0
    total = 0.0
    for match in _DURATION.finditer(spec):
        if match.start() != position:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        position = match.end()
    if not spec or position != len(spec):
        raise ValueError(f"invalid duration {text!r}: use a number with a unit, e.g. 90s, 15m, 1h30m, 7d")
    if total <= 0:
        raise ValueError(f"invalid duration {text!r}: must be longer than zero")
    return total


def parse_time(text: str) -> float:
    """Unix seconds from RFC 3339, a bare date (midnight UTC) or a Unix timestamp."""
    spec = text.strip()
    try:
        value = float(spec)
    except ValueError:
        pass
    else:
        if math.isfinite(value) and value >= 0:
            return value
        raise ValueError(f"invalid time {text!r}: a Unix timestamp must be a non-negative number")
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", spec):
            day = date.fromisoformat(spec)
            return datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        parsed = datetime.fromisoformat(spec.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(f"invalid time {text!r}: use RFC 3339 (2025-06-01T00:00:00Z), a date "
                         "(2025-06-01) or Unix seconds") from None
    if parsed.tzinfo is None:
        raise ValueError(f"invalid time {text!r}: give a time zone (Z for UTC), e.g. 2025-06-01T00:00:00Z")
    return parsed.timestamp()


def format_time(timestamp: float) -> str:
    """``2025-06-01T00:00:00Z`` (seconds precision, UTC)."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_day(timestamp: float) -> str:
    """The UTC calendar day of a timestamp, ``2025-06-01``."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d")


def format_duration(seconds: float) -> str:
    """A short human form: ``48h``, ``7d``, ``1m``, ``90s``, ``2d12h``."""
    remaining = round(seconds)
    if remaining <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, remaining = divmod(remaining, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)
