"""Measured NVML call latencies for the simulator: the JSON file ``scripts/test-gpu`` writes on a GPU node.

The ``realistic`` latency profile is built from a few published medians and many estimates
(``REALISTIC_LATENCY_S``). On a real node, ``scripts/test-gpu`` times every NVML C call the sampler
makes and writes this file; a scenario then replays those latencies with
``latency_profile: measured-h200.json`` (a path, relative to the scenario file), so benchmarks and
sampling-cycle checks run against what a real driver costs. The format::

    {
      "format": "gpu-pod-exporter/nvml-latency/v1",
      "measured_on": {"model": "NVIDIA H200", "gpus": 8, "driver_version": "...", ...},
      "latency_seconds": {"nvmlDeviceGetPowerUsage": {"median": 4.1e-05, "p90": ..., "max": ..., "calls": 400},
                          ...},
      "field_value_seconds_per_entry": 6e-06
    }

The simulator uses each call's ``median`` (a plain number is accepted too). Symbols the fake
library does not implement are ignored (a real driver has more calls than the sampler needs);
anything malformed is one ``ScenarioError`` naming the file, line and key.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.config import ConfigError

LATENCY_FORMAT = "gpu-pod-exporter/nvml-latency/v1"


@dataclass(frozen=True)
class MeasuredLatency:
    """Seconds per C symbol (the fake's symbols only) and per requested field value, and their origin."""

    per_call: dict[str, float]
    field_value: float | None
    measured_on: dict[str, Any]
    ignored: tuple[str, ...] = ()  # measured symbols the fake library does not implement


def _seconds(raw: Any) -> float | None:
    if isinstance(raw, dict):
        raw = raw.get("median")
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) or raw < 0:
        return None
    return float(raw)


def _line_of(text: str, key: str) -> int | None:
    """The line where ``"key"`` first appears (json does not keep positions of valid values)."""
    needle = json.dumps(key)
    for number, line in enumerate(text.splitlines(), start=1):
        if needle in line:
            return number
    return None


def load_latency_file(path: str | Path, symbols: Collection[str]) -> MeasuredLatency:
    """Read a measured-latency file; ``symbols`` are the C symbols the fake implements.

    Raises ``ConfigError`` (``file:line: key: message``; the command line exits 2 on it).
    """
    file = str(path)

    def fail(line: int | None, key: str, message: str) -> ConfigError:
        return ConfigError(f"{file}:{line}" if line else file, key, message)

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(None, "latency_profile", f"cannot read the latency file: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(exc.lineno, "json", f"not valid JSON: {exc.msg}") from None
    if not isinstance(document, dict):
        raise fail(1, "latency", "expected a JSON object with format and latency_seconds")
    if document.get("format") != LATENCY_FORMAT:
        raise fail(_line_of(text, "format") or 1, "format",
                   f"expected {LATENCY_FORMAT!r}, got {document.get('format')!r}")
    measured = document.get("latency_seconds")
    if not isinstance(measured, dict) or not measured:
        raise fail(_line_of(text, "latency_seconds") or 1, "latency_seconds",
                   "expected an object of C symbol -> {median: seconds}")
    per_call: dict[str, float] = {}
    ignored: list[str] = []
    for symbol, raw in measured.items():
        seconds = _seconds(raw)
        if seconds is None:
            raise fail(_line_of(text, symbol), f"latency_seconds.{symbol}",
                       f"expected a median in seconds (a number >= 0), got {raw!r}")
        if symbol in symbols:
            per_call[symbol] = seconds
        else:
            ignored.append(symbol)
    field_value = None
    if "field_value_seconds_per_entry" in document:
        field_value = _seconds(document["field_value_seconds_per_entry"])
        if field_value is None:
            raise fail(_line_of(text, "field_value_seconds_per_entry"), "field_value_seconds_per_entry",
                       "expected seconds (a number >= 0)")
    origin = document.get("measured_on")
    return MeasuredLatency(per_call=per_call, field_value=field_value,
                           measured_on=origin if isinstance(origin, dict) else {}, ignored=tuple(sorted(ignored)))
