"""The fake ``libnvidia-ml.so`` object: construction, call dispatch, init/shutdown, handles.

The readings, MIG, GPM, event and fault behaviour live in mixins of their own modules; this class
assembles them and turns every registered C symbol into an attribute (see the package docstring).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pynvml

from simulator.fakenvml.abi import (
    DRIVER_NOT_LOADED,
    ERROR_STRINGS,
    FIXED_WALL_EPOCH,
    HANDLE_BASE,
    HANDLE_STRIDE,
    INVALID_ARGUMENT,
    LIBRARY_NOT_FOUND,
    NOT_FOUND,
    REGISTRY,
    SUCCESS,
    UNINITIALIZED,
    Symbol,
    c_int_value,
    c_symbol,
    check_symbol,
    handle_value,
    pointee,
    precise_wait,
    write_handle,
    write_string,
)
from simulator.fakenvml.device import SimulatedGpu
from simulator.fakenvml.events import EventSet, EventsMixin, FakeEvent
from simulator.fakenvml.faults import ErrorRule, FaultsMixin, HangRule
from simulator.fakenvml.gpm import GpmMixin, GpmSample
from simulator.fakenvml.migdevices import MigMixin
from simulator.fakenvml.processutil import ProcessUtilizationMixin
from simulator.fakenvml.readings import ReadingsMixin
from simulator.patterns import (
    INFINITY,
    Window,
)
from simulator.scenario import (
    NVML_ERROR_CODES,
    Scenario,
    load_scenario,
    parse_pci_bus_id,
)


class FakeNvmlLibrary(ReadingsMixin, ProcessUtilizationMixin, MigMixin, GpmMixin, EventsMixin, FaultsMixin):
    """The fake ``libnvidia-ml.so``: attributes named after C symbols, driven by a Scenario.

    ``clock`` returns scenario seconds since start (default: ``time.monotonic()`` relative to the
    first ``install``, or to construction until then); tests inject a fixed clock for deterministic
    readings. ``wall_epoch`` is the wall time of scenario t=0, used for field-value timestamps
    (default: that start's time with the real clock, a fixed date with an injected clock so output
    is byte-identical).
    """

    def __init__(self, scenario: Scenario, clock: Callable[[], float] | None = None, *,
                 wall_epoch: float | None = None) -> None:
        self.scenario = scenario
        self._started = time.monotonic()
        # With the real clock, scenario time restarts when the exporter first loads the library
        # (install): t=0 is the moment a driver would become visible to it, so the time the process
        # spends importing and wiring before that (seconds on a loaded machine) cannot swallow the
        # scenario's early events. Nothing can call the library before install.
        self._restart_at_install = clock is None
        self._wall_epoch_given = wall_epoch is not None
        if clock is None:
            self._clock: Callable[[], float] = lambda: time.monotonic() - self._started
            self._epoch = time.time() if wall_epoch is None else wall_epoch
        else:
            self._clock = clock
            self._epoch = FIXED_WALL_EPOCH if wall_epoch is None else wall_epoch
        self.calls: Counter[str] = Counter()
        # _state_lock guards call counters and fault tables and is never held while sleeping;
        # _driver_lock is the simulated driver's lock: every call's work (and its injected
        # latency) runs under it, so calls serialize like on a real driver.
        self._state_lock = threading.Lock()
        self._driver_lock = threading.Lock()
        self._release = threading.Event()
        self._refcount = 0
        self._ever_initialized = False
        self._init_attempts = 0
        self._init_failure = scenario.library.init_failure
        self._latency: dict[str, float] = dict(scenario.latency)
        self._field_latency = scenario.field_value_latency
        self._gpus = tuple(SimulatedGpu(spec, scenario.seed) for spec in scenario.gpus)
        self._handles = {HANDLE_BASE + gpu.index * HANDLE_STRIDE: gpu for gpu in self._gpus}
        self._by_uuid = {gpu.spec.uuid: gpu for gpu in self._gpus}
        self._gpm_samples: dict[int, GpmSample | None] = {}  # allocated GPM sample buffers
        self._gpm_next_sample = 0
        self.gpm_short_intervals = 0  # nvmlGpmMetricsGet calls on samples < 100 ms apart (NVML: too close)
        self._by_pci = {(g.spec.pci_domain, g.spec.pci_bus, g.spec.pci_device): g for g in self._gpus}
        self._driver_loaded = True
        self._lost = [Window(INFINITY)] * len(self._gpus)
        for lost in scenario.lost:
            self._lost[lost.gpu] = Window(min(self._lost[lost.gpu].start, lost.at), lost.until)
        self._errors: dict[str, list[ErrorRule]] = {}
        self._field_errors: list[ErrorRule] = []
        for fault in scenario.errors:
            self._add_error_rule(fault)
        self._hangs: list[HangRule] = [
            HangRule(h.symbol, h.gpu, h.at, h.at + h.duration, h.holds_driver_lock, h.error)
            for h in scenario.hangs
        ]
        # NVML events: sets by handle value, scheduled scenario Xids, and a condition that wakes waiters.
        self._events = threading.Condition()
        self._event_sets: dict[int, EventSet] = {}
        self._next_event_set = 0
        self._scheduled: tuple[FakeEvent, ...] = tuple(FakeEvent.xid(spec) for spec in scenario.xid_events)
        self._wait_generation = 0
        for symbol in REGISTRY:
            if symbol.name not in scenario.library.missing_symbols:
                setattr(self, symbol.name, self._entry(symbol))

    @property
    def devices(self) -> tuple[SimulatedGpu, ...]:
        """The simulated GPUs by NVML index (for tests that compare with the model)."""
        return self._gpus

    def elapsed(self) -> float:
        """Scenario time in seconds."""
        return self._clock()

    def wall_time(self, t: float) -> float:
        """The wall-clock time (seconds since the epoch) of scenario time ``t``."""
        return self._epoch + t

    def install(self) -> None:
        """Make pynvml use this library: ``pynvml.nvmlInit()`` then talks to the fake."""
        if self._restart_at_install:
            self._restart_at_install = False
            self._started = time.monotonic()
            if not self._wall_epoch_given:
                self._epoch = time.time()
        with pynvml.libLoadLock:
            pynvml.nvmlLib = self
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlLib_refcount = 0

    def uninstall(self) -> None:
        """Detach from pynvml (a later ``nvmlInit`` would load the real library again)."""
        with pynvml.libLoadLock:
            if pynvml.nvmlLib is self:
                pynvml.nvmlLib = None
                pynvml._nvmlLib_refcount = 0
            pynvml._nvmlGetFunctionPointer_cache.clear()

    def reset_calls(self) -> None:
        with self._state_lock:
            self.calls.clear()

    def total_calls(self) -> int:
        with self._state_lock:
            return sum(self.calls.values())

    def set_latency(self, symbol: str, seconds: float) -> None:
        """Inject ``seconds`` of real latency into every call of ``symbol`` (0 removes it).

        ``"field_value"`` sets the extra latency per requested field of nvmlDeviceGetFieldValues.
        """
        if seconds < 0:
            raise ValueError("latency must be zero or positive")
        with self._state_lock:
            if symbol == "field_value":
                self._field_latency = seconds
                return
            check_symbol(symbol)
            if seconds:
                self._latency[symbol] = seconds
            else:
                self._latency.pop(symbol, None)

    def _entry(self, symbol: Symbol) -> Callable[..., int]:
        name = symbol.name
        implementation = getattr(self, symbol.method)
        calls = self.calls
        state_lock = self._state_lock

        if symbol.takes_device:
            def call_device(*args: Any) -> int:
                with state_lock:
                    calls[name] += 1
                t = self._clock()
                if not self._refcount:
                    return UNINITIALIZED
                gpu = self._handles.get(handle_value(args[0]) or 0) if args else None
                if gpu is None:
                    return self._call_mig_device(name, t, args)
                return self._dispatch(name, gpu.index, t, implementation, (gpu, t, *args[1:]))

            call_device.__name__ = name
            return call_device

        blocking = symbol.blocking

        def call(*args: Any) -> int:
            with state_lock:
                calls[name] += 1
            t = self._clock()
            return self._dispatch(name, None, t, implementation, (t, *args), blocking=blocking)

        call.__name__ = name
        return call

    def _dispatch(self, name: str, gpu: int | None, t: float, implementation: Callable[..., int],  # noqa: PLR0917
                  args: tuple[Any, ...], blocking: bool = False) -> int:
        after_hang: int | None = None
        if self._hangs:
            after_hang = self._maybe_hang(name, gpu, t)
        latency = self._latency.get(name, 0.0)
        with self._driver_lock:
            if latency:
                precise_wait(latency)
            code = self._system_gate(name, t) if gpu is None else self._device_gate(name, gpu, t)
            if code:
                return code
            if after_hang:
                return after_hang
            if not blocking:
                return implementation(*args)
        return implementation(*args)  # a blocking call (event wait) must not stall other callers

    def _gpu_for_index(self, index: int) -> Any:
        return self._gpus[index] if 0 <= index < len(self._gpus) else None

    def _init(self, t: float) -> int:
        if self.scenario.library.missing:
            return LIBRARY_NOT_FOUND
        if not self._driver_loaded:
            return DRIVER_NOT_LOADED
        self._init_attempts += 1
        failure = self._init_failure
        if failure is not None:
            failing_calls = failure.calls is not None and self._init_attempts <= failure.calls
            failing_time = failure.until is not None and t < failure.until
            if failing_calls or failing_time:
                return failure.code
        self._refcount += 1
        self._ever_initialized = True
        return SUCCESS

    @c_symbol("nvmlInitWithFlags")
    def _impl_init_with_flags(self, t: float, flags: Any) -> int:
        return self._init(t)

    @c_symbol("nvmlInit_v2")
    def _impl_init(self, t: float) -> int:
        return self._init(t)

    @c_symbol("nvmlShutdown")
    def _impl_shutdown(self, t: float) -> int:
        if not self._ever_initialized:
            return UNINITIALIZED
        # nvml.h: extra shutdowns are not an error, for backwards compatibility.
        self._refcount = max(0, self._refcount - 1)
        return SUCCESS

    @c_symbol("nvmlErrorString")
    def _impl_error_string(self, t: float, code: Any) -> bytes:
        """Returns bytes, as ``restype = c_char_p`` makes ctypes do; works without init."""
        number = c_int_value(code)
        text = ERROR_STRINGS.get(number)
        if text is None:
            names = [n for n, c in NVML_ERROR_CODES.items() if c == number and not n.startswith("NVML_")]
            text = names[0] if names else "Unknown Error"
        return text.encode()

    def _system(self, t: float) -> int:
        return SUCCESS if self._refcount else UNINITIALIZED

    @c_symbol("nvmlSystemGetDriverVersion")
    def _impl_driver_version(self, t: float, buffer: Any, length: Any) -> int:
        return self._system(t) or write_string(buffer, length, self.scenario.driver_version)

    @c_symbol("nvmlSystemGetNVMLVersion")
    def _impl_nvml_version(self, t: float, buffer: Any, length: Any) -> int:
        return self._system(t) or write_string(buffer, length, self.scenario.nvml_version)

    @c_symbol("nvmlSystemGetCudaDriverVersion")
    def _impl_cuda_version(self, t: float, out: Any) -> int:
        code = self._system(t)
        if not code:
            pointee(out).value = self.scenario.cuda_driver_version
        return code

    @c_symbol("nvmlSystemGetCudaDriverVersion_v2")
    def _impl_cuda_version_v2(self, t: float, out: Any) -> int:
        code = self._system(t)
        if not code:
            pointee(out).value = self.scenario.cuda_driver_version
        return code

    @c_symbol("nvmlDeviceGetCount_v2")
    def _impl_count(self, t: float, out: Any) -> int:
        code = self._system(t)
        if not code:
            pointee(out).value = len(self._gpus)
        return code

    def _give_handle(self, name: str, gpu: SimulatedGpu | None, t: float, out: Any, missing: int) -> int:
        if not self._refcount:
            return UNINITIALIZED
        if gpu is None:
            return missing
        code = self._device_gate(name, gpu.index, t)
        if code:
            return code
        write_handle(out, HANDLE_BASE + gpu.index * HANDLE_STRIDE)
        return SUCCESS

    @c_symbol("nvmlDeviceGetHandleByIndex_v2")
    def _impl_handle_by_index(self, t: float, index: Any, out: Any) -> int:
        gpu = self._gpu_for_index(c_int_value(index))
        return self._give_handle("nvmlDeviceGetHandleByIndex_v2", gpu, t, out, INVALID_ARGUMENT)

    @c_symbol("nvmlDeviceGetHandleByUUID")
    def _impl_handle_by_uuid(self, t: float, uuid: Any, out: Any) -> int:
        raw = getattr(uuid, "value", uuid)
        text = raw.decode() if isinstance(raw, bytes) else str(raw)
        if text.startswith("MIG-"):  # current drivers resolve MIG UUIDs to MIG device handles
            return self._give_mig_handle(text, t, out)
        return self._give_handle("nvmlDeviceGetHandleByUUID", self._by_uuid.get(text), t, out, NOT_FOUND)

    @c_symbol("nvmlDeviceGetHandleByPciBusId_v2")
    def _impl_handle_by_pci(self, t: float, bus_id: Any, out: Any) -> int:
        raw = getattr(bus_id, "value", bus_id)
        try:
            key = parse_pci_bus_id(raw.decode() if isinstance(raw, bytes) else str(raw))
        except ValueError:
            return INVALID_ARGUMENT
        return self._give_handle("nvmlDeviceGetHandleByPciBusId_v2", self._by_pci.get(key), t, out, NOT_FOUND)


IMPLEMENTED_SYMBOLS: frozenset[str] = frozenset(symbol.name for symbol in REGISTRY)


@contextmanager
def installed(scenario: Scenario | str, clock: Callable[[], float] | None = None, *,
              wall_epoch: float | None = None) -> Iterator[FakeNvmlLibrary]:
    """Install a fake for the ``with`` block (tests): pynvml is detached again afterwards,
    hung calls are released, and pynvml's init refcount is reset."""
    loaded = load_scenario(scenario) if isinstance(scenario, str) else scenario
    fake = FakeNvmlLibrary(loaded, clock, wall_epoch=wall_epoch)
    fake.install()
    try:
        yield fake
    finally:
        fake.release_hangs()
        fake.uninstall()

