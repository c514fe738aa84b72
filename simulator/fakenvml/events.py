"""NVML events: event sets, registration, ``nvmlEventSetWait_v2`` and injected/scheduled Xids."""

from __future__ import annotations

import ctypes
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pynvml

from simulator.fakenvml.abi import (
    GPU_IS_LOST,
    HANDLE_BASE,
    HANDLE_STRIDE,
    INVALID_ARGUMENT,
    NOT_MIG,
    NOT_SUPPORTED,
    SUCCESS,
    TIMEOUT,
    UNINITIALIZED,
    c_int_value,
    c_symbol,
    handle_value,
    pointee,
    write_handle,
)
from simulator.fakenvml.device import SimulatedGpu
from simulator.fakenvml.state import LibraryState
from simulator.scenario import (
    XidEventSpec,
)

XID_EVENT: int = pynvml.nvmlEventTypeXidCriticalError
_GPU_UNAVAILABLE_EVENT: int = getattr(pynvml, "nvmlEventTypeGpuUnavailableError", 0x4000)
_EVENT_SET_BASE = 0x45564E540000  # "EVNT"
_EVENT_DEVICE_OFFSET: int = pynvml.c_nvmlEventData_t.device.offset
EVENT_POLL_S = 0.05  # longest sleep of a waiter between checks of scenario time


def _supported_events(gpu: SimulatedGpu) -> int:
    """What ``nvmlDeviceGetSupportedEventTypes`` reports: Xid and P-state everywhere, ECC events on ECC
    boards, DRAM retirement where pages are retired or rows remapped, MIG changes on MIG boards."""
    mask = XID_EVENT | pynvml.nvmlEventTypePState | _GPU_UNAVAILABLE_EVENT
    features = gpu.features
    if features.ecc:
        mask |= pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError
    if features.page_retirement or features.row_remapping:
        mask |= pynvml.nvmlEventTypeDramRetirementEvent | pynvml.nvmlEventTypeDramRetirementFailure
    if features.mig:
        mask |= pynvml.nvmlEventMigConfigChange
    return int(mask)


@dataclass(frozen=True)
class FakeEvent:
    at: float
    gpu: int
    event_type: int
    data: int
    gpu_instance_id: int = NOT_MIG
    compute_instance_id: int = NOT_MIG

    @classmethod
    def xid(cls, spec: XidEventSpec) -> FakeEvent:
        return cls(spec.at, spec.gpu, XID_EVENT, spec.xid,
                   NOT_MIG if spec.gpu_instance is None else spec.gpu_instance,
                   NOT_MIG if spec.compute_instance is None else spec.compute_instance)


@dataclass
class EventSet:
    """One ``nvmlEventSet_t``: which GPUs are registered for which types since when, and its queue."""

    cursor: int = 0  # next scheduled scenario event to look at
    types: dict[int, int] = field(default_factory=dict)  # GPU index -> registered event types
    since: dict[int, float] = field(default_factory=dict)  # GPU index -> scenario time of registration
    queue: deque[FakeEvent] = field(default_factory=deque)
    lost_reported: set[int] = field(default_factory=set)

    def forget(self, gpu: int) -> None:
        """The GPU was reset: its registration (and a pending lost report) is gone."""
        self.types.pop(gpu, None)
        self.since.pop(gpu, None)
        self.lost_reported.discard(gpu)

    def accepts(self, event: FakeEvent) -> bool:
        """Registered for this GPU and type, and registered before the event happened (nvml.h)."""
        return bool(self.types.get(event.gpu, 0) & event.event_type) and event.at >= self.since[event.gpu]



