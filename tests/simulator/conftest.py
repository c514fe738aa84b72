"""Fixtures for driving pynvml's real wrappers through the fake NVML library."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pynvml
import pytest

from simulator.fakenvml import FakeNvmlLibrary
from simulator.scenario import Scenario, load_scenario, parse_scenario


class FixedClock:
    """A scenario clock that only moves when the test says so."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def scenario_from(text: str, name: str = "inline") -> Scenario:
    return parse_scenario(text, f"{name}.yaml", name)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock()


@pytest.fixture
def nvml(clock: FixedClock) -> Iterator[Callable[..., FakeNvmlLibrary]]:
    """Install a fake for a scenario (built-in name, YAML text or Scenario) with the fixed clock.

    Teardown shuts pynvml down, releases hangs and detaches the fake, so no state leaks.
    """
    fakes: list[FakeNvmlLibrary] = []

    def install(scenario: Scenario | str, *, init: bool = True) -> FakeNvmlLibrary:
        if isinstance(scenario, str):
            scenario = scenario_from(scenario) if "\n" in scenario else load_scenario(scenario)
        fake = FakeNvmlLibrary(scenario, clock)
        fake.install()
        fakes.append(fake)
        if init:
            pynvml.nvmlInit()
        return fake

    yield install
    for fake in fakes:
        fake.release_hangs()
        while pynvml.nvmlLib is fake and pynvml._nvmlLib_refcount > 0:
            pynvml.nvmlShutdown()
        fake.uninstall()
