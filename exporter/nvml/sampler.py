"""The sampling loop: one thread reads every GPU at the collect interval and publishes a Snapshot.

Why one thread: NVML calls serialize on the driver's lock (reference nvml.md §5.3), so per-GPU
threads buy nothing and can stall co-located workloads. Why a cached plan: the counters CSV decides
which readings are needed; the plan turns that into the minimal set of NVML queries per GPU (shared
queries run once, field-value readings go into one batched ``nvmlDeviceGetFieldValues`` call), and
readings a GPU does not support are remembered and never asked again.

Failure handling, per the design's failure model:
* a reading that is NotSupported/NoPermission/FunctionNotFound -> omitted for that GPU, logged once,
  listed in ``SamplerStatus.unsupported_fields``;
* a GPU that is lost (GpuIsLost, Unknown, ResetRequired) -> published with ``up=False`` and no
  values, re-probed every ``LOST_REPROBE_S``; the other GPUs keep updating;
* NVML missing or the driver not loaded -> the loop stays alive, retries with exponential backoff,
  and the status says why (``/health`` answers 503 with that reason);
* a hung call -> the thread is stuck inside NVML (it cannot be interrupted), but scrapes are served
  from the last snapshot and the watchdog names the call in flight.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

from exporter.logs import StateLog, get_logger
from exporter.metrics.catalog import CATALOG, FieldSpec, FromFieldRate, FromFieldValue, FromQuery
from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe
from exporter.nvml.inventory import Device, Inventory, discover
from exporter.nvml.queries import IDENTITY_QUERIES, QUERIES, QueryState, decode_field_value
from exporter.snapshot import DeviceReading, GpuProcess, InFlight, SamplerStatus, Snapshot

log = get_logger("sampler")

LOST_REPROBE_S = 30.0
INIT_BACKOFF_INITIAL_S = 1.0
INIT_BACKOFF_MAX_S = 30.0
NO_DEVICES_RETRY_S = 30.0
STALE_INTERVALS = 3


class _DeviceLostError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _NvmlDownError(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SamplingPlan:
    """What to read per GPU, derived once from the enabled counter rows.

    ``dependencies`` are readings other components need every cycle although the CSV does not export
    them: the ``needs`` of enabled rows (the clock-event reasons bitmask behind DCGM_EXP_CLOCK_EVENTS_*)
    and readings a component asks for itself (the GPU health gauge's row-remap and retired-page flags).
    They ride in the same queries and the same batched field call, land in ``DeviceReading.values``
    under their catalog names, and are not listed as unsupported fields (no CSV row asked for them).
    """

    specs: tuple[FieldSpec, ...]
    queries: tuple[str, ...]
    static_queries: tuple[str, ...]
    field_keys: tuple[tuple[int, int], ...]  # (field id, scope id) for the batched call
    dependencies: tuple[FieldSpec, ...] = ()

    @property
    def readings(self) -> tuple[FieldSpec, ...]:
        return (*self.specs, *self.dependencies)

    @classmethod
    def for_specs(cls, specs: Sequence[FieldSpec], dependencies: Sequence[FieldSpec] = ()) -> SamplingPlan:
        served = tuple(spec for spec in specs if spec.read is not None and not spec.is_label)
        wanted = [*dependencies, *(CATALOG.lookup(name) for spec in served for name in spec.needs)]
        extra: list[FieldSpec] = []
        for spec in wanted:
            if spec is not None and spec.read is not None and spec not in served and spec not in extra:
                extra.append(spec)
        queries: list[str] = []
        static: list[str] = []
        fields: list[tuple[int, int]] = []
        for spec in (*served, *extra):
            read = spec.read
            if isinstance(read, FromQuery) and read.query not in IDENTITY_QUERIES:
                target = static if QUERIES[read.query].static else queries
                if read.query not in target:
                    target.append(read.query)
            elif isinstance(read, FromFieldValue):
                if (read.field_id, read.scope_id) not in fields:
                    fields.append((read.field_id, read.scope_id))
            elif isinstance(read, FromFieldRate):
                for field_id in read.field_ids:
                    if (field_id, read.scope_id) not in fields:
                        fields.append((field_id, read.scope_id))
        return cls(specs=served, queries=tuple(queries), static_queries=tuple(static), field_keys=tuple(fields),
                   dependencies=tuple(extra))


@dataclass
class _DeviceState:
    """Mutable per-GPU bookkeeping, owned by the sampling thread only."""

    device: Device
    query_state: QueryState = field(default_factory=QueryState)
    unsupported_queries: set[str] = field(default_factory=set)
    unsupported_fields: set[tuple[int, int]] = field(default_factory=set)
    static_results: dict[str, dict[str, float]] | None = None
    previous_fields: dict[tuple[int, int], tuple[float, float]] = field(default_factory=dict)
    lost_reason: str = ""
    lost_checked_at: float = 0.0
    processes: tuple[GpuProcess, ...] | None = None
    processes_read_at: float = float("-inf")


class Sampler:
    """Owns NVML initialisation and the sampling thread; publishes immutable snapshots."""

    def __init__(
        self,
        specs: Sequence[FieldSpec],
        interval_s: float,
        on_snapshot: Callable[[Snapshot], None] = lambda _snapshot: None,
        *,
        process_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        dependencies: Sequence[FieldSpec] = (),
    ) -> None:
        self.plan = SamplingPlan.for_specs(specs, dependencies)
        self.interval_s = interval_s
        self.process_interval_s = process_interval_s  # None: process lists are not read
        self._on_snapshot = on_snapshot
        self._clock = clock
        self._wall = wall_clock
        self.nvml = NvmlClient(clock)
        self._states: list[_DeviceState] = []
        self._inventory: Inventory | None = None
        self._snapshot = Snapshot(status=SamplerStatus(nvml_up=False, nvml_error="NVML not initialised yet"))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = StateLog(log)
        self._cycles = 0

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    @property
    def inventory(self) -> Inventory | None:
        return self._inventory

    def in_flight(self) -> InFlight | None:
        """The NVML call the sampling thread is inside right now, if any (for the watchdog)."""
        return self.nvml.in_flight()

    def _run(self) -> None:
        backoff = INIT_BACKOFF_INITIAL_S
        while not self._stop.is_set():
            if self._inventory is None:
                if self.initialise():
                    backoff = INIT_BACKOFF_INITIAL_S
                    continue
                self._stop.wait(backoff)
                backoff = min(backoff * 2, INIT_BACKOFF_MAX_S)
                continue
            if not self._states:
                # NVML works but found no GPU: look again later (a driver install may still be running).
                self._stop.wait(NO_DEVICES_RETRY_S)
                self._inventory = None
                continue
            started = self._clock()
            self.run_cycle()
            elapsed = self._clock() - started
            if elapsed > self.interval_s:
                self._log.once("overrun", logging.WARNING,
                               "a sampling cycle took longer than the collect interval; sampling back to back",
                               cycle_seconds=round(elapsed, 3), interval_seconds=self.interval_s)
            self._stop.wait(max(0.0, self.interval_s - elapsed))

    # -- initialisation ------------------------------------------------------------------------

    def initialise(self) -> bool:
        """Initialise NVML and read the inventory; on failure publish the reason and return False."""
        try:
            self.nvml.call(pynvml.nvmlInit)
            inventory = discover(self.nvml)
        except pynvml.NVMLError as exc:
            reason = describe(exc)
            self._log.change("nvml", ("down", reason), logging.ERROR,
                             "NVML is not available; the exporter stays up and retries with backoff",
                             error=reason)
            self._publish_status(nvml_up=False, nvml_error=reason)
            return False
        self._inventory = inventory
        self._states = [_DeviceState(device) for device in inventory.devices]
        self._log.change("nvml", ("up", len(inventory.devices)), logging.INFO, "NVML initialised",
                         driver_version=inventory.system.driver_version, gpus=len(inventory.devices))
        if not inventory.devices:
            self._log.change("devices", "none", logging.WARNING, "NVML found no GPU")
        self._publish_status(nvml_up=True)
        return True

    # -- one cycle -----------------------------------------------------------------------------

    def run_cycle(self) -> Snapshot:
        """Read every GPU once and publish the snapshot (also used directly by tests)."""
        started = self._clock()
        calls_before = self.nvml.total_calls
        readings: list[DeviceReading] = []
        try:
            for state in self._states:
                readings.append(self._sample_device(state, started))
        except _NvmlDownError as exc:
            self._log.change("nvml", ("down", exc.reason), logging.ERROR,
                             "NVML stopped working; re-initialising", error=exc.reason)
            self._inventory = None
            self._states = []
            self._publish_status(nvml_up=False, nvml_error=exc.reason)
            return self._snapshot
        self._cycles += 1
        duration = self._clock() - started
        snapshot = Snapshot(devices=tuple(readings), status=self._status(
            nvml_up=True,
            last_cycle_duration_s=duration,
            last_cycle_nvml_calls=self.nvml.total_calls - calls_before,
            last_sample_wall_time=self._wall(),
            last_sample_monotonic=self._clock(),
        ))
        self._set_snapshot(snapshot)
        return snapshot

    def _sample_device(self, state: _DeviceState, now: float) -> DeviceReading:
        identity = state.device.identity
        lost_still = state.lost_reason and (now - state.lost_checked_at < LOST_REPROBE_S
                                            or not self._reprobe(state, now))
        if lost_still:
            return DeviceReading(identity=identity, up=False, error=state.lost_reason)
        self.nvml.gpu = identity.index
        try:
            values = self._read_values(state)
            processes = self._read_processes(state, now)
        except _DeviceLostError as exc:
            state.lost_reason = exc.reason
            state.lost_checked_at = now
            self._log.change(("lost", identity.uuid), True, logging.ERROR,
                             "GPU lost: its readings are dropped until it answers again; other GPUs continue",
                             gpu=identity.index, uuid=identity.uuid, error=exc.reason)
            return DeviceReading(identity=identity, up=False, error=exc.reason)
        finally:
            self.nvml.gpu = None
        return DeviceReading(identity=identity, values=values, processes=processes)

    def _reprobe(self, state: _DeviceState, now: float) -> bool:
        state.lost_checked_at = now
        self.nvml.gpu = state.device.identity.index
        try:
            self.nvml.call(pynvml.nvmlDeviceGetUUID, state.device.handle)
        except pynvml.NVMLError as exc:
            if classify(exc) is ErrorClass.NVML_DOWN:
                raise _NvmlDownError(describe(exc)) from None
            return False
        finally:
            self.nvml.gpu = None
        self._log.change(("lost", state.device.identity.uuid), False, logging.WARNING,
                         "GPU answers again after being lost", gpu=state.device.identity.index)
        state.lost_reason = ""
        return True

    def _call_query(self, state: _DeviceState, name: str) -> dict[str, float] | None:
        if name in state.unsupported_queries:
            return None
        try:
            return QUERIES[name].run(self.nvml, state.device.handle, state.query_state)
        except Exception as exc:  # noqa: BLE001 - every NVML failure is classified, none may stop the loop
            if self._handle_error(state, exc, what=name):
                state.unsupported_queries.add(name)
            return None

    def _handle_error(self, state: _DeviceState, exc: Exception, what: str) -> bool:
        """Log and classify a failed reading; True when it is unsupported (stop asking for it).

        Raises _DeviceLostError / _NvmlDownError for failures that end the GPU's or NVML's cycle.
        """
        kind = classify(exc)
        reason = describe(exc)
        if kind is ErrorClass.UNSUPPORTED:
            self._log.once(("unsupported", state.device.identity.uuid, what), logging.INFO,
                           "reading not supported on this GPU; it is omitted and not asked again",
                           gpu=state.device.identity.index, reading=what, error=reason)
            return True
        if kind is ErrorClass.DEVICE_LOST:
            raise _DeviceLostError(reason) from None
        if kind is ErrorClass.NVML_DOWN:
            raise _NvmlDownError(reason) from None
        self._log.once(("transient", state.device.identity.uuid, what, reason), logging.WARNING,
                       "reading failed; skipped this cycle", gpu=state.device.identity.index,
                       reading=what, error=reason)
        return False

    def _read_values(self, state: _DeviceState) -> dict[str, float]:
        plan = self.plan
        results: dict[str, dict[str, float]] = {}
        if state.static_results is None:
            state.static_results = {}
            for name in plan.static_queries:
                result = self._call_query(state, name)
                if result is not None:
                    state.static_results[name] = result
        results.update(state.static_results)
        for name in plan.queries:
            result = self._call_query(state, name)
            if result is not None:
                results[name] = result
        field_values, field_times = self._read_fields(state)

        values: dict[str, float] = {}
        for spec in plan.readings:
            read = spec.read
            value: float | None = None
            if isinstance(read, FromQuery):
                raw = results.get(read.query, {}).get(read.item)
                value = None if raw is None else raw * read.scale
                integer = read.integer
            elif isinstance(read, FromFieldValue):
                raw = field_values.get((read.field_id, read.scope_id))
                value = None if raw is None else raw * read.scale
                integer = read.integer
            elif isinstance(read, FromFieldRate):
                value = self._rate(state, read, field_values, field_times)
                integer = read.integer
            else:
                continue
            if value is not None:
                # DCGM stores INT64 fields truncated and prints doubles with six decimals; rounding to six
                # decimals also hides binary artefacts of unit scaling (632584 mW -> 632.584 W, not ...0001).
                values[spec.name] = int(value) if integer else round(float(value), 6)
        return values

    def _read_fields(self, state: _DeviceState) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
        keys = [key for key in self.plan.field_keys if key not in state.unsupported_fields]
        if not keys:
            return {}, {}
        try:
            entries = self.nvml.call(pynvml.nvmlDeviceGetFieldValues, state.device.handle, keys)
        except Exception as exc:  # noqa: BLE001
            # The whole batch failed (e.g. an old driver without the symbol): every field goes with it.
            if self._handle_error(state, exc, what="nvmlDeviceGetFieldValues"):
                state.unsupported_fields.update(keys)
            return {}, {}
        values: dict[tuple[int, int], float] = {}
        times: dict[tuple[int, int], float] = {}
        for key, entry in zip(keys, entries, strict=False):
            status = entry.nvmlReturn
            if status == pynvml.NVML_SUCCESS:
                try:
                    values[key] = decode_field_value(entry)
                except ValueError:
                    continue
                times[key] = entry.timestamp / 1e6 if entry.timestamp else self._clock()
                continue
            if self._handle_error(state, pynvml.NVMLError(status), what=f"field {key[0]}"):
                state.unsupported_fields.add(key)
        return values, times

    def _rate(self, state: _DeviceState, read: FromFieldRate, values: dict[tuple[int, int], float],
              times: dict[tuple[int, int], float]) -> float | None:
        keys = [(field_id, read.scope_id) for field_id in read.field_ids]
        if any(key not in values for key in keys):
            return None
        total = sum(values[key] for key in keys)
        stamp = max(times[key] for key in keys)
        rate_key = (-1, hash(read))  # one remembered sample per rate definition
        previous = state.previous_fields.get(rate_key)
        state.previous_fields[rate_key] = (total, stamp)
        if previous is None or stamp <= previous[1] or total < previous[0]:
            return None  # first sample, no time passed, or the counter was reset
        return (total - previous[0]) / (stamp - previous[1]) * read.scale

    def _read_processes(self, state: _DeviceState, now: float) -> tuple[GpuProcess, ...] | None:
        if self.process_interval_s is None:
            return None
        if now - state.processes_read_at < self.process_interval_s:
            return state.processes
        by_pid: dict[int, GpuProcess] = {}
        for name, function in (("compute_processes", pynvml.nvmlDeviceGetComputeRunningProcesses),
                               ("graphics_processes", pynvml.nvmlDeviceGetGraphicsRunningProcesses)):
            if name in state.unsupported_queries:
                continue
            try:
                listed = self.nvml.call(function, state.device.handle)
            except Exception as exc:  # noqa: BLE001
                if self._handle_error(state, exc, what=name):
                    state.unsupported_queries.add(name)
                continue
            for process in listed:
                used = process.usedGpuMemory
                known = by_pid.get(process.pid)
                if known is not None and (used is None or (known.used_memory_bytes or 0) >= used):
                    continue
                by_pid[process.pid] = GpuProcess(pid=int(process.pid), used_memory_bytes=used,
                                                 gpu_instance_id=_instance_id(process.gpuInstanceId),
                                                 compute_instance_id=_instance_id(process.computeInstanceId))
        state.processes = tuple(sorted(by_pid.values(), key=lambda process: process.pid))
        state.processes_read_at = now
        return state.processes

    # -- publishing ----------------------------------------------------------------------------

    def _unsupported_fields(self) -> tuple[tuple[int, str], ...]:
        result: list[tuple[int, str]] = []
        for state in self._states:
            for spec in self.plan.specs:
                read = spec.read
                if isinstance(read, FromQuery):
                    missing = read.query in state.unsupported_queries
                elif isinstance(read, FromFieldValue):
                    missing = (read.field_id, read.scope_id) in state.unsupported_fields
                elif isinstance(read, FromFieldRate):
                    missing = any((fid, read.scope_id) in state.unsupported_fields for fid in read.field_ids)
                else:
                    missing = False
                if missing:
                    result.append((state.device.identity.index, spec.name))
        return tuple(result)

    def _status(self, **overrides: Any) -> SamplerStatus:
        """The current status: fresh inventory facts, carried-over timings, then ``overrides``."""
        inventory = self._inventory
        current = dataclasses.replace(
            self._snapshot.status,
            nvml_up=inventory is not None,
            nvml_error="",
            driver_version=inventory.system.driver_version if inventory else "",
            nvml_version=inventory.system.nvml_version if inventory else "",
            device_count=len(inventory.devices) if inventory else 0,
            cycles=self._cycles,
            nvml_calls_total=self.nvml.total_calls,
            unsupported_fields=self._unsupported_fields(),
        )
        return dataclasses.replace(current, **overrides)

    def _publish_status(self, nvml_up: bool, nvml_error: str = "") -> None:
        devices = self._snapshot.devices if nvml_up else ()
        self._set_snapshot(Snapshot(devices=devices, status=self._status(nvml_up=nvml_up, nvml_error=nvml_error)))

    def _set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        try:
            self._on_snapshot(snapshot)
        except Exception:
            log.exception("snapshot consumer failed")


def _instance_id(raw: Any) -> int | None:
    """NVML reports 0xFFFFFFFF for 'not a MIG instance'."""
    if raw is None:
        return None
    value = int(raw)
    return None if value == 0xFFFFFFFF else value
