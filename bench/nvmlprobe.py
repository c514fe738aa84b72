"""Inside an exporter process: count what the exporter asks of (fake) NVML, and serve the counts.

``CountingLibrary`` stands in front of a ``FakeNvmlLibrary`` as ``pynvml.nvmlLib``. pynvml looks up
every C symbol with ``getattr`` and caches what it gets, so each symbol is wrapped once; the wrapper
measures the calling thread's CPU time and the wall time spent inside the library. That lets the
harness separate the exporter's own CPU from the CPU the *fake* burns (its Python implementation, and
the busy-wait it uses to inject sub-millisecond latencies), which a real driver would not cost in the
same way. A symbol the fake does not implement answers FunctionNotFound, as an old driver would; such
attempts are counted separately (``missing_calls``), because on a real driver they would be real calls.

Call counts per symbol come from the fake's own ``calls`` counter. Calls whose meaning depends on an
argument (which clock ``nvmlDeviceGetClockInfo`` reads, which direction ``nvmlDeviceGetPcieThroughput``
samples) are also counted per argument (``keyed_calls``), so the like-with-like comparison can tell
the SM clock from the video clock (bench/callsets.py). The driver latency a cycle would cost on a
real GPU is computed from those counts and the scenario's per-call latencies (realistic profile),
plus the per-entry latency of ``nvmlDeviceGetFieldValues``, plus the sampling window of the calls that
block in the driver for a fixed time whatever the latency profile (``BLOCKING_WINDOW_S``).

``ProbeServer`` serves all of it, plus a sampling-cycle counter the launcher bumps, as JSON on a side
port, so the harness can take readings at the edges of a measurement window. Because a window's edges
fall in the middle of cycles (a 64-GPU cycle of nvitop-exporter takes seconds), every cycle end also
records a copy of all counters (``at_cycle_end``): differences between two such copies cover whole
cycles only.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from simulator.fakenvml import FakeNvmlLibrary
from simulator.fakenvml.abi import PCIE_THROUGHPUT_WINDOW_S

FIELD_VALUES_SYMBOL = "nvmlDeviceGetFieldValues"
# Calls that block in the driver for a fixed sampling window, on top of their per-call latency: the
# realistic latency table lists them at 0.0 because the fake always simulates the window (it sleeps
# for it, holding the driver lock), whatever the latency profile. A real driver blocks just as long.
BLOCKING_WINDOW_S: dict[str, float] = {"nvmlDeviceGetPcieThroughput": PCIE_THROUGHPUT_WINDOW_S}
# Symbols whose second argument (after the device handle) selects what they read: counted per value.
KEYED_BY_ARGUMENT = frozenset({"nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetClock",
                               "nvmlDeviceGetPcieThroughput", "nvmlDeviceGetTemperature",
                               "nvmlDeviceGetTemperatureThreshold"})


def keyed(symbol: str, argument: int) -> str:
    """The name a call is counted under per argument: ``nvmlDeviceGetClockInfo[1]``."""
    return f"{symbol}[{argument}]"


def _count_of(arg: Any) -> int:
    value = getattr(arg, "value", arg)
    return int(value) if isinstance(value, int) else 0


class ProbeStats:
    """Counters shared by the wrappers, the cycle hooks and the probe endpoint (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.nvml_thread_cpu_s = 0.0
        self.nvml_wall_s = 0.0
        self.field_entries = 0
        self.missing_calls: Counter[str] = Counter()
        self.keyed_calls: Counter[str] = Counter()
        self.cycles = 0
        self.cycle_thread_cpu_s = 0.0
        self.cycle_wall_s = 0.0
        self.parts: dict[str, float] = {}  # thread CPU of named parts (e.g. nvitop's host metrics)
        self.calls_source: Callable[[], dict[str, int]] = dict  # the fake's call counts, once installed
        self.at_cycle_end: dict[str, Any] = {}

    def add_nvml(self, cpu_s: float, wall_s: float, entries: int = 0) -> None:
        with self._lock:
            self.nvml_thread_cpu_s += cpu_s
            self.nvml_wall_s += wall_s
            self.field_entries += entries

    def add_keyed(self, name: str) -> None:
        with self._lock:
            self.keyed_calls[name] += 1

    def add_missing(self, name: str) -> None:
        with self._lock:
            self.missing_calls[name] += 1

    def add_cycle(self, cpu_s: float, wall_s: float) -> None:
        calls = self.calls_source()
        with self._lock:
            self.cycles += 1
            self.cycle_thread_cpu_s += cpu_s
            self.cycle_wall_s += wall_s
            self.at_cycle_end = {**self._totals(), "calls": calls, "monotonic": time.monotonic()}

    def add_part(self, name: str, cpu_s: float) -> None:
        with self._lock:
            self.parts[name] = self.parts.get(name, 0.0) + cpu_s

    def _totals(self) -> dict[str, Any]:
        return {
            "nvml_thread_cpu_s": self.nvml_thread_cpu_s,
            "nvml_wall_s": self.nvml_wall_s,
            "field_entries": self.field_entries,
            "missing_calls": dict(self.missing_calls),
            "keyed_calls": dict(self.keyed_calls),
            "cycles": self.cycles,
            "cycle_thread_cpu_s": self.cycle_thread_cpu_s,
            "cycle_wall_s": self.cycle_wall_s,
            "parts_thread_cpu_s": dict(self.parts),
        }

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {**self._totals(), "at_cycle_end": dict(self.at_cycle_end)}

    @contextmanager
    def measure_part(self, name: str) -> Iterator[None]:
        started = time.thread_time()
        try:
            yield
        finally:
            self.add_part(name, time.thread_time() - started)


class CountingLibrary:
    """A transparent proxy for the fake NVML library that times every call (see module docstring)."""

    def __init__(self, fake: FakeNvmlLibrary, stats: ProbeStats) -> None:
        self._fake = fake
        self._stats = stats

    def __getattr__(self, name: str) -> Any:
        try:
            target = getattr(self._fake, name)
        except AttributeError:
            if name.startswith("nvml"):
                self._stats.add_missing(name)
            raise
        if not callable(target) or not name.startswith("nvml"):
            return target
        wrapper = self._wrap(name, target)
        setattr(self, name, wrapper)  # later lookups skip __getattr__
        return wrapper

    def _wrap(self, name: str, target: Callable[..., int]) -> Callable[..., int]:
        stats = self._stats
        thread_time = time.thread_time
        perf_counter = time.perf_counter
        is_field_values = name == FIELD_VALUES_SYMBOL
        is_keyed = name in KEYED_BY_ARGUMENT

        def call(*args: Any) -> int:
            if is_keyed and len(args) > 1:
                stats.add_keyed(keyed(name, _count_of(args[1])))
            cpu = thread_time()
            wall = perf_counter()
            try:
                return target(*args)
            finally:
                entries = _count_of(args[1]) if is_field_values and len(args) > 1 else 0
                stats.add_nvml(thread_time() - cpu, perf_counter() - wall, entries)

        call.__name__ = name
        return call


def put_in_front(fake: FakeNvmlLibrary, stats: ProbeStats) -> CountingLibrary:
    """Put the counting proxy in front of ``fake``, which must already be installed as ``pynvml.nvmlLib``."""
    import pynvml  # noqa: PLC0415 - imported late like the exporter does

    proxy = CountingLibrary(fake, stats)
    stats.calls_source = lambda: _copy_counter(fake.calls)
    with pynvml.libLoadLock:
        pynvml.nvmlLib = proxy
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return proxy


def _copy_counter(counter: Counter[str]) -> dict[str, int]:
    # The fake increments under its own lock; copying may race with a new key being added.
    for _ in range(20):
        try:
            return dict(counter)
        except RuntimeError:
            time.sleep(0.001)
    return dict(counter)


def driver_latency_s(calls: dict[str, int], field_entries: int, latency: dict[str, float],
                     field_value_latency: float) -> float:
    """Seconds a real driver would spend answering these calls (the fake's realistic profile).

    Each call costs its per-call latency plus its fixed sampling window where it has one
    (``BLOCKING_WINDOW_S``): ``nvmlDeviceGetPcieThroughput`` blocks 20 ms however fast the driver is.
    """
    return sum(count * (latency.get(symbol, 0.0) + BLOCKING_WINDOW_S.get(symbol, 0.0))
               for symbol, count in calls.items()) + field_entries * field_value_latency


class ProbeServer:
    """Serves ``GET /`` -> JSON of the counters; one daemon thread, idle between readings."""

    def __init__(self, port: int, stats: ProbeStats, fake: Callable[[], FakeNvmlLibrary | None]) -> None:
        self.stats = stats
        self._fake = fake
        probe = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = json.dumps(probe.reading()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = http.server.HTTPServer(("127.0.0.1", port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="bench-probe", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def reading(self) -> dict[str, Any]:
        fake = self._fake()
        reading = self.stats.snapshot()
        calls = _copy_counter(fake.calls) if fake is not None else {}
        latency = dict(fake.scenario.latency) if fake is not None else {}
        per_field = fake.scenario.field_value_latency if fake is not None else 0.0
        reading.update({
            "pid": os.getpid(),
            "installed": fake is not None,
            "calls": calls,
            "driver_latency_s": driver_latency_s(calls, reading["field_entries"], latency, per_field),
            "latency": latency,
            "field_value_latency": per_field,
            "monotonic": time.monotonic(),
            "threads": threading.active_count(),
        })
        return reading
