"""Values as deterministic functions of scenario time.

Everything the simulated GPUs report derives from these: a ``Pattern`` gives a level at time
``t`` (utilisation, temperature, a traffic rate), a ``Window`` says whether something is active
(a throttle episode, a pending flag), a ``CounterSpec`` describes a monotonic counter that steps
up at given times or grows at a rate, and ``Integral`` turns a rate into a cumulative total
(energy from power, bytes from a byte rate).

Determinism is the point: a value depends only on the pattern, the scenario time and a ``key``
derived from (scenario seed, GPU index, channel name). Noise comes from a hash of that key, not
from a random generator with hidden state, so two runs with the same fixed clock produce
byte-identical readings regardless of how often or in which order they were queried.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

_MASK64 = (1 << 64) - 1
INFINITY = math.inf


def _splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def channel_key(seed: int, gpu: int, channel: str) -> int:
    """A stable 64-bit key for one value stream (Python's ``hash`` is salted per process)."""
    return _splitmix64((_splitmix64(seed & _MASK64) ^ (gpu * 0x100000001B3)) ^ zlib.crc32(channel.encode()))


def hash_unit(key: int, step: int) -> float:
    """A uniform number in [0, 1) for lattice point ``step`` of stream ``key``."""
    return (_splitmix64((key ^ (step * 0xD1B54A32D192ED03)) & _MASK64) >> 11) * (1.0 / (1 << 53))


def smooth_noise(key: int, x: float) -> float:
    """Value noise in [0, 1): random levels at integer ``x``, smoothly interpolated between."""
    step = math.floor(x)
    frac = x - step
    weight = frac * frac * (3.0 - 2.0 * frac)
    low = hash_unit(key, step)
    return low + (hash_unit(key, step + 1) - low) * weight


class Pattern(Protocol):
    """A level over time. ``key`` seeds any noise the pattern contains."""

    def at(self, t: float, key: int) -> float: ...


@dataclass(frozen=True)
class Constant:
    value: float

    def at(self, t: float, key: int) -> float:
        return self.value


@dataclass(frozen=True)
class Sine:
    """Oscillates between ``low`` and ``high``; starts at ``low`` when ``t + phase`` is 0."""

    low: float
    high: float
    period: float
    phase: float = 0.0

    def at(self, t: float, key: int) -> float:
        middle = (self.low + self.high) / 2.0
        amplitude = (self.high - self.low) / 2.0
        return middle - amplitude * math.cos(2.0 * math.pi * (t + self.phase) / self.period)


@dataclass(frozen=True)
class Square:
    """``high`` for the first ``duty`` fraction of every period, ``low`` for the rest."""

    low: float
    high: float
    period: float
    duty: float = 0.5
    phase: float = 0.0

    def at(self, t: float, key: int) -> float:
        position = ((t + self.phase) % self.period) / self.period
        return self.high if position < self.duty else self.low


@dataclass(frozen=True)
class Steps:
    """A schedule: each ``(at, value)`` holds until the next; optionally repeats every ``repeat``."""

    points: tuple[tuple[float, float], ...]
    repeat: float | None = None

    def at(self, t: float, key: int) -> float:
        if self.repeat:
            t %= self.repeat
        value = self.points[0][1]
        for start, level in self.points:
            if start > t:
                break
            value = level
        return value


@dataclass(frozen=True)
class Ramp:
    """Linear from ``start_value`` to ``end_value`` over ``duration`` beginning at ``start``.

    Holds ``start_value`` before and ``end_value`` after, unless ``repeat`` makes it a sawtooth.
    """

    start_value: float
    end_value: float
    duration: float
    start: float = 0.0
    repeat: bool = False

    def at(self, t: float, key: int) -> float:
        elapsed = t - self.start
        if elapsed < 0:
            return self.start_value
        if self.repeat:
            elapsed %= self.duration
        elif elapsed >= self.duration:
            return self.end_value
        return self.start_value + (self.end_value - self.start_value) * elapsed / self.duration


@dataclass(frozen=True)
class Noise:
    """Smooth seeded noise between ``low`` and ``high``; ``period`` is the time between new levels."""

    low: float
    high: float
    period: float = 5.0

    def at(self, t: float, key: int) -> float:
        return self.low + (self.high - self.low) * smooth_noise(key, t / self.period)


@dataclass(frozen=True)
class Jittered:
    """Any pattern plus seeded noise of +/- ``amplitude`` (changing every ``period`` seconds)."""

    base: Pattern
    amplitude: float
    period: float = 2.0

    def at(self, t: float, key: int) -> float:
        noise = smooth_noise(key ^ 0x5DEECE66D, t / self.period)
        return self.base.at(t, key) + self.amplitude * (2.0 * noise - 1.0)


@dataclass(frozen=True)
class Window:
    """Active on ``[start, end)``; with ``every`` the window repeats with that period."""

    start: float = 0.0
    end: float = INFINITY
    every: float | None = None

    def active(self, t: float) -> bool:
        if t < self.start:
            return False
        if self.every:
            return (t - self.start) % self.every < self.end - self.start
        return t < self.end


ALWAYS = Window()


@dataclass(frozen=True)
class Flag:
    """A boolean over time: true inside any of its windows."""

    windows: tuple[Window, ...] = ()

    def at(self, t: float) -> bool:
        return any(window.active(t) for window in self.windows)


@dataclass(frozen=True)
class CounterSpec:
    """A monotonic integer counter: ``start`` + ``add`` at each step time + floor(integral of ``rate``)."""

    start: int = 0
    steps: tuple[tuple[float, int], ...] = ()
    rate: Pattern | None = None

    def stepped(self, t: float) -> int:
        """The value without the rate part (cheap; exact)."""
        return self.start + sum(add for at, add in self.steps if at <= t)


class Integral:
    """Cumulative integral of a non-negative rate, deterministic for any query order.

    A left Riemann sum on a fixed grid (``step`` seconds) plus the partial last step. The grid
    does not depend on when or how often the value is queried, so the same ``t`` always gives the
    same float, and the result never decreases as ``t`` grows (the rate is clamped at zero).
    Running sums are kept every ``checkpoint`` steps, so a clock that jumps backwards (tests with
    an injected clock) costs at most ``checkpoint`` rate evaluations instead of a rescan from 0.
    Not thread-safe: the fake library calls it under its driver lock.
    """

    def __init__(self, rate: Callable[[float], float], step: float = 1.0, checkpoint: int = 256) -> None:
        self._rate = rate
        self._step = step
        self._checkpoint = checkpoint
        self._index = 0  # grid points summed so far
        self._sum = 0.0
        self._checkpoints = [0.0]  # running sum at index = i * checkpoint

    def _rate_at(self, index: int) -> float:
        return max(0.0, self._rate(index * self._step))

    def value(self, t: float) -> float:
        if t <= 0.0:
            return 0.0
        whole = int(t // self._step)
        if whole < self._index:
            slot = whole // self._checkpoint
            self._index = slot * self._checkpoint
            self._sum = self._checkpoints[slot]
        while self._index < whole:
            self._sum += self._rate_at(self._index) * self._step
            self._index += 1
            slot, offset = divmod(self._index, self._checkpoint)
            if offset == 0 and len(self._checkpoints) == slot:
                self._checkpoints.append(self._sum)
        return self._sum + self._rate_at(whole) * (t - whole * self._step)
