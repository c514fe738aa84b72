"""The sampling loop: one thread reads every GPU at the collect interval and publishes a Snapshot.

Why one thread: NVML calls serialize on the driver's resource-manager lock (MangoHud#1307 and #2104:
a 25 ms polling thread held it ~10 s of every 15 s; zml#766 moved to one polling thread for that
reason), so per-GPU threads buy nothing and can stall co-located workloads. Why a cached plan: the
counters CSV decides which readings are needed; the plan turns that into the minimal set of NVML
queries per GPU (shared queries run once, field-value readings go into one batched
``nvmlDeviceGetFieldValues`` call), and readings a GPU does not support are remembered and never
asked again.

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
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from exporter.backoff import Backoff, BackoffPolicy
from exporter.logs import StateLog, get_logger
from exporter.metrics.catalog import (
    CATALOG,
    FieldSpec,
    FromFieldRate,
    Scope,
)
from exporter.metrics.owned import PROCESS_UTILIZATION_FAMILIES
from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe, mig_instance_id
from exporter.nvml.gpm import GpmReader, gpm_unsupported
from exporter.nvml.inventory import Device, Inventory, discover
from exporter.nvml.mig import MIG_CHECK_INTERVAL_S, InstancePlan, MigTracker, instance_values, is_gone
from exporter.nvml.peaks import DEFAULT_WINDOW_S, DevicePeaks
from exporter.nvml.process_utilization import ProcessUtilizationReader, SizeRaceError
from exporter.nvml.queries import QUERIES, QueryState, decode_field_value
from exporter.snapshot import (
    DeviceReading,
    GpuProcess,
    InFlight,
    MigIdentity,
    MigReading,
    ProcessUtilization,
    SamplerStatus,
    Snapshot,
)
from exporter.supervisor import supervised

log = get_logger("sampler")

T = TypeVar("T")

LOST_REPROBE_S = 30.0
INIT_BACKOFF = BackoffPolicy(initial_s=1.0, max_s=30.0)  # NVML start-up retries: jittered, for a fleet
NO_DEVICES_RETRY_S = 30.0


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
    # GPM and MIG (exporter/nvml/gpm.py, mig.py): metric ids per GPU, those a MIG parent keeps
    # (device-scoped), field keys only needed when a GPU has no GPM, queries only instance rows use.
    gpm_metrics: tuple[int, ...] = ()
    gpm_device_metrics: tuple[int, ...] = ()
    fallback_keys: frozenset[tuple[int, int]] = frozenset()
    instance_only_queries: frozenset[str] = frozenset()
    instance: InstancePlan = field(default_factory=lambda: InstancePlan((), (), ()))
    # Readings other components need (health, clock events) even when the CSV does not export them.
    dependencies: tuple[FieldSpec, ...] = ()

    @property
    def readings(self) -> tuple[FieldSpec, ...]:
        return (*self.specs, *self.dependencies)

    @classmethod
    def for_specs(cls, specs: Sequence[FieldSpec], dependencies: Sequence[FieldSpec] = ()) -> SamplingPlan:
        served = tuple(spec for spec in specs if spec.served and not spec.is_label)
        extra = _dependencies(served, dependencies)
        readings = (*served, *extra)
        queries = _unique(name for spec in readings for name in spec.read.queries)
        dynamic = tuple(name for name in queries if not QUERIES[name].static)
        fields = _unique(key for spec in readings for key in spec.read.field_keys)
        gpm = [spec for spec in served if spec.read.gpm_metric is not None]
        fallbacks = frozenset(key for spec in gpm for key in spec.read.fallback_keys) - set(fields)
        return cls(specs=served, queries=dynamic, static_queries=tuple(name for name in queries if name not in dynamic),
                   field_keys=(*fields, *sorted(fallbacks)),
                   gpm_metrics=_gpm_metrics(gpm),
                   gpm_device_metrics=_gpm_metrics(spec for spec in gpm if spec.scope is not Scope.INSTANCE),
                   fallback_keys=fallbacks,
                   instance_only_queries=frozenset(dynamic) - _device_queries(readings),
                   instance=InstancePlan.for_specs(served),
                   dependencies=extra)


def _dependencies(served: Sequence[FieldSpec], dependencies: Sequence[FieldSpec]) -> tuple[FieldSpec, ...]:
    """Served readings other components need although the CSV does not export them, each once."""
    wanted = [*dependencies, *(CATALOG.lookup(name) for spec in served for name in spec.needs)]
    return _unique(spec for spec in wanted if spec is not None and spec.served and spec not in served)


def _gpm_metrics(specs: Iterable[FieldSpec]) -> tuple[int, ...]:
    return _unique(metric for spec in specs if (metric := spec.read.gpm_metric) is not None)


def _device_queries(readings: Iterable[FieldSpec]) -> set[str]:
    """Named queries some whole-GPU row needs (the others are read per MIG instance when MIG is on)."""
    return {name for spec in readings if spec.scope is not Scope.INSTANCE for name in spec.read.queries}


def _unique(items: Iterable[T]) -> tuple[T, ...]:
    """The items in first-seen order, each once (the plan's call order follows the CSV's)."""
    return tuple(dict.fromkeys(items))


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
    utilization: ProcessUtilizationReader = field(default_factory=ProcessUtilizationReader)
    process_utilization: ProcessUtilization | None = None  # the last read's, kept until the next one
    mig: MigTracker = field(default_factory=MigTracker)
    mig_query_state: QueryState = field(default_factory=QueryState)
    mig_unsupported_queries: set[str] = field(default_factory=set)  # not asked again until the layout changes
    gpm: GpmReader = field(default_factory=GpmReader)
    peaks: DevicePeaks = field(default_factory=lambda: DevicePeaks(DEFAULT_WINDOW_S))
    mig_peaks: dict[int, DevicePeaks] = field(default_factory=dict)  # by GPU-instance id; reset with the layout

    # What this GPU answered NotSupported to, as the catalog's Read variants ask it (``Unsupported``).

    @property
    def gpm_supported(self) -> bool | None:
        return self.gpm.supported

    def query_unsupported(self, query: str) -> bool:
        return query in self.unsupported_queries

    def field_unsupported(self, key: tuple[int, int]) -> bool:
        return key in self.unsupported_fields

    def gpm_metric_unsupported(self, metric_id: int) -> bool:
        return any(metric == metric_id for _, metric in self.gpm.unsupported_metrics)


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
        mig_check_interval_s: float = MIG_CHECK_INTERVAL_S,
        dependencies: Sequence[FieldSpec] = (),
        peak_window_s: float = DEFAULT_WINDOW_S,
        on_inventory: Callable[[Inventory], None] = lambda _inventory: None,
    ) -> None:
        self.plan = SamplingPlan.for_specs(specs, dependencies)
        self._next_plan: SamplingPlan | None = None  # set_specs: taken at the start of the next cycle
        self.mig_check_interval_s = mig_check_interval_s
        self.interval_s = interval_s
        self.peak_window_s = peak_window_s  # exporter/nvml/peaks.py: DCGM_EXP_*_PEAK over this trailing window
        self.process_interval_s = process_interval_s  # None: process lists are not read
        self._on_snapshot = on_snapshot
        # Called on the sampling thread right after NVML initialised, before the first cycle: the event
        # watcher registers there, so an Xid raised during the rest of start-up is not lost.
        self._on_inventory = on_inventory
        self._first_attempt = threading.Event()  # set once the first initialisation has succeeded or failed
        self._clock = clock
        self.init_backoff = Backoff(INIT_BACKOFF)  # replaceable: tests pin its random fraction
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
        self._thread = supervised(self._run, name="nvml-sampler", stop=self._stop)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def wait_first_attempt(self, timeout_s: float) -> bool:
        """Wait until the first NVML initialisation has succeeded or failed; False after ``timeout_s``
        (an ``nvmlInit`` that hangs: the thread goes on trying, the watchdog reports the stall)."""
        return self._first_attempt.wait(timeout_s)

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
        backoff = self.init_backoff
        while not self._stop.is_set():
            if self._inventory is None:
                initialised = self.initialise()
                self._first_attempt.set()
                if initialised:
                    backoff.reset()
                    continue
                self._stop.wait(backoff.failed(self._clock()))
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
        self._states = [_DeviceState(device, mig=MigTracker(self.mig_check_interval_s),
                                     peaks=DevicePeaks(self.peak_window_s))
                        for device in inventory.devices]
        self._log.change("nvml", ("up", len(inventory.devices)), logging.INFO, "NVML initialised",
                         driver_version=inventory.system.driver_version, gpus=len(inventory.devices))
        try:
            self._on_inventory(inventory)
        except Exception:  # a consumer's bug must not stop sampling
            log.exception("a consumer of the new NVML inventory failed")
        if inventory.devices:
            self._log.forget("devices")  # said again should the GPUs go away later
        else:
            self._log.change("devices", "none", logging.WARNING, "NVML found no GPU")
        self._publish_status(nvml_up=True)
        return True

    # -- one cycle -----------------------------------------------------------------------------

    def set_specs(self, specs: Sequence[FieldSpec], dependencies: Sequence[FieldSpec] = ()) -> None:
        """Read other fields from the next cycle on (a new counters CSV). Safe from any thread: the
        sampling thread swaps the plan between cycles, never in the middle of one."""
        self._next_plan = SamplingPlan.for_specs(specs, dependencies)

    def _take_next_plan(self) -> None:
        plan, self._next_plan = self._next_plan, None
        if plan is not None:
            self.plan = plan
            for state in self._states:
                state.static_results = None  # the new plan may need other static queries

    def run_cycle(self) -> Snapshot:
        """Read every GPU once and publish the snapshot (also used directly by tests)."""
        self._take_next_plan()
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
        snapshot = Snapshot(devices=tuple(readings), migs=self.mig_identities(), status=self._status(
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
            self._refresh_mig(state, now)
            values = self._read_values(state)
            processes = self._read_processes(state, now)
            mig = self._read_mig(state, now)
        except _DeviceLostError as exc:
            state.lost_reason = exc.reason
            state.lost_checked_at = now
            state.gpm.reset(self.nvml)  # the sample chain restarts when the GPU answers again
            state.mig.mark_stale()
            state.utilization.reset()  # so does the per-process sample cursor
            state.process_utilization = None
            state.peaks.clear()
            state.mig_peaks.clear()
            self._log.change(("lost", identity.uuid), True, logging.ERROR,
                             "GPU lost: its readings are dropped until it answers again; other GPUs continue",
                             gpu=identity.index, uuid=identity.uuid, error=exc.reason)
            return DeviceReading(identity=identity, up=False, error=exc.reason)
        finally:
            self.nvml.gpu = None
        return DeviceReading(identity=identity, values=values, processes=processes, mig=mig,
                             process_utilization=state.process_utilization if processes is not None else None,
                             peaks=state.peaks.add(now, values))

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
        mig_enabled = state.mig.enabled
        for name in plan.queries:
            if mig_enabled and name in plan.instance_only_queries:
                continue  # read per MIG instance instead (flex mode: no parent framebuffer rows)
            result = self._call_query(state, name)
            if result is not None:
                results[name] = result
        gpm_values = self._read_gpm(state)
        field_values, field_times = self._read_fields(state)

        cycle = _DeviceCycle(state, results, field_values, field_times, gpm_values)
        values: dict[str, float] = {}
        for spec in plan.readings:
            if mig_enabled and spec.scope is Scope.INSTANCE:
                continue  # reported per GPU instance (MigReading), like dcgm-exporter's flex mode
            value = spec.read.value(cycle)
            if value is not None:
                values[spec.name] = value
        return values

    def _read_fields(self, state: _DeviceState) -> tuple[dict[tuple[int, int], float], dict[tuple[int, int], float]]:
        skipped = self.plan.fallback_keys if state.gpm.supported else frozenset()  # GPM serves those rows
        keys = [key for key in self.plan.field_keys if key not in state.unsupported_fields and key not in skipped]
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
                                                 gpu_instance_id=mig_instance_id(process.gpuInstanceId),
                                                 compute_instance_id=mig_instance_id(process.computeInstanceId))
        state.processes = tuple(sorted(by_pid.values(), key=lambda process: process.pid))
        state.process_utilization = self._read_process_utilization(state, self.process_interval_s)
        state.processes_read_at = now
        return state.processes

    def _read_process_utilization(self, state: _DeviceState, interval_s: float) -> ProcessUtilization | None:
        """Per-process utilization since the previous read (exporter/nvml/process_utilization.py).

        Read with the process lists, on the process interval only. A GPU or driver without it is
        logged once and listed in the unsupported self-metric under the families it omits; a
        transient failure keeps the previous value (the next read covers this interval too).
        """
        reader = state.utilization
        if reader.unsupported:
            return None
        identity = state.device.identity
        try:
            result = reader.read(self.nvml, state.device.handle, self._wall(), interval_s)
        except SizeRaceError as exc:
            self._log.once(("transient", identity.uuid, "process utilization", "size"), logging.WARNING,
                           "reading failed; skipped this cycle", gpu=identity.index,
                           reading="process utilization", error=str(exc))
            return state.process_utilization
        except Exception as exc:  # noqa: BLE001 - classified: lost GPU / NVML down propagate
            self._handle_error(state, exc, what="process utilization")
            return state.process_utilization
        if result is None:
            self._log.once(("unsupported", identity.uuid, "process utilization"), logging.INFO,
                           "per-process utilization is not supported on this GPU or driver; its per-container "
                           "utilization families are omitted", gpu=identity.index, uuid=identity.uuid,
                           error=reader.unsupported)
        return result

    # -- MIG and GPM (exporter/nvml/mig.py, exporter/nvml/gpm.py) -------------------------------

    def mig_identities(self) -> tuple[MigIdentity, ...]:
        """Every MIG device of every GPU (all compute instances): what the kubelet's ``MIG-<uuid>`` IDs name.

        Also published as ``Snapshot.migs``; the attribution facade takes ``snapshot(devices, migs)``.
        """
        return tuple(identity for state in self._states for identity in state.mig.identities())

    def _refresh_mig(self, state: _DeviceState, now: float) -> None:
        tracker = state.mig
        was_enabled = tracker.enabled
        identity = state.device.identity
        try:
            changed = tracker.refresh(self.nvml, state.device.handle, identity.uuid, now)
        except Exception as exc:  # noqa: BLE001 - classified: lost GPU / NVML down propagate
            self._handle_error(state, exc, what="MIG layout")
            return
        if not changed:
            return
        state.mig_peaks.clear()  # GPU-instance ids may now name other instances
        state.mig_unsupported_queries.clear()  # new MIG devices may answer what the old ones did not
        if tracker.enabled != was_enabled:
            # MIG mode decides which readings exist (utilization is NotSupported with MIG on): ask again.
            state.unsupported_queries.clear()
            state.unsupported_fields.clear()
            state.static_results = None
            state.gpm.reset(self.nvml)
            state.utilization.reset()
            state.process_utilization = None
        for target in state.gpm.targets():
            if target is not None:  # GPU-instance ids may be reused by a different instance
                state.gpm.forget(self.nvml, target)
        if tracker.enabled or was_enabled:  # a MIG-capable GPU that keeps MIG off is not news
            layout = ",".join(f"{device.identity.profile}:GI{device.identity.gpu_instance_id}"
                              f"/CI{device.identity.compute_instance_id}" for device in tracker.devices)
            self._log.change(("mig", identity.uuid), (tracker.enabled, layout), logging.INFO,
                             "MIG layout", gpu=identity.index, uuid=identity.uuid, enabled=tracker.enabled,
                             devices=layout or "-")

    def _wants_gpm(self, state: _DeviceState) -> tuple[int, ...]:
        plan = self.plan
        return plan.gpm_device_metrics if state.mig.enabled else plan.gpm_metrics

    def _read_gpm(self, state: _DeviceState) -> dict[int, float]:
        """This cycle's GPM metrics of the whole GPU (NVML units); probes support once."""
        metrics = self._wants_gpm(state)
        needs_probe = bool(metrics) or (state.mig.enabled and bool(self.plan.instance.gpm_metrics))
        if not needs_probe or state.gpm.supported is False:
            return {}
        handle = state.device.handle
        try:
            supported = state.gpm.probe(self.nvml, handle)
        except Exception as exc:  # noqa: BLE001
            if gpm_unsupported(exc):
                state.gpm.supported = supported = False
            else:
                self._handle_error(state, exc, what="GPM")  # raises for a lost GPU / NVML down
                return {}
        if not supported:
            self._gpm_unsupported(state)
            return {}
        if not metrics:
            return {}
        try:
            return state.gpm.read(self.nvml, handle, metrics, self._clock())
        except Exception as exc:  # noqa: BLE001
            self._gpm_failed(state, exc, None, metrics)
            return {}

    def _gpm_failed(self, state: _DeviceState, exc: Exception, target: int | None, metrics: Sequence[int]) -> None:
        """A GPM sample or metrics call failed for one target (the GPU, or one GPU instance).

        Only NotSupported-like answers stop the target's metrics for good (logged once); a lost GPU or
        NVML going away propagates; anything else (including InvalidArgument, which NVML also uses
        for samples it cannot compare) restarts the target's sample chain at the next cycle.
        """
        identity = state.device.identity
        where = "the whole GPU" if target is None else f"GPU instance {target}"
        if gpm_unsupported(exc):
            state.gpm.unsupported_metrics.update((target, metric) for metric in metrics)
            self._log.once(("gpm-target-unsupported", identity.uuid, target is None), logging.WARNING,
                           "GPM samples are not supported here; its profiling rows are omitted",
                           gpu=identity.index, uuid=identity.uuid, target=where, error=describe(exc))
            return
        if classify(exc) in (ErrorClass.DEVICE_LOST, ErrorClass.NVML_DOWN):
            self._handle_error(state, exc, what="GPM")  # raises
        self._log.once(("gpm-transient", identity.uuid, describe(exc)), logging.WARNING,
                       "GPM sample failed; its sample chain restarts next cycle", gpu=identity.index,
                       target=where, error=describe(exc))
        state.gpm.forget(self.nvml, target)

    def _gpm_unsupported(self, state: _DeviceState) -> None:
        """One warning per GPU naming the profiling rows it cannot serve (a GPU without GPM)."""
        gpm = [spec for spec in self.plan.specs if spec.read.gpm_metric is not None]
        omitted = [spec.name for spec in gpm if not spec.read.fallback_keys]
        fallback = [spec.name for spec in gpm if spec.read.fallback_keys]
        if not omitted:
            return
        identity = state.device.identity
        self._log.once(("gpm-unsupported", identity.uuid), logging.WARNING,
                       "profiling metrics need NVML GPM (Hopper or newer), which this GPU does not support; "
                       "their rows are omitted for it", gpu=identity.index, uuid=identity.uuid,
                       omitted=",".join(omitted), from_field_values=",".join(fallback) or "-")

    def _read_mig(self, state: _DeviceState, now: float) -> tuple[MigReading, ...]:
        """One reading per GPU instance: memory on its MIG handle, GPM from its GPU-instance sample."""
        tracker = state.mig
        if not tracker.enabled:
            return ()
        plan = self.plan.instance
        identity = state.device.identity
        readings: list[MigReading] = []

        def unsupported(what: str) -> None:
            state.mig_unsupported_queries.add(what)
            self._log.once(("unsupported", identity.uuid, f"MIG {what}"), logging.INFO,
                           "reading not supported on this GPU's MIG devices; it is omitted",
                           gpu=identity.index, reading=what)

        for device in tracker.instances():
            gpu_instance_id = device.identity.gpu_instance_id
            try:
                gpm_values = self._read_instance_gpm(state, gpu_instance_id)
                values = instance_values(self.nvml, device, plan, state.mig_query_state, gpm_values=gpm_values,
                                         on_unsupported=unsupported, skip=state.mig_unsupported_queries)
            except Exception as exc:  # noqa: BLE001
                if is_gone(exc):  # the instance was destroyed: look at the layout again next cycle
                    tracker.mark_stale()
                    continue
                self._handle_error(state, exc, what=f"MIG instance {gpu_instance_id}")
                continue
            peaks = state.mig_peaks.get(gpu_instance_id)
            if peaks is None:
                peaks = state.mig_peaks[gpu_instance_id] = DevicePeaks(self.peak_window_s)
            readings.append(MigReading(identity=device.identity, values=values, peaks=peaks.add(now, values)))
        return tuple(readings)

    def _read_instance_gpm(self, state: _DeviceState, gpu_instance_id: int) -> dict[int, float]:
        metrics = self.plan.instance.gpm_metrics
        if not metrics or not state.gpm.supported:
            return {}
        try:
            return state.gpm.read(self.nvml, state.device.handle, metrics, self._clock(), gpu_instance_id)
        except Exception as exc:
            if is_gone(exc):
                raise  # the GPU instance was destroyed: the caller re-probes the layout
            self._gpm_failed(state, exc, gpu_instance_id, metrics)
            return {}

    # -- publishing ----------------------------------------------------------------------------

    def _unsupported_fields(self) -> tuple[tuple[int, str], ...]:
        result: list[tuple[int, str]] = []
        for state in self._states:
            index = state.device.identity.index
            result.extend((index, spec.name) for spec in self.plan.specs if spec.read.missing(state))
            if self.process_interval_s is not None and state.utilization.unsupported:
                result.extend((state.device.identity.index, name) for name in PROCESS_UTILIZATION_FAMILIES)
        return tuple(result)

    def _status(self, *, nvml_up: bool, **overrides: Any) -> SamplerStatus:
        """The current status: fresh inventory facts, carried-over timings, then ``overrides``."""
        inventory = self._inventory
        current = dataclasses.replace(
            self._snapshot.status,
            nvml_up=nvml_up,
            nvml_error="",
            driver_version=inventory.system.driver_version if inventory else "",
            nvml_version=inventory.system.nvml_version if inventory else "",
            device_count=len(inventory.devices) if inventory else 0,
            cycles=self._cycles,
            nvml_calls_total=self.nvml.total_calls,
            unsupported_fields=self._unsupported_fields(),
            peak_window_s=self.peak_window_s,
        )
        return dataclasses.replace(current, **overrides)

    def _publish_status(self, nvml_up: bool, nvml_error: str = "") -> None:
        """A snapshot without readings: NVML just initialised (no cycle yet) or went away (readings dropped)."""
        self._set_snapshot(Snapshot(status=self._status(nvml_up=nvml_up, nvml_error=nvml_error)))

    def _set_snapshot(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        try:
            self._on_snapshot(snapshot)
        except Exception:
            log.exception("snapshot consumer failed")


@dataclass(frozen=True)
class _DeviceCycle:
    """What one cycle read from one GPU, as the catalog's ``Read`` variants take it (``CycleValues``).

    ``rate`` keeps one remembered sample per rate definition in the GPU's state, so a rate needs
    two cycles; a counter that went backwards (driver reload, GPU reset) restarts it.
    """

    state: _DeviceState
    results: dict[str, dict[str, float]]
    field_values: dict[tuple[int, int], float]
    field_times: dict[tuple[int, int], float]
    gpm_values: dict[int, float]

    @property
    def gpm_supported(self) -> bool | None:
        return self.state.gpm.supported

    def query_item(self, query: str, item: str) -> float | None:
        return self.results.get(query, {}).get(item)

    def field(self, key: tuple[int, int]) -> float | None:
        return self.field_values.get(key)

    def gpm(self, metric_id: int) -> float | None:
        return self.gpm_values.get(metric_id)

    def rate(self, read: FromFieldRate) -> float | None:
        keys = read.field_keys
        if any(key not in self.field_values for key in keys):
            return None
        total = sum(self.field_values[key] for key in keys)
        stamp = max(self.field_times[key] for key in keys)
        rate_key = (-1, hash(read))  # one remembered sample per rate definition
        previous = self.state.previous_fields.get(rate_key)
        self.state.previous_fields[rate_key] = (total, stamp)
        if previous is None or stamp <= previous[1] or total < previous[0]:
            return None  # first sample, no time passed, or the counter was reset
        return (total - previous[0]) / (stamp - previous[1])
