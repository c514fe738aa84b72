"""Durations and sizes as users write them, in one place for every input: flags, the config file,
the web config, the remediation policy, the report's command line and budget file, the scenario.

Three duration notations are accepted because three tools our users already know define them,
and each value must mean here what it means there:

* **Go** (``time.ParseDuration``: ``1m30s``, ``250ms``, ``0``): dcgm-exporter's flags, the
  exporter-toolkit web config, and the remediation policy (written by the same people, next to
  Alertmanager's configuration);
* **Prometheus** (``90s``, ``15m``, ``1h30m``, ``7d``, ``2w``): the report and its budget file,
  whose values people copy from PromQL;
* **a quantity** (``4.5ms``, ``137us``, ``30s``, ``2m``, or a bare number of seconds): the
  scenario format, where a number and one unit is the natural way to write a latency.

They share one grammar (a run of ``<number><unit>`` parts) and differ only in their unit tables
and in what a bare number means, so there is one reader here, not one per module. Every function
raises ``ValueError`` with a message that says what was expected; callers add file, line and key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

GO_UNITS: Mapping[str, float] = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                                 "h": 3600.0}
PROMETHEUS_UNITS: Mapping[str, float] = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0,
                                         "w": 7 * 86400.0, "y": 365 * 86400.0}
QUANTITY_UNITS: Mapping[str, float] = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
                                       "min": 60.0, "h": 3600.0, "d": 86400.0}
SIZE_UNITS: Mapping[str, int] = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
                                 "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([a-zµ]+)")
_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z%/µ]*)\s*$")


def _sum_parts(text: str, units: Mapping[str, float]) -> float | None:
    """The seconds of ``text`` as a run of ``<number><unit>`` parts with units from ``units``, or None."""
    position = 0
    total = 0.0
    for match in _PART.finditer(text):
        if match.start() != position or match.group(2) not in units:
            return None
        total += float(match.group(1)) * units[match.group(2)]
        position = match.end()
    return total if text and position == len(text) else None


def parse_go_duration(text: str) -> float:
    """Go's ``time.ParseDuration`` syntax (``1s``, ``1m30s``, ``250ms``, ``0``) in seconds (>= 0)."""
    spec = text.strip()
    if spec in {"0", "-0", "+0"}:
        return 0.0
    seconds = _sum_parts(spec.removeprefix("+"), GO_UNITS)
    if seconds is None:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 1s, 250ms or 1m30s")
    return seconds


def parse_prometheus_duration(text: str) -> float:
    """Seconds in a Prometheus-style duration (``90s``, ``15m``, ``1h30m``, ``7d``), above zero."""
    seconds = _sum_parts(text.strip(), PROMETHEUS_UNITS)
    if seconds is None:
        raise ValueError(f"invalid duration {text!r}: use a number with a unit, e.g. 90s, 15m, 1h30m, 7d")
    if seconds <= 0:
        raise ValueError(f"invalid duration {text!r}: must be longer than zero")
    return seconds


def split_quantity(raw: object, what: str) -> tuple[float, str]:
    """A YAML scalar as (number, unit): ``4.5ms`` -> (4.5, "ms"), ``40`` -> (40.0, "")."""
    if isinstance(raw, bool) or raw is None or isinstance(raw, list | dict):
        raise ValueError(f"expected {what}, got {raw!r}")
    if isinstance(raw, int | float):
        return float(raw), ""
    match = _QUANTITY.match(str(raw))
    if not match:
        raise ValueError(f"expected {what}, got {raw!r}")
    return float(match.group(1)), match.group(2)


def parse_quantity_duration(raw: object) -> float:
    """Seconds from ``4.5ms``, ``137us``, ``30s``, ``2m``, ``1h`` or a plain number of seconds (>= 0)."""
    value, unit = split_quantity(raw, "a duration like 30s or 4.5ms")
    if unit and unit not in QUANTITY_UNITS:
        raise ValueError(f"unknown duration unit {unit!r} in {raw!r} (known: {', '.join(QUANTITY_UNITS)})")
    seconds = value * QUANTITY_UNITS.get(unit, 1.0)
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"duration {raw!r} must be zero or positive")
    return seconds


def parse_size(raw: object, total: int | None = None) -> float:
    """Bytes from ``40GiB``, ``512MiB``, ``1.5GB``, a plain number of bytes, or (with ``total``) ``60%``."""
    value, unit = split_quantity(raw, "a size like 40GiB, 512MiB, a number of bytes" +
                                 (" or 60%" if total is not None else ""))
    if unit == "%" and total is not None:
        return total * value / 100.0
    if unit and unit not in SIZE_UNITS:
        raise ValueError(f"unknown size unit {unit!r} in {raw!r} (known: {', '.join(SIZE_UNITS)}"
                         f"{', %' if total is not None else ''})")
    return value * SIZE_UNITS.get(unit, 1)


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
