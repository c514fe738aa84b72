"""The NVML event watcher: one thread blocked in ``nvmlEventSetWait_v2``, so no Xid is ever missed.

dcgm-exporter samples the last Xid as a gauge between scrapes, so a burst of Xids (or two identical
ones) collapses into one value and events between samples vanish. NVML instead queues every event
in an event set from the moment a GPU is registered, and a waiter takes them out one by one. This
thread does exactly that and hands each event to a callback that counts it; rendering reads those
counts later, so no event is lost between scrapes.

What nvml.h documents for event sets, and what NVIDIA's device plugin learned, drives the details:

* One event set, registered on the **parent** GPUs (MIG device handles cannot be registered); an
  Xid inside a MIG instance carries its GPU-instance / compute-instance ids (0xFFFFFFFF otherwise).
* Per GPU we register ``requested & nvmlDeviceGetSupportedEventTypes()``. NotSupported (old boards,
  some platforms) skips that GPU with one log line instead of failing the watcher, as NVIDIA's
  device plugin does since k8s-device-plugin#1562. After UNKNOWN the set is undefined: it is freed
  and rebuilt without that GPU.
* ``nvmlEventSetWait_v2`` with a timeout: Timeout is the normal idle path (also returned when an
  interrupt arrives). The blocked call releases the GIL (ctypes CDLL), so the thread costs nothing
  while idle, and the timeout bounds how long ``stop()`` waits.
* The thread has its own ``NvmlClient``: its calls are not the sampler's per-cycle cost, and the
  watchdog must not see a wait that is *supposed* to block as a stall.
* The sampler owns NVML's lifetime (init and re-init), and it hands every new inventory to
  ``prepare`` on its own thread right after NVML initialised, before its first sampling cycle and
  before the app starts anything slow (Kubernetes connections, the HTTP listener). NVML delivers only
  events raised after ``nvmlDeviceRegisterEvents``, so an Xid raised while the exporter was still
  starting would otherwise be lost for good. The watcher thread adopts that prepared set; it only
  waits on a set, so no set is ever waited on by two threads.
* The watcher follows the sampler's inventory: a new
  Inventory object (after NVML was lost and re-initialised) means new handles, so the old set is
  freed and a new one registered. NVML down under the wait -> the set is dropped; registration is
  retried with a growing pause until it works or the sampler publishes a new inventory.
* The set is freed by the watcher's own thread when it leaves its loop, never while another thread
  waits on it; nobody calls ``nvmlShutdown`` (nvitop#222: shutdown under an in-flight call crashes).
* A lost GPU during the wait (GPU_IS_LOST) keeps the set: the other GPUs' events are still queued
  in it. If the error repeats, the set is rebuilt make-before-break (the new set is registered
  before the old one is drained and freed), so events of the healthy GPUs are not dropped and the
  lost GPU, whose registration now fails, is left out.
* A GPU left out because its registration failed for a reason that can pass (lost, reset, a transient
  error; not NotSupported) is tried again every ``REREGISTER_S`` by the same make-before-break
  rebuild, so a GPU that comes back after a reset delivers its Xids again. A GPU that never comes
  back costs one registration attempt per interval. A reset also ends the GPU's registration on the
  old set, and a wait's GPU_IS_LOST does not say which GPU it was, so after one the set is rebuilt at
  the next interval too.
"""

from __future__ import annotations

import ctypes
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pynvml

from exporter.logs import StateLog, get_logger
from exporter.nvml.client import ErrorClass, NvmlClient, classify, describe, mig_instance_id
from exporter.nvml.inventory import Device, Inventory
from exporter.snapshot import DeviceIdentity
from exporter.supervisor import supervised

log = get_logger("events")

