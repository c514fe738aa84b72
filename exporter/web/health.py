"""What /health answers: 200 only when the exporter is actually seeing GPUs, 503 with the reason otherwise.

dcgm-exporter's /health says OK while the exporter is blind (no GPUs, stale data); Kubernetes then
keeps a useless pod "ready". Here health means: NVML is up, at least one GPU was found, and a
complete sampling cycle finished within the last three collect intervals. When a cycle is stuck
inside an NVML call, the reason names that call and the GPU, so the operator knows what hangs.

This is a pure function of values the sources published, evaluated per request (no I/O).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.conditions import STALE_AFTER_INTERVALS, stale_after_s
from exporter.snapshot import InFlight, Snapshot

STALE_INTERVALS = STALE_AFTER_INTERVALS  # one bound for the watchdog, /health and every view (exporter.conditions)


@dataclass(frozen=True)
class HealthReport:
    healthy: bool
    reason: str


def stale_limit_s(interval_s: float) -> float:
    return stale_after_s(interval_s)


def stalled_call(in_flight: InFlight | None, now: float, interval_s: float) -> InFlight | None:
    """The NVML call in flight, if it has been running longer than the staleness limit."""
    if in_flight is not None and now - in_flight.started > stale_limit_s(interval_s):
        return in_flight
    return None


def describe_call(call: InFlight, now: float) -> str:
    where = f" on GPU {call.gpu}" if call.gpu is not None else ""
    return f"NVML call {call.function}{where} has not returned for {now - call.started:.1f} s"


def evaluate(snapshot: Snapshot, now: float, interval_s: float, in_flight: InFlight | None) -> HealthReport:
    status = snapshot.status
    if not status.nvml_up:
        return HealthReport(False, f"NVML not available: {status.nvml_error or 'not initialised'}")
    if status.device_count == 0:
        return HealthReport(False, "NVML found no GPU on this node")
    stall = stalled_call(in_flight, now, interval_s)
    if status.last_sample_monotonic == 0.0:
        reason = "no complete sampling cycle yet"
        return HealthReport(False, reason + (f"; {describe_call(stall, now)}" if stall else ""))
    age = now - status.last_sample_monotonic
    limit = stale_limit_s(interval_s)
    if age > limit:
        reason = f"last complete sample is {age:.1f} s old (limit {limit:.1f} s)"
        if stall is not None:
            reason += f"; {describe_call(stall, now)}"
        return HealthReport(False, reason)
    lost = sum(1 for reading in snapshot.devices if not reading.up)
    suffix = f"; {lost} of {status.device_count} GPUs lost" if lost else ""
    return HealthReport(True, f"OK: {status.device_count} GPUs, last sample {age:.1f} s ago{suffix}")
