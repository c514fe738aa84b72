"""Reading a scenario's YAML nodes with their line numbers: durations, optional keys, value patterns,
time windows, flags and counters."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import NamedTuple, TypeVar

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


# Every key a pattern mapping may hold, in the order ``unknown_key`` suggests them.
_PATTERN_MAPPING_KEYS = ("pattern", "value", "low", "high", "period", "phase", "duty", "steps", "every",
                         "from", "to", "duration", "start", "repeat", "jitter", "jitter_period")
_ANY_PATTERN_KEYS = ("pattern", "jitter", "jitter_period")  # every kind takes these


def _level(item: YamlValue, unit: Unit) -> float:
    """A level in ``unit`` at ``item``: a value outside the unit's range is a mistake in the scenario,
    not something the simulated GPU could report."""
    number = float(item.convert(unit.parse))
    if not unit.minimum <= number <= unit.maximum:
        raise item.error(f"{item.scalar()!r} is out of range: expected {unit.describe}")
    return number


class _PatternKeys:
    """The keys of one pattern mapping, read in the pattern's unit: each kind's builder names the keys
    it reads and this says how (levels range-checked, periods positive, offsets defaulting to zero)."""

    def __init__(self, keys: Mapping[str, YamlValue], unit: Unit) -> None:
        self.keys = keys
        self.unit = unit

    def level(self, name: str) -> float:
        return _level(self.keys[name], self.unit)

    def period(self, name: str, default: float) -> float:
        """A repeating length: zero or negative would divide by zero or run time backwards."""
        if name not in self.keys:
            return default
        seconds = read_duration(self.keys[name])
        if seconds <= 0:
            raise self.keys[name].error("must be greater than zero")
        return seconds

    def offset(self, name: str) -> float:
        """A shift in time (a phase, a start), zero when not given."""
        return read_duration(self.keys[name]) if name in self.keys else 0.0


def _constant(keys: _PatternKeys) -> Pattern:
    return Constant(keys.level("value"))


def _sine(keys: _PatternKeys) -> Pattern:
    return Sine(keys.level("low"), keys.level("high"), keys.period("period", 1.0), keys.offset("phase"))


def _square(keys: _PatternKeys) -> Pattern:
    duty = keys.keys["duty"].number(0.0, 1.0) if "duty" in keys.keys else 0.5
    return Square(keys.level("low"), keys.level("high"), keys.period("period", 1.0), duty, keys.offset("phase"))


def _noise(keys: _PatternKeys) -> Pattern:
    return Noise(keys.level("low"), keys.level("high"), keys.period("period", 5.0))


def _ramp(keys: _PatternKeys) -> Pattern:
    return Ramp(keys.level("from"), keys.level("to"), keys.period("duration", 1.0), keys.offset("start"),
                keys.keys["repeat"].boolean() if "repeat" in keys.keys else False)


def _steps(keys: _PatternKeys) -> Pattern:
    """``steps: [[AT, VALUE], ...]``: the times must increase, or which step holds would be ambiguous."""
    points: list[tuple[float, float]] = []
    for item in keys.keys["steps"].sequence():
        pair = item.sequence()
        if len(pair) != 2:
            raise item.error("each step is [AT, VALUE], e.g. [30s, 95]")
        at = read_duration(pair[0])
        if points and at <= points[-1][0]:
            raise pair[0].error("step times must increase")
        points.append((at, _level(pair[1], keys.unit)))
    if not points:
        raise keys.keys["steps"].error("needs at least one [AT, VALUE] step")
    return Steps(tuple(points), keys.period("every", 0.0) if "every" in keys.keys else None)


class _PatternKind(NamedTuple):
    """What one ``pattern: KIND`` takes, what it cannot do without, and how it is built."""

    takes: tuple[str, ...]
    needs: tuple[str, ...]
    build: Callable[[_PatternKeys], Pattern]


_PATTERNS: Mapping[str, _PatternKind] = {
    "constant": _PatternKind(("value",), ("value",), _constant),
    "sine": _PatternKind(("low", "high", "period", "phase"), ("low", "high", "period"), _sine),
    "square": _PatternKind(("low", "high", "period", "duty", "phase"), ("low", "high", "period"), _square),
    "steps": _PatternKind(("steps", "every"), ("steps",), _steps),
    "ramp": _PatternKind(("from", "to", "duration", "start", "repeat"), ("from", "to", "duration"), _ramp),
    "noise": _PatternKind(("low", "high", "period"), ("low", "high"), _noise),
}


def read_pattern(value: YamlValue, unit: Unit) -> Pattern:
    """A value pattern in ``unit``: a plain level (constant) or ``{pattern: KIND, ...}``, optionally
    with jitter on top."""
    if not value.is_mapping():
        return Constant(_level(value, unit))
    keys = value.mapping(_PATTERN_MAPPING_KEYS)
    kind = _pattern_kind(value, keys)
    pattern_keys = _PatternKeys(keys, unit)
    return _with_jitter(kind.build(pattern_keys), pattern_keys)


def _pattern_kind(value: YamlValue, keys: Mapping[str, YamlValue]) -> _PatternKind:
    """The kind a pattern mapping names, once its keys are known to fit it: a key of another kind
    would be silently ignored otherwise, so it is an error naming what this kind takes."""
    if "pattern" not in keys:
        raise value.error(f"a pattern mapping needs 'pattern: KIND' (known: {', '.join(PATTERN_KINDS)})")
    name = keys["pattern"].string()
    if name not in _PATTERNS:
        raise keys["pattern"].error(f"unknown pattern {name!r} (known: {', '.join(PATTERN_KINDS)})",
                                    path=value.path)
    kind = _PATTERNS[name]
    for key, item in keys.items():
        if key not in (*kind.takes, *_ANY_PATTERN_KEYS):
            raise item.error(f"'{key}' does not apply to pattern {name!r} "
                             f"(it takes: {', '.join(kind.takes)}, jitter, jitter_period)")
    for key in kind.needs:
        if key not in keys:
            raise value.error(f"pattern {name!r} needs '{key}'")
    return kind


def _with_jitter(base: Pattern, keys: _PatternKeys) -> Pattern:
    """``base`` with ``jitter`` (an amplitude in the pattern's unit) added; ``jitter_period`` alone
    would do nothing, so it is refused."""
    if "jitter" in keys.keys:
        amplitude = keys.keys["jitter"].convert(keys.unit.parse)
        if amplitude < 0:
            raise keys.keys["jitter"].error("jitter must be zero or positive")
        return Jittered(base, float(amplitude), keys.period("jitter_period", 2.0))
    if "jitter_period" in keys.keys:
        raise keys.keys["jitter_period"].error("jitter_period needs jitter")
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
