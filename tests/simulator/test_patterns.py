"""Time patterns: the values a scenario describes, deterministic for a (seed, GPU, channel) key."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from simulator.patterns import (
    Constant,
    CounterSpec,
    Flag,
    Integral,
    Jittered,
    Noise,
    Ramp,
    Sine,
    Square,
    Steps,
    Window,
    channel_key,
)

KEY = channel_key(7, 0, "load")


def test_sine_starts_low_and_peaks_at_half_period() -> None:
    sine = Sine(10.0, 90.0, 60.0)
    assert sine.at(0.0, KEY) == pytest.approx(10.0)
    assert sine.at(30.0, KEY) == pytest.approx(90.0)
    assert sine.at(15.0, KEY) == pytest.approx(50.0)
    assert Sine(10.0, 90.0, 60.0, phase=30.0).at(0.0, KEY) == pytest.approx(90.0)


def test_square_is_high_for_its_duty_fraction() -> None:
    square = Square(0.0, 100.0, 10.0, duty=0.3)
    assert [square.at(t, KEY) for t in (0.0, 2.9, 3.0, 9.9, 10.0)] == [100.0, 100.0, 0.0, 0.0, 100.0]


def test_steps_hold_until_the_next_and_can_repeat() -> None:
    steps = Steps(((0.0, 5.0), (30.0, 95.0), (90.0, 40.0)))
    assert [steps.at(t, KEY) for t in (0.0, 29.9, 30.0, 89.0, 500.0)] == [5.0, 5.0, 95.0, 95.0, 40.0]
    repeating = Steps(((0.0, 1.0), (5.0, 2.0)), repeat=10.0)
    assert [repeating.at(t, KEY) for t in (4.0, 6.0, 14.0, 16.0)] == [1.0, 2.0, 1.0, 2.0]


def test_ramp_holds_before_and_after_or_saws() -> None:
    ramp = Ramp(0.0, 100.0, duration=100.0, start=10.0)
    assert [ramp.at(t, KEY) for t in (0.0, 10.0, 60.0, 110.0, 500.0)] == [0.0, 0.0, 50.0, 100.0, 100.0]
    saw = Ramp(0.0, 100.0, duration=100.0, repeat=True)
    assert saw.at(150.0, KEY) == pytest.approx(50.0)


def test_noise_stays_in_range_is_smooth_and_depends_on_the_key() -> None:
    noise = Noise(20.0, 60.0, period=4.0)
    values = [noise.at(t / 10.0, KEY) for t in range(2000)]
    assert all(20.0 <= value <= 60.0 for value in values)
    assert max(abs(a - b) for a, b in itertools.pairwise(values)) < 4.0  # no jumps within 0.1 s
    assert max(values) - min(values) > 20.0  # it does move
    other_gpu = channel_key(7, 1, "load")
    assert [noise.at(t, other_gpu) for t in range(50)] != [noise.at(t, KEY) for t in range(50)]
    assert [noise.at(t, KEY) for t in range(50)] == [noise.at(t, KEY) for t in range(50)]


def test_jitter_is_bounded_around_the_base() -> None:
    jittered = Jittered(Constant(50.0), amplitude=3.0, period=1.0)
    values = [jittered.at(t / 7.0, KEY) for t in range(1000)]
    assert all(47.0 <= value <= 53.0 for value in values)
    assert len(set(values)) > 100


def test_channel_keys_do_not_depend_on_pythons_hash_salt() -> None:
    code = "from simulator.patterns import channel_key; print(channel_key(7, 3, 'temperature'))"
    outputs = {
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.getcwd()}).stdout
        for seed in ("1", "2")
    }
    assert outputs == {f"{channel_key(7, 3, 'temperature')}\n"}


def test_windows_and_flags() -> None:
    window = Window(40.0, 55.0, every=300.0)
    assert [window.active(t) for t in (39.0, 40.0, 54.9, 55.0, 340.0, 356.0)] == [
        False, True, True, False, True, False]
    assert Flag((Window(10.0),)).at(9.0) is False
    assert Flag((Window(10.0),)).at(1e9) is True
    assert Flag().at(5.0) is False


def test_counter_steps() -> None:
    counter = CounterSpec(start=3, steps=((10.0, 2), (20.0, 1)))
    assert [counter.stepped(t) for t in (0.0, 10.0, 19.0, 20.0)] == [3, 5, 5, 6]


def test_integral_of_a_constant_rate_is_exact() -> None:
    integral = Integral(lambda t: 2.5)
    assert integral.value(0.0) == 0.0
    assert integral.value(10.0) == pytest.approx(25.0)
    assert integral.value(10.5) == pytest.approx(26.25)


def test_integral_is_monotonic_and_independent_of_query_order() -> None:
    def rate(t: float) -> float:
        return Noise(0.0, 100.0, 3.0).at(t, KEY)

    forward = Integral(rate, checkpoint=16)
    times = [t * 0.7 for t in range(1500)]
    values = [forward.value(t) for t in times]
    assert values == sorted(values)
    backward = Integral(rate, checkpoint=16)
    assert [backward.value(t) for t in reversed(times)] == list(reversed(values))
    jumping = Integral(rate, checkpoint=16)
    for t in (900.0, 3.0, 500.5, 1000.0, 0.1):
        assert jumping.value(t) == forward.value(t)


def test_integral_ignores_negative_rates() -> None:
    integral = Integral(lambda t: -5.0)
    assert integral.value(100.0) == 0.0
