"""Units of a scenario's readings: each parser takes a YAML scalar and returns the internal unit, or raises
ValueError; ``channel_units`` says which unit and range each reading channel has on a GPU model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.units import SIZE_UNITS, parse_size, split_quantity
from simulator.models import DEFAULT_MODEL, PRESETS, GpuModel

_POWER_UNITS_MW = {"mW": 1.0, "W": 1000.0, "kW": 1_000_000.0}


def _parse_percent(raw: object) -> float:
    value, unit = split_quantity(raw, "a percentage like 45 or 45%")
    if unit not in ("", "%"):
        raise ValueError(f"expected a percentage like 45 or 45%, got {raw!r}")
    return value


def size_parser(total: int) -> Callable[[object], float]:
    def parse(raw: object) -> float:
        return parse_size(raw, total)

    return parse


def _parse_rate(raw: object) -> float:
    value, unit = split_quantity(raw, "a rate like 40GB/s or a number of bytes per second")
    if unit:
        if not unit.endswith("/s") or unit[:-2] not in SIZE_UNITS:
            raise ValueError(f"unknown rate unit {unit!r} in {raw!r} (use e.g. 40GB/s, 1.5GiB/s, 500MB/s)")
        return value * SIZE_UNITS[unit[:-2]]
    return value


def parse_power_mw(raw: object) -> float:
    value, unit = split_quantity(raw, "a power like 350W, 0.35kW or a number of watts")
    if unit and unit not in _POWER_UNITS_MW:
        raise ValueError(f"unknown power unit {unit!r} in {raw!r} (known: mW, W, kW)")
    return value * _POWER_UNITS_MW.get(unit, 1000.0)


def _parse_celsius(raw: object) -> float:
    value, unit = split_quantity(raw, "a temperature in degrees C")
    if unit not in ("", "C"):
        raise ValueError(f"expected a temperature in degrees C, got {raw!r}")
    return value


def _parse_mhz(raw: object) -> float:
    value, unit = split_quantity(raw, "a clock in MHz")
    if unit not in ("", "MHz"):
        raise ValueError(f"expected a clock in MHz, got {raw!r}")
    return value


def _parse_pstate(raw: object) -> float:
    if isinstance(raw, str) and raw.strip().upper().startswith("P"):
        raw = raw.strip()[1:]
    value, unit = split_quantity(raw, "a performance state 0..15 or P0..P15")
    if unit or value != int(value):
        raise ValueError(f"expected a performance state 0..15 or P0..P15, got {raw!r}")
    return value


def _parse_plain(raw: object) -> float:
    value, unit = split_quantity(raw, "a number")
    if unit:
        raise ValueError(f"expected a plain number, got {raw!r}")
    return value


@dataclass(frozen=True)
class Unit:
    """How one channel's values are written and which range is valid (internal units)."""

    parse: Callable[[object], float]
    minimum: float
    maximum: float
    describe: str


def channel_units(model: GpuModel) -> dict[str, Unit]:
    percent = Unit(_parse_percent, 0.0, 100.0, "percent (0..100)")
    rate = Unit(_parse_rate, 0.0, 10e12, "bytes per second")
    return {
        "load": percent,
        "memory_util": percent,
        "encoder_util": percent,
        "decoder_util": percent,
        "fan": Unit(_parse_percent, 0.0, 200.0, "percent (0..200)"),
        "memory_used": Unit(size_parser(model.memory_total), 0.0,
                             float(model.memory_total - model.memory_reserved),
                             f"bytes (at most {model.memory_total - model.memory_reserved} on {model.key})"),
        "temperature": Unit(_parse_celsius, -40.0, 150.0, "degrees C (-40..150)"),
        "memory_temperature": Unit(_parse_celsius, -40.0, 150.0, "degrees C (-40..150)"),
        "power": Unit(parse_power_mw, 0.0, float(model.power_max_limit_mw),
                       f"watts (at most {model.power_max_limit_mw / 1000:g} W on {model.key})"),
        "sm_clock": Unit(_parse_mhz, 0.0, float(model.max_sm_clock),
                          f"MHz (at most {model.max_sm_clock} on {model.key})"),
        "memory_clock": Unit(_parse_mhz, 0.0, float(model.max_memory_clock),
                              f"MHz (at most {model.max_memory_clock} on {model.key})"),
        "pstate": Unit(_parse_pstate, 0.0, 15.0, "a performance state 0..15"),
        "nvlink_tx": rate,
        "nvlink_rx": rate,
        "pcie_tx": rate,
        "pcie_rx": rate,
    }


CHANNELS = tuple(channel_units(PRESETS[DEFAULT_MODEL]))
RATE_UNIT = Unit(_parse_plain, 0.0, 1e9, "events per second")
