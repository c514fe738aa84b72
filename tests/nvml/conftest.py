"""The fake-NVML fixtures of tests/simulator, shared with the NVML-side tests."""

from __future__ import annotations

from tests.simulator.conftest import clock, nvml

__all__ = ["clock", "nvml"]