XID_EVENT: int = pynvml.nvmlEventTypeXidCriticalError
# Xid plus the memory and availability events NVML can raise. SingleBitEccError is left out on
# purpose: a degrading board raises it in storms, and the corrected-error counters (read every
# cycle) already carry that information without waking this thread per error.
REQUESTED_EVENT_TYPES: int = (
    XID_EVENT
    | pynvml.nvmlEventTypeDoubleBitEccError
    | pynvml.nvmlEventTypeDramRetirementEvent
    | pynvml.nvmlEventTypeDramRetirementFailure
    | getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000)
)
EVENT_TYPE_NAMES: dict[int, str] = {
    pynvml.nvmlEventTypeSingleBitEccError: "single_bit_ecc_error",
    pynvml.nvmlEventTypeDoubleBitEccError: "double_bit_ecc_error",
    pynvml.nvmlEventTypePState: "pstate_change",
    XID_EVENT: "xid_critical_error",
    pynvml.nvmlEventTypeClock: "clock_change",
    pynvml.nvmlEventTypeDramRetirementEvent: "dram_retirement_event",
    pynvml.nvmlEventTypeDramRetirementFailure: "dram_retirement_failure",
    getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000): "gpu_unavailable_error",
}

WAIT_TIMEOUT_MS = 500  # bounds stop(); a real wait costs nothing while it blocks
IDLE_POLL_S = 0.2  # how often to look for an inventory while there is none
ERROR_BACKOFF_S = 1.0  # after a wait error, so a persistent one cannot spin; the set keeps queueing
RETRY_MAX_S = 30.0  # longest pause between attempts to register again after NVML failed us
DRAIN_LIMIT = 10_000  # events taken out of a set that is being replaced, at most
REREGISTER_S = 30.0  # how often GPUs whose registration failed (lost, reset) are tried again


@dataclass(frozen=True)
class DeviceEvent:
    """One NVML event, resolved to the GPU it happened on."""

    identity: DeviceIdentity
    event_type: int
    data: int  # the Xid for nvmlEventTypeXidCriticalError (999: an Xid NVML cannot name), else 0
    gpu_instance_id: int | None = None  # MIG attribution, None when NVML gave 0xFFFFFFFF
    compute_instance_id: int | None = None

    @property
    def is_xid(self) -> bool:
        return bool(self.event_type & XID_EVENT)

    @property
    def type_name(self) -> str:
        return EVENT_TYPE_NAMES.get(self.event_type, f"0x{self.event_type:x}")


