"""Points in time on the report's command line (durations: ``exporter.units``, Prometheus' notation).

Times are RFC 3339 (``2025-06-01T00:00:00Z``,
or a bare date meaning midnight UTC) or Unix seconds; the report works in UTC throughout, so
that a month's bill is the same wherever it is run.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime


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
