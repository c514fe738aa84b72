"""Reading a scenario's YAML nodes with their line numbers: durations, optional keys, value patterns,
time windows, flags and counters."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import TypeVar

from exporter.safeyaml import YamlValue
from exporter.units import parse_quantity_duration
from simulator.patterns import (
    ALWAYS,
    INFINITY,
    Constant,
    CounterSpec,
    Flag,
    Jittered,
    Noise,
    Pattern,
    Ramp,
    Sine,
    Square,
    Steps,
    Window,
)
from simulator.scenario.model import NEVER, PATTERN_KINDS
from simulator.scenario.units import RATE_UNIT, Unit

_T = TypeVar("_T")


def read_duration(value: YamlValue) -> float:
    """A scenario duration (``4.5ms``, ``30s``, a number of seconds) at ``value``."""
    return value.convert(parse_quantity_duration)


def read_optional(keys: Mapping[str, YamlValue], name: str, read: Callable[[YamlValue], _T], default: _T) -> _T:
    """``read(keys[name])`` when the key is present, else ``default``."""
    return read(keys[name]) if name in keys else default


def read_pattern(value: YamlValue, unit: Unit) -> Pattern:
    def level(item: YamlValue) -> float:
        number = float(item.convert(unit.parse))
        if not unit.minimum <= number <= unit.maximum:
            raise item.error(f"{item.scalar()!r} is out of range: expected {unit.describe}")
        return number

    if not value.is_mapping():
        return Constant(level(value))
    keys = value.mapping(("pattern", "value", "low", "high", "period", "phase", "duty", "steps", "every",
                          "from", "to", "duration", "start", "repeat", "jitter", "jitter_period"))
    if "pattern" not in keys:
        raise value.error(f"a pattern mapping needs 'pattern: KIND' (known: {', '.join(PATTERN_KINDS)})")
    kind = keys["pattern"].string()
    allowed = {
        "constant": ("value",),
        "sine": ("low", "high", "period", "phase"),
        "square": ("low", "high", "period", "duty", "phase"),
        "steps": ("steps", "every"),
        "ramp": ("from", "to", "duration", "start", "repeat"),
        "noise": ("low", "high", "period"),
    }
    if kind not in allowed:
        raise keys["pattern"].error(f"unknown pattern {kind!r} (known: {', '.join(PATTERN_KINDS)})",
                                    path=value.path)
    required = {"constant": ("value",), "sine": ("low", "high", "period"),
                "square": ("low", "high", "period"), "steps": ("steps",), "ramp": ("from", "to", "duration"),
                "noise": ("low", "high")}[kind]
    for name, item in keys.items():
        if name not in (*allowed[kind], "pattern", "jitter", "jitter_period"):
            raise item.error(f"'{name}' does not apply to pattern {kind!r} "
                             f"(it takes: {', '.join(allowed[kind])}, jitter, jitter_period)")
    for name in required:
        if name not in keys:
            raise value.error(f"pattern {kind!r} needs '{name}'")

    def period(name: str, default: float) -> float:
        if name not in keys:
            return default
        seconds = read_duration(keys[name])
        if seconds <= 0:
            raise keys[name].error("must be greater than zero")
        return seconds

    base: Pattern
    if kind == "constant":
        base = Constant(level(keys["value"]))
    elif kind == "sine":
        base = Sine(level(keys["low"]), level(keys["high"]), period("period", 1.0),
                    read_duration(keys["phase"]) if "phase" in keys else 0.0)
    elif kind == "square":
        duty = keys["duty"].number(0.0, 1.0) if "duty" in keys else 0.5
        base = Square(level(keys["low"]), level(keys["high"]), period("period", 1.0), duty,
                      read_duration(keys["phase"]) if "phase" in keys else 0.0)
    elif kind == "noise":
        base = Noise(level(keys["low"]), level(keys["high"]), period("period", 5.0))
    elif kind == "ramp":
        base = Ramp(level(keys["from"]), level(keys["to"]), period("duration", 1.0),
                    read_duration(keys["start"]) if "start" in keys else 0.0,
                    keys["repeat"].boolean() if "repeat" in keys else False)
    else:
        points: list[tuple[float, float]] = []
        for item in keys["steps"].sequence():
            pair = item.sequence()
            if len(pair) != 2:
                raise item.error("each step is [AT, VALUE], e.g. [30s, 95]")
            at = read_duration(pair[0])
            if points and at <= points[-1][0]:
                raise pair[0].error("step times must increase")
            points.append((at, level(pair[1])))
        if not points:
            raise keys["steps"].error("needs at least one [AT, VALUE] step")
        base = Steps(tuple(points), period("every", 0.0) if "every" in keys else None)
    if "jitter" in keys:
        amplitude = keys["jitter"].convert(unit.parse)
        if amplitude < 0:
            raise keys["jitter"].error("jitter must be zero or positive")
        return Jittered(base, float(amplitude), period("jitter_period", 2.0))
    if "jitter_period" in keys:
        raise keys["jitter_period"].error("jitter_period needs jitter")
    return base


def read_window(value: YamlValue, extra: Collection[str] = ()) -> tuple[Window, dict[str, YamlValue]]:
    keys = value.mapping(("from", "until", "for", "every", *extra))
    start = read_duration(keys["from"]) if "from" in keys else 0.0
    if "until" in keys and "for" in keys:
        raise keys["for"].error("give either 'until' or 'for', not both")
    end = INFINITY
    if "until" in keys:
        end = read_duration(keys["until"])
        if end <= start:
            raise keys["until"].error("'until' must be after 'from'")
    elif "for" in keys:
        end = start + read_duration(keys["for"])
    every = None
    if "every" in keys:
        every = read_duration(keys["every"])
        if every <= 0 or end == INFINITY or end - start > every:
            raise keys["every"].error("'every' needs a window ('until' or 'for') no longer than the period")
    return Window(start, end, every), keys


def read_flag(value: YamlValue) -> Flag:
    if value.is_sequence():
        return Flag(tuple(read_window(item)[0] for item in value.sequence()))
    if value.is_mapping():
        return Flag((read_window(value)[0],))
    return Flag((ALWAYS,)) if value.boolean() else NEVER


def read_counter(value: YamlValue) -> CounterSpec:
    if not value.is_mapping():
        return CounterSpec(start=value.integer(0))
    keys = value.mapping(("start", "steps", "rate"))
    steps: list[tuple[float, int]] = []
    if "steps" in keys:
        for item in keys["steps"].sequence():
            pair = item.sequence()
            if len(pair) != 2:
                raise item.error("each step is [AT, ADD], e.g. [120s, 2]")
            steps.append((read_duration(pair[0]), pair[1].integer(0)))
    return CounterSpec(
        start=keys["start"].integer(0) if "start" in keys else 0,
        steps=tuple(sorted(steps)),
        rate=read_pattern(keys["rate"], RATE_UNIT) if "rate" in keys else None,
    )
