"""The sampling loop: one thread reads every GPU at the collect interval and publishes a Snapshot.

Each kind of NVML read (named queries, GPM, field values, process lists, MIG instances...) is a
plug-in under ``exporter/nvml/reads/`` (one module each, one interface: what it produces, whether
the plan has it run, whether the GPU supports it, read it); the plan (``exporter/nvml/plan.py``,
from the counters CSV) chooses which run; this class only runs them in order on each GPU and
assembles the snapshot. How to add a kind of read: see ``exporter/nvml/reads/__init__.py``.

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
from collections.abc import Callable, Sequence
from typing import Any

import pynvml

from exporter.backoff import Backoff, BackoffPolicy
from exporter.logs import StateLog, get_logger
from exporter.metrics.catalog import FieldSpec
from exporter.metrics.owned import PROCESS_UTILIZATION_FAMILIES
from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe
from exporter.nvml.inventory import Inventory, discover
from exporter.nvml.mig import MIG_CHECK_INTERVAL_S, MigTracker
from exporter.nvml.peaks import DEFAULT_WINDOW_S, DevicePeaks
from exporter.nvml.plan import SamplingPlan
from exporter.nvml.reads import READS, chosen_reads
from exporter.nvml.reads.base import DeviceCycle, DeviceLostError, DeviceRead, DeviceState, NvmlDownError, ReadContext
from exporter.snapshot import DeviceReading, InFlight, MigIdentity, SamplerStatus, Snapshot
from exporter.supervisor import supervised

__all__ = ["INIT_BACKOFF", "LOST_REPROBE_S", "Sampler", "SamplingPlan"]

log = get_logger("sampler")

LOST_REPROBE_S = 30.0
INIT_BACKOFF = BackoffPolicy(initial_s=1.0, max_s=30.0)  # NVML start-up retries: jittered, for a fleet
NO_DEVICES_RETRY_S = 30.0


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
        reads: Sequence[DeviceRead] = READS,
    ) -> None:
        self.plan = SamplingPlan.for_specs(specs, dependencies)
        self.reads = tuple(reads)  # the kinds of read, in call order; the plan chooses which run each cycle
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
        self._states: list[DeviceState] = []
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
        self._states = [DeviceState(device, mig=MigTracker(self.mig_check_interval_s),
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
        context = self._context()
        reads = chosen_reads(context, self.reads)
        try:
            for state in self._states:
                readings.append(self._sample_device(state, started, reads, context))
        except NvmlDownError as exc:
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

    def _sample_device(self, state: DeviceState, now: float, reads: Sequence[DeviceRead],
                       context: ReadContext) -> DeviceReading:
        identity = state.device.identity
        lost_still = state.lost_reason and (now - state.lost_checked_at < LOST_REPROBE_S
                                            or not self._reprobe(state, now))
        if lost_still:
            return DeviceReading(identity=identity, up=False, error=state.lost_reason)
        self.nvml.gpu = identity.index
        cycle = DeviceCycle(state, now)
        try:
            for read in reads:
                if read.supported(state):
                    read.read(context, cycle)
        except DeviceLostError as exc:
            self._lost(state, now, exc.reason)
            return DeviceReading(identity=identity, up=False, error=exc.reason)
        finally:
            self.nvml.gpu = None
        return DeviceReading(identity=identity, values=cycle.values, processes=cycle.processes, mig=cycle.mig,
                             process_utilization=state.process_utilization if cycle.processes is not None else None,
                             peaks=state.peaks.add(now, cycle.values))

    def _lost(self, state: DeviceState, now: float, reason: str) -> None:
        """The GPU stopped answering: forget its sample chains and peaks, re-probe it later."""
        identity = state.device.identity
        state.lost_reason = reason
        state.lost_checked_at = now
        state.gpm.reset(self.nvml)  # the sample chain restarts when the GPU answers again
        state.mig.mark_stale()
        state.utilization.reset()  # so does the per-process sample cursor
        state.process_utilization = None
        state.peaks.clear()
        state.mig_peaks.clear()
        self._log.change(("lost", identity.uuid), True, logging.ERROR,
                         "GPU lost: its readings are dropped until it answers again; other GPUs continue",
                         gpu=identity.index, uuid=identity.uuid, error=reason)

    def _context(self) -> ReadContext:
        return ReadContext(nvml=self.nvml, plan=self.plan, clock=self._clock, wall=self._wall, log=self._log,
                           process_interval_s=self.process_interval_s, peak_window_s=self.peak_window_s)

    def _reprobe(self, state: DeviceState, now: float) -> bool:
        state.lost_checked_at = now
        self.nvml.gpu = state.device.identity.index
        try:
            self.nvml.call(pynvml.nvmlDeviceGetUUID, state.device.handle)
        except pynvml.NVMLError as exc:
            if classify(exc) is ErrorClass.NVML_DOWN:
                raise NvmlDownError(describe(exc)) from None
            return False
        finally:
            self.nvml.gpu = None
        self._log.change(("lost", state.device.identity.uuid), False, logging.WARNING,
                         "GPU answers again after being lost", gpu=state.device.identity.index)
        state.lost_reason = ""
        return True

    # -- MIG and GPM (exporter/nvml/mig.py, exporter/nvml/gpm.py) -------------------------------

    def mig_identities(self) -> tuple[MigIdentity, ...]:
        """Every MIG device of every GPU (all compute instances): what the kubelet's ``MIG-<uuid>`` IDs name.

        Also published as ``Snapshot.migs``; the attribution facade takes ``snapshot(devices, migs)``.
        """
        return tuple(identity for state in self._states for identity in state.mig.identities())

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
