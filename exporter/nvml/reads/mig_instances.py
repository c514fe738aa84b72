"""One reading per MIG GPU instance: memory on its MIG handle, GPM from its GPU-instance sample.

Runs on a GPU with MIG on (``supported``). An instance that was destroyed meanwhile marks the layout
stale (``mig_layout`` probes it again next cycle); a query a MIG device answers NotSupported to is
not asked again until the layout changes. Peaks are kept per GPU-instance id.
"""

from __future__ import annotations

import logging

from exporter.nvml.mig import instance_values, is_gone
from exporter.nvml.peaks import DevicePeaks
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext
from exporter.nvml.reads.gpm_metrics import gpm_failed
from exporter.snapshot import MigReading


class MigInstancesRead:
    name = "MIG instances"
    needs = frozenset({"state.mig", "state.gpm"})
    produces = frozenset({"mig"})

    def chosen(self, context: ReadContext) -> bool:
        return True  # the instances' identities are published even when no instance row is enabled

    def supported(self, state: DeviceState) -> bool:
        return state.mig.enabled

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        state = cycle.state
        identity = state.device.identity
        readings: list[MigReading] = []

        def unsupported(what: str) -> None:
            state.mig_unsupported_queries.add(what)
            context.log.once(("unsupported", identity.uuid, f"MIG {what}"), logging.INFO,
                             "reading not supported on this GPU's MIG devices; it is omitted",
                             gpu=identity.index, reading=what)

        for device in state.mig.instances():
            gpu_instance_id = device.identity.gpu_instance_id
            try:
                gpm_values = _instance_gpm(context, state, gpu_instance_id)
                values = instance_values(context.nvml, device, context.plan.instance, state.mig_query_state,
                                         gpm_values=gpm_values, on_unsupported=unsupported,
                                         skip=state.mig_unsupported_queries)
            except Exception as exc:  # noqa: BLE001
                if is_gone(exc):  # the instance was destroyed: look at the layout again next cycle
                    state.mig.mark_stale()
                    continue
                context.handle_error(state, exc, what=f"MIG instance {gpu_instance_id}")
                continue
            peaks = state.mig_peaks.get(gpu_instance_id)
            if peaks is None:
                peaks = state.mig_peaks[gpu_instance_id] = DevicePeaks(context.peak_window_s)
            readings.append(MigReading(identity=device.identity, values=values, peaks=peaks.add(cycle.now, values)))
        cycle.mig = tuple(readings)


def _instance_gpm(context: ReadContext, state: DeviceState, gpu_instance_id: int) -> dict[int, float]:
    metrics = context.plan.instance.gpm_metrics
    if not metrics or not state.gpm.supported:
        return {}
    try:
        return state.gpm.read(context.nvml, state.device.handle, metrics, context.clock(), gpu_instance_id)
    except Exception as exc:
        if is_gone(exc):
            raise  # the GPU instance was destroyed: the caller re-probes the layout
        gpm_failed(context, state, exc, gpu_instance_id, metrics)
        return {}
