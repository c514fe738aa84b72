"""Measuring the real latency of every NVML call the sampler makes, as the simulator's measured-latency file.

A timing proxy wraps the loaded ``libnvidia-ml`` the way the simulator's fake library replaces it
(``pynvml.nvmlLib``), so every C call pynvml makes is timed under its C symbol name (the names the
fake and ``REALISTIC_LATENCY_S`` use). The exporter's own Sampler runs with the built-in default
counters, process lists every cycle, and the event registration the Xid watcher does, for
``CYCLES`` cycles. The per-entry cost of ``nvmlDeviceGetFieldValues`` is the slope between a
one-field and an all-fields batch.

Output: ``nvml-latency.json`` (format ``gpu-pod-exporter/nvml-latency/v1``); a scenario replays it
with ``latency_profile: <path>/nvml-latency.json``.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pynvml

from exporter.metrics.counters import load_counters
from exporter.nvml.client import NvmlClient
from exporter.nvml.events import REQUESTED_EVENT_TYPES
from exporter.nvml.sampler import Sampler
from simulator.latency_file import LATENCY_FORMAT, load_latency_file
from simulator.scenario import NVML_SYMBOLS, REALISTIC_LATENCY_S, load_scenario

CYCLES = 30
FIELD_BATCH_REPEATS = 50


class _Timed:
    """One C function: calls are timed; attribute writes (pynvml sets ``restype``) reach the real function."""

    def __init__(self, name: str, function: Any, record: Callable[[str, float], None]) -> None:
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_function", function)
        object.__setattr__(self, "_record", record)

    def __call__(self, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._function(*args)
        finally:
            self._record(self._name, time.perf_counter() - started)

    def __getattr__(self, key: str) -> Any:
        return getattr(self._function, key)

    def __setattr__(self, key: str, value: Any) -> None:
        setattr(self._function, key, value)


class TimingLibrary:
    """Stands in for the loaded ``libnvidia-ml`` and records the duration of every call by C symbol."""

    def __init__(self, library: Any) -> None:
        self._library = library
        self.samples: dict[str, list[float]] = defaultdict(list)

    def record(self, name: str, seconds: float) -> None:
        self.samples[name].append(seconds)

    def __getattr__(self, name: str) -> Any:
        return _Timed(name, getattr(self._library, name), self.record)


def _install(library: Any) -> None:
    with pynvml.libLoadLock:
        pynvml.nvmlLib = library
        pynvml._nvmlGetFunctionPointer_cache.clear()


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))],
            "max": ordered[-1], "calls": len(ordered)}


def _field_value_cost(sampler: Sampler) -> tuple[float, float] | None:
    """(per call, per entry) seconds of nvmlDeviceGetFieldValues, from a 1-field and an N-field batch."""
    keys = list(sampler.plan.field_keys)
    inventory = sampler.inventory
    if len(keys) < 2 or inventory is None or not inventory.devices:
        return None
    handle = inventory.devices[0].handle
    timings: dict[int, list[float]] = {1: [], len(keys): []}
    for _ in range(FIELD_BATCH_REPEATS):
        for size, durations in timings.items():
            started = time.perf_counter()
            pynvml.nvmlDeviceGetFieldValues(handle, keys[:size])
            durations.append(time.perf_counter() - started)
    one, many = statistics.median(timings[1]), statistics.median(timings[len(keys)])
    per_entry = max(0.0, (many - one) / (len(keys) - 1))
    return max(0.0, one - per_entry), per_entry


def measure(output_dir: Path, cycles: int = CYCLES) -> Path:
    """Time the sampler's NVML calls on whatever library pynvml loads (or has installed); write the file."""
    pynvml.nvmlInit()
    real = pynvml.nvmlLib
    timing = TimingLibrary(real)
    _install(timing)
    try:
        counters = load_counters(None)
        sampler = Sampler(counters.field_specs(), 0.1, process_interval_s=0.0)
        assert sampler.initialise(), sampler.snapshot.status.nvml_error
        for _ in range(cycles):
            sampler.run_cycle()
            time.sleep(0.12)  # GPM samples must be more than 100 ms apart, as in a real collect interval
        inventory = sampler.inventory
        assert inventory is not None
        _register_events(inventory.devices)
        field_cost = _field_value_cost(sampler)
        status = sampler.snapshot.status
        model = inventory.devices[0].identity.model if inventory.devices else ""
    finally:
        _install(real)
    document: dict[str, Any] = {
        "format": LATENCY_FORMAT,
        "measured_on": {"model": model, "gpus": status.device_count, "driver_version": status.driver_version,
                        "nvml_version": status.nvml_version, "date": time.strftime("%Y-%m-%d"), "cycles": cycles,
                        "counters": "built-in default-counters.csv, process lists every cycle"},
        "latency_seconds": {name: _summary(values) for name, values in sorted(timing.samples.items())},
    }
    if field_cost is not None:
        per_call, per_entry = field_cost
        document["field_value_seconds_per_entry"] = per_entry
        document["latency_seconds"]["nvmlDeviceGetFieldValues"]["median"] = per_call
    path = output_dir / "nvml-latency.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def _register_events(devices: Any) -> None:
    """What the Xid watcher does at start: one event set, every GPU registered for what it supports."""
    nvml = NvmlClient()
    event_set = nvml.call(pynvml.nvmlEventSetCreate)
    try:
        for device in devices:
            supported = int(nvml.call(pynvml.nvmlDeviceGetSupportedEventTypes, device.handle))
            if REQUESTED_EVENT_TYPES & supported:
                nvml.call(pynvml.nvmlDeviceRegisterEvents, device.handle, REQUESTED_EVENT_TYPES & supported,
                          event_set)
        with contextlib.suppress(pynvml.NVMLError_Timeout):  # the idle answer
            nvml.call(pynvml.nvmlEventSetWait_v2, event_set, 1)
    finally:
        nvml.call(pynvml.nvmlEventSetFree, event_set)


def check_file(path: Path) -> None:
    """The simulator loads the file, and the fake library implements every symbol the sampler called."""
    measured = load_latency_file(path, NVML_SYMBOLS)
    assert not measured.ignored, f"the sampler called symbols the fake library lacks: {measured.ignored}"
    comparison = {name: {"measured": measured.per_call[name], "estimate": REALISTIC_LATENCY_S.get(name)}
                  for name in sorted(measured.per_call)}
    (path.parent / "nvml-latency-vs-estimates.json").write_text(json.dumps(comparison, indent=2) + "\n",
                                                                encoding="utf-8")
    scenario_path = path.parent / "measured-latency.yaml"
    scenario_path.write_text(f"# 8 x H100 replaying the NVML latencies of {path.name}\n"
                             "description: measured NVML latencies\ngpu_count: 8\n"
                             f"gpu_defaults: {{model: H100-SXM5-80GB}}\nlatency_profile: {path.name}\n",
                             encoding="utf-8")
    scenario = load_scenario(str(scenario_path))
    for name, seconds in measured.per_call.items():
        assert scenario.latency.get(name, 0.0) == seconds