def handle_value(handle: Any) -> int | None:
    """The address a ``c_nvmlDevice_t`` points at: equal handles name the same GPU."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (ctypes.ArgumentError, TypeError):
        return None


class _Outcome(enum.Enum):
    """What registering one GPU on an event set came to."""

    REGISTERED = enum.auto()
    SKIPPED = enum.auto()  # it does not support (Xid) events: left out for good
    FAILED = enum.auto()  # lost, reset, transient: left out, tried again every REREGISTER_S
    SET_UNDEFINED = enum.auto()  # Unknown: the set is undefined, rebuild it without this GPU
    NVML_DOWN = enum.auto()  # NVML went away: give the set up


@dataclass
class _Registration:
    """An event set and the GPUs registered on it (owned by the watcher thread)."""

    event_set: Any
    devices: dict[int, Device]  # handle value -> device
    registered: tuple[int, ...]  # NVML indices
    missing: tuple[int, ...] = ()  # NVML indices whose registration failed for a reason that may pass


class EventWatcher:
    """Waits on an NVML event set in its own thread and passes every event to ``on_event``.

    ``inventory`` returns the sampler's current inventory (None while NVML is down or not yet
    initialised); the watcher registers when it appears and again whenever it is replaced.
    """

    def __init__(
        self,
        inventory: Callable[[], Inventory | None],
        on_event: Callable[[DeviceEvent], None],
        *,
        requested: int = REQUESTED_EVENT_TYPES,
        wait_timeout_ms: int = WAIT_TIMEOUT_MS,
        idle_poll_s: float = IDLE_POLL_S,
        error_backoff_s: float = ERROR_BACKOFF_S,
        reregister_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._inventory = inventory
        self._on_event = on_event
        self._requested = requested
        self._timeout_ms = wait_timeout_ms
        self._idle_poll_s = idle_poll_s
        self._error_backoff_s = error_backoff_s
        self._reregister_s = REREGISTER_S if reregister_s is None else reregister_s
        self._reregister_at = 0.0
        self.nvml = NvmlClient(clock)
        self._clock = clock
        self._retry_at = 0.0
        self._retry_delay = error_backoff_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._log = StateLog(log)
        self._current: _Registration | None = None
        self._followed: Inventory | None = None  # the inventory the current (or dropped) set belongs to
        self._lost_in_a_row = 0
        self._rebuild_due = False  # a registered GPU was lost: its registration may not survive a reset
        self.registrations = 0  # event sets built so far (a new one per new inventory)
        # Registration may run on the sampler's thread (prepare) or on the watcher's: one at a time.
        self._registering = threading.RLock()
        self._prepared: tuple[Inventory, _Registration] | None = None  # registered by prepare, not yet adopted
        self._closed = False  # stopped: prepare builds no set that nobody would free

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        with self._registering:
            self._closed = False
        self._stop.clear()
        self._thread = supervised(self._run, name="nvml-events", stop=self._stop)
        self._thread.start()

    def prepare(self, inventory: Inventory) -> None:
        """Register ``inventory``'s GPUs now, on the caller's thread; the watcher thread adopts the set.

        The sampler calls this right after NVML initialised (the first time and after every
        re-initialisation), so events count from that moment, whatever the app does next and however
        late the watcher thread gets to run. Safe before ``start``: the set queues events until the
        thread waits on it.
        """
        with self._registering:
            if self._closed or inventory is self._followed:
                return  # stopped, or the watcher thread already registered this inventory itself
            self._discard_prepared()
            registration = self._register(inventory)
            if registration is not None:
                self._prepared = (inventory, registration)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop and free the event set; True when the thread has ended.

        The thread frees its set itself on the way out. If it is stuck inside NVML past ``timeout``
        (default: one wait timeout plus a second), it is left alone: freeing the set under a waiter
        is exactly the use-after-free NVML does not protect against.
        """
        with self._registering:
            self._closed = True
        self._stop.set()
        thread = self._thread
        if thread is None:
            with self._registering:
                self._discard_prepared()  # prepared but never waited on
            return True
        thread.join(self._timeout_ms / 1000 + 1.0 if timeout is None else timeout)
        return not thread.is_alive()

    @property
    def registered_gpus(self) -> tuple[int, ...]:
        """NVML indices of the GPUs whose events are being received (empty while none)."""
        current = self._current
        return current.registered if current is not None else ()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                inventory = self._inventory()
                if inventory is not self._followed:
                    self._replace(inventory)
                elif self._current is None and inventory is not None and self._clock() >= self._retry_at:
                    # NVML failed us without the sampler noticing (or no GPU accepted events yet): the
                    # same inventory is tried again, with a growing pause.
                    self._current = self._register(inventory)
                if self._current is None:
                    self._stop.wait(self._idle_poll_s)
                    continue
                due = self._current.missing or self._rebuild_due
                if due and self._followed is not None and self._clock() >= self._reregister_at:
                    self._rebuild(self._followed)  # a GPU left out may answer again (reset)
                    if self._current is None:
                        continue
                self._wait_once(self._current)
        finally:
            self._drop()  # a bug raised out of the loop: free the set; the supervisor starts the loop again
            if self._stop.is_set():
                with self._registering:
                    self._discard_prepared()

    def _replace(self, inventory: Inventory | None) -> None:
        """Follow a new inventory: drop the old set (its handles are stale), then adopt the set the
        sampler prepared for the new one, or register anew."""
        with self._registering:
            self._drop()
            self._followed = inventory
            prepared, self._prepared = self._prepared, None
            if prepared is not None and prepared[0] is inventory:
                self._current = prepared[1]
                return
            if prepared is not None:
                self._free(prepared[1])  # prepared for an inventory the sampler has since replaced
            if inventory is not None:
                self._current = self._register(inventory)

    def _wait_once(self, current: _Registration) -> None:
        try:
            data = self.nvml.call(pynvml.nvmlEventSetWait_v2, current.event_set, self._timeout_ms)
        except pynvml.NVMLError as exc:
            self._wait_failed(current, exc)
            return
        self._lost_in_a_row = 0
        self._deliver(current, data)

    def _wait_failed(self, current: _Registration, exc: pynvml.NVMLError) -> None:
        if exc.value == pynvml.NVML_ERROR_TIMEOUT:
            return  # nothing happened within the timeout (or an interrupt arrived): the idle path
        reason = describe(exc)
        kind = classify(exc)
        if kind is ErrorClass.NVML_DOWN:
            # The handles died with NVML. Follow the sampler's new inventory once it has re-initialised;
            # meanwhile the same inventory is retried after a growing pause (stale handles just fail).
            self._log.change("wait", ("down", reason), logging.WARNING,
                             "NVML went away under the event watcher; waiting for it to come back", error=reason)
            self._drop()
            self._retry_at = self._clock() + self._retry_delay
            return
        if kind is ErrorClass.DEVICE_LOST:
            self._lost_in_a_row += 1
            self._rebuild_due = True
            self._log.change("wait", ("lost", reason), logging.WARNING,
                             "a registered GPU is lost; events of the other GPUs keep arriving", error=reason)
            if self._lost_in_a_row >= 2:
                # The error repeats: rebuild without the lost GPU (its registration now fails).
                self._stop.wait(self._error_backoff_s)
                if not self._stop.is_set() and self._followed is not None:
                    self._rebuild(self._followed)
            return
        self._log.change("wait", ("error", reason), logging.WARNING,
                         "waiting for NVML events failed; retrying", error=reason)
        self._stop.wait(self._error_backoff_s)

    def _rebuild(self, inventory: Inventory) -> None:
        """Make before break: register a new set, drain the old one into on_event, then free it."""
        old = self._current
        self._current = self._register(inventory)
        self._lost_in_a_row = 0
        self._rebuild_due = False
        if old is None:
            return
        for _ in range(DRAIN_LIMIT):
            try:
                data = self.nvml.call(pynvml.nvmlEventSetWait_v2, old.event_set, 1)
            except pynvml.NVMLError:
                break
            self._deliver(old, data)
        self._free(old)

    def _deliver(self, current: _Registration, data: Any) -> None:
        device = current.devices.get(handle_value(data.device) or 0)
        if device is None:
            device = self._device_by_uuid(current, data.device)
        if device is None:
            self._log.once(("unknown-device", handle_value(data.device)), logging.WARNING,
                           "an NVML event names a GPU that is not in the inventory; it is dropped")
            return
        event = DeviceEvent(identity=device.identity, event_type=int(data.eventType), data=int(data.eventData),
                            gpu_instance_id=mig_instance_id(int(data.gpuInstanceId)),
                            compute_instance_id=mig_instance_id(int(data.computeInstanceId)))
        try:
            self._on_event(event)
        except Exception:
            log.exception("event consumer failed")

    def _device_by_uuid(self, current: _Registration, handle: Any) -> Device | None:
        """Fallback when the event's handle is not one we registered: match by UUID (as NVIDIA's plugin does)."""
        try:
            uuid = str(self.nvml.call(pynvml.nvmlDeviceGetUUID, handle))
        except pynvml.NVMLError:
            return None
        return next((device for device in current.devices.values() if device.identity.uuid == uuid), None)

    # -- registration --------------------------------------------------------------------------

    def _register(self, inventory: Inventory) -> _Registration | None:
        """A new event set with every GPU that supports events registered; None when none could be."""
        if not inventory.devices:
            return None  # NVML found no GPU; the sampler looks again and publishes a new inventory
        with self._registering:
            registration = self._try_register(inventory)
            if registration is None:
                self._retry_at = self._clock() + self._retry_delay
                self._retry_delay = min(self._retry_delay * 2, RETRY_MAX_S)
        return registration

    def _try_register(self, inventory: Inventory) -> _Registration | None:
        excluded: set[int] = set()
        for _attempt in range(len(inventory.devices) + 1):
            try:
                event_set = self.nvml.call(pynvml.nvmlEventSetCreate)
            except pynvml.NVMLError as exc:
                self._log.change("create", describe(exc), logging.WARNING,
                                 "cannot create an NVML event set; Xid events are not received", error=describe(exc))
                return None
            self._log.forget("create")
            devices: dict[int, Device] = {}
            missing: list[int] = sorted(excluded)
            restart = False
            for device in inventory.devices:
                if device.identity.index in excluded:
                    continue
                outcome = self._register_device(device, event_set)
                if outcome is _Outcome.REGISTERED:
                    devices[handle_value(device.handle) or 0] = device
                elif outcome is _Outcome.FAILED:
                    missing.append(device.identity.index)
                elif outcome is _Outcome.SET_UNDEFINED:
                    excluded.add(device.identity.index)
                    restart = True
                    break
                elif outcome is _Outcome.NVML_DOWN:
                    self._free_set(event_set)
                    return None
            if restart:
                self._free_set(event_set)
                continue
            if not devices:
                self._free_set(event_set)
                self._log.change("registered", (), logging.WARNING,
                                 "no GPU accepts NVML event registration; Xid metrics stay at 0")
                return None
            registered = tuple(sorted(device.identity.index for device in devices.values()))
            self.registrations += 1
            self._reregister_at = self._clock() + self._reregister_s
            self._retry_delay = self._error_backoff_s
            self._log.change("registered", registered, logging.INFO, "receiving NVML events",
                             gpus=",".join(str(index) for index in registered))
            return _Registration(event_set=event_set, devices=devices, registered=registered,
                                 missing=tuple(sorted(missing)))
        return None  # pragma: no cover - every attempt excludes one more GPU

    def _register_device(self, device: Device, event_set: Any) -> _Outcome:
        identity = device.identity
        try:
            supported = int(self.nvml.call(pynvml.nvmlDeviceGetSupportedEventTypes, device.handle))
            mask = self._requested & supported
            if not mask & XID_EVENT:
                self._log.once(("no-xid", identity.uuid), logging.INFO,
                               "GPU does not report Xid events through NVML; its Xid metrics stay at 0",
                               gpu=identity.index, supported=f"0x{supported:x}")
            if not mask:
                return _Outcome.SKIPPED
            self.nvml.call(pynvml.nvmlDeviceRegisterEvents, device.handle, mask, event_set)
        except pynvml.NVMLError as exc:
            return self._registration_failed(identity, exc)
        self._log.forget(("register", identity.uuid))
        return _Outcome.REGISTERED

    def _registration_failed(self, identity: DeviceIdentity, exc: pynvml.NVMLError) -> _Outcome:
        reason = describe(exc)
        if exc.value == pynvml.NVML_ERROR_UNKNOWN:
            self._log.change(("register", identity.uuid), reason, logging.WARNING,
                             "event registration failed with Unknown; the set is rebuilt without this GPU",
                             gpu=identity.index, error=reason)
            return _Outcome.SET_UNDEFINED
        kind = classify(exc)
        if kind is ErrorClass.NVML_DOWN:
            return _Outcome.NVML_DOWN
        if kind is ErrorClass.UNSUPPORTED:
            self._log.change(("register", identity.uuid), reason, logging.WARNING,
                             "GPU does not support NVML events; it is skipped, its Xid metrics stay at 0",
                             gpu=identity.index, error=reason)
            return _Outcome.SKIPPED
        self._log.change(("register", identity.uuid), reason, logging.WARNING,
                         "cannot register this GPU for NVML events; it is skipped and tried again later",
                         gpu=identity.index, error=reason)
        return _Outcome.FAILED

    # -- teardown ------------------------------------------------------------------------------

    def _discard_prepared(self) -> None:
        """Free a prepared set nobody adopted (caller holds ``_registering``)."""
        prepared, self._prepared = self._prepared, None
        if prepared is not None:
            self._free(prepared[1])

    def _drop(self) -> None:
        current, self._current = self._current, None
        self._lost_in_a_row = 0
        if current is not None:
            self._free(current)

    def _free(self, registration: _Registration) -> None:
        self._free_set(registration.event_set)

    def _free_set(self, event_set: Any) -> None:
        try:
            self.nvml.call(pynvml.nvmlEventSetFree, event_set)
        except pynvml.NVMLError as exc:
            # NVML already gone (driver unloaded): the set went with it.
            log.debug("freeing the event set failed", extra={"fields": {"error": describe(exc)}})
