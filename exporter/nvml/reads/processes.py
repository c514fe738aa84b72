"""The GPU's processes and their per-process utilization, on the process interval only.

Compute and graphics process lists are merged by PID (the larger memory figure wins); per-process
utilization since the previous read comes from ``exporter.nvml.process_utilization``. Runs only when
the sampler has a process interval (attribution needs it); between reads the last lists are served.
"""

from __future__ import annotations

import logging
from typing import Any

import pynvml

from exporter.nvml.client import mig_instance_id
from exporter.nvml.process_utilization import SizeRaceError
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext
from exporter.snapshot import GpuProcess, ProcessUtilization

# The two process lists, by the name a NotSupported answer is remembered under and the NVML function's
# (looked up at each call: a fake library replaces pynvml's functions).
PROCESS_LISTS = (("compute_processes", "nvmlDeviceGetComputeRunningProcesses"),
                 ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses"))


class ProcessesRead:
    name = "processes"
    needs: frozenset[str] = frozenset()
    produces = frozenset({"processes", "state.process_utilization"})

    def chosen(self, context: ReadContext) -> bool:
        return context.process_interval_s is not None

    def supported(self, state: DeviceState) -> bool:
        return True

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        state = cycle.state
        interval_s = context.process_interval_s
        assert interval_s is not None  # chosen only with a process interval
        if cycle.now - state.processes_read_at < interval_s:
            cycle.processes = state.processes
            return
        by_pid: dict[int, GpuProcess] = {}
        for name, function in PROCESS_LISTS:
            if name in state.unsupported_queries:
                continue
            try:
                listed = context.nvml.call(getattr(pynvml, function), state.device.handle)
            except Exception as exc:  # noqa: BLE001
                if context.handle_error(state, exc, what=name):
                    state.unsupported_queries.add(name)
                continue
            _merge(by_pid, listed)
        state.processes = tuple(sorted(by_pid.values(), key=lambda process: process.pid))
        state.process_utilization = _read_utilization(context, state, interval_s)
        state.processes_read_at = cycle.now
        cycle.processes = state.processes


def _merge(by_pid: dict[int, GpuProcess], listed: Any) -> None:
    for process in listed:
        used = process.usedGpuMemory
        known = by_pid.get(process.pid)
        if known is not None and (used is None or (known.used_memory_bytes or 0) >= used):
            continue
        by_pid[process.pid] = GpuProcess(pid=int(process.pid), used_memory_bytes=used,
                                         gpu_instance_id=mig_instance_id(process.gpuInstanceId),
                                         compute_instance_id=mig_instance_id(process.computeInstanceId))


def _read_utilization(context: ReadContext, state: DeviceState, interval_s: float) -> ProcessUtilization | None:
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
        result = reader.read(context.nvml, state.device.handle, context.wall(), interval_s)
    except SizeRaceError as exc:
        context.log.once(("transient", identity.uuid, "process utilization", "size"), logging.WARNING,
                         "reading failed; skipped this cycle", gpu=identity.index,
                         reading="process utilization", error=str(exc))
        return state.process_utilization
    except Exception as exc:  # noqa: BLE001 - classified: lost GPU / NVML down propagate
        context.handle_error(state, exc, what="process utilization")
        return state.process_utilization
    if result is None:
        context.log.once(("unsupported", identity.uuid, "process utilization"), logging.INFO,
                         "per-process utilization is not supported on this GPU or driver; its per-container "
                         "utilization families are omitted", gpu=identity.index, uuid=identity.uuid,
                         error=reader.unsupported)
    return result