class EventsMixin(LibraryState):
    """Event sets and waits; ``inject_xid``/``inject_event`` raise events now, the scenario schedules others."""

    def inject_xid(self, gpu: int, xid: int, count: int = 1, gi: int | None = None, ci: int | None = None) -> None:
        """Raise ``count`` Xid ``xid`` events on ``gpu`` now (in MIG instance ``gi``/``ci`` when given).

        Every event set that has the GPU registered for Xid events receives them, and blocked
        ``nvmlEventSetWait_v2`` calls wake at once.
        """
        if not 0 < xid <= 0xFFFFFFFF or count < 1:
            raise ValueError("xid must be positive and count at least 1")
        self.inject_event(gpu, XID_EVENT, xid, count=count, gi=gi, ci=ci)

    def inject_event(self, gpu: int, event_type: int, data: int = 0, *, count: int = 1,
                     gi: int | None = None, ci: int | None = None) -> None:
        """Raise ``count`` NVML events of ``event_type`` (an ``nvmlEventType*`` bit) on ``gpu`` now."""
        self._check_gpu(gpu)
        if event_type <= 0 or event_type & (event_type - 1):
            raise ValueError("event_type must be a single nvmlEventType* bit")
        event = FakeEvent(self.elapsed(), gpu, event_type, data, NOT_MIG if gi is None else gi,
                           NOT_MIG if ci is None else ci)
        with self._events:
            for event_set in self._event_sets.values():
                if event_set.accepts(event):
                    event_set.queue.extend([event] * count)
            self._events.notify_all()

    def release_waits(self) -> None:
        """Wake every blocked ``nvmlEventSetWait_v2`` now: it returns TIMEOUT, as on an interrupt (nvml.h)."""
        with self._events:
            self._wait_generation += 1
            self._events.notify_all()

    @property
    def open_event_sets(self) -> int:
        """Event sets created and not yet freed (a clean shutdown leaves none)."""
        with self._events:
            return len(self._event_sets)

    def _event_set(self, handle: Any) -> EventSet | None:
        return self._event_sets.get(handle_value(handle) or 0)

    @c_symbol("nvmlEventSetCreate")
    def _impl_event_set_create(self, t: float, out: Any) -> int:
        code = self._system(t)
        if code:
            return code
        with self._events:
            self._next_event_set += 1
            value = _EVENT_SET_BASE + self._next_event_set * 0x10
            self._event_sets[value] = EventSet(cursor=self._first_due(t))
        write_handle(out, value)
        return SUCCESS

    @c_symbol("nvmlEventSetFree")
    def _impl_event_set_free(self, t: float, event_set: Any) -> int:
        code = self._system(t)
        if code:
            return code
        with self._events:
            if self._event_sets.pop(handle_value(event_set) or 0, None) is None:
                return INVALID_ARGUMENT
            self._events.notify_all()
        return SUCCESS

    @c_symbol("nvmlDeviceGetSupportedEventTypes", device=True)
    def _impl_supported_event_types(self, gpu: SimulatedGpu, t: float, out: Any) -> int:
        pointee(out).value = _supported_events(gpu)
        return SUCCESS

    @c_symbol("nvmlDeviceRegisterEvents", device=True)
    def _impl_register_events(self, gpu: SimulatedGpu, t: float, event_types: Any, event_set: Any) -> int:
        """nvml.h: NOT_SUPPORTED when any requested type is unsupported, and then none is registered."""
        mask = c_int_value(event_types)
        with self._events:
            target = self._event_set(event_set)
            if target is None:
                return INVALID_ARGUMENT
            if mask & ~_supported_events(gpu):
                return NOT_SUPPORTED
            target.types[gpu.index] = target.types.get(gpu.index, 0) | mask
            target.since.setdefault(gpu.index, t)
        return SUCCESS

    @c_symbol("nvmlEventSetWait_v2", blocking=True)
    def _impl_event_set_wait(self, t: float, event_set: Any, data: Any, timeout_ms: Any) -> int:
        """Block up to ``timeout_ms`` (real time) for the next event; TIMEOUT when none comes.

        Runs outside the driver lock. Wakes at once for injected events, frees and ``release_waits``;
        scenario Xids are picked up when due (re-checked at least every 50 ms, so a test that moves an
        injected clock needs no real waiting). A registered GPU that is lost answers GPU_IS_LOST once
        per set, after the events that happened before it.
        """
        deadline = time.monotonic() + c_int_value(timeout_ms) / 1000.0
        with self._events:
            generation = self._wait_generation
            while True:
                if not self._refcount:
                    return UNINITIALIZED
                target = self._event_set(event_set)
                if target is None:
                    return INVALID_ARGUMENT
                now = self._clock()
                self._collect_due(target, now)
                if target.queue:
                    self._write_event(pointee(data), target.queue.popleft())
                    return SUCCESS
                lost = next((index for index in sorted(target.types) if self._lost[index].active(now)
                             and index not in target.lost_reported), None)
                if lost is not None:
                    target.lost_reported.add(lost)
                    return GPU_IS_LOST
                remaining = deadline - time.monotonic()
                if remaining <= 0 or generation != self._wait_generation:
                    return TIMEOUT
                due = self._scheduled[target.cursor].at - now if target.cursor < len(self._scheduled) else remaining
                self._events.wait(max(0.0, min(remaining, due, EVENT_POLL_S)))

    def _first_due(self, t: float) -> int:
        """Index of the first scheduled event at or after ``t`` (a new set sees nothing older)."""
        index = 0
        while index < len(self._scheduled) and self._scheduled[index].at < t:
            index += 1
        return index

    def _collect_due(self, target: EventSet, now: float) -> None:
        scheduled = self._scheduled
        while target.cursor < len(scheduled) and scheduled[target.cursor].at <= now:
            event = scheduled[target.cursor]
            target.cursor += 1
            if target.accepts(event):
                target.queue.append(event)

    def _write_event(self, data: Any, event: FakeEvent) -> None:
        ctypes.c_void_p.from_address(ctypes.addressof(data) + _EVENT_DEVICE_OFFSET).value = (
            HANDLE_BASE + event.gpu * HANDLE_STRIDE)
        data.eventType = event.event_type
        data.eventData = event.data
        data.gpuInstanceId = event.gpu_instance_id
        data.computeInstanceId = event.compute_instance_id
