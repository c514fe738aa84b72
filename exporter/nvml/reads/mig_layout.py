"""The MIG layout of a GPU (``exporter.nvml.mig.MigTracker``): probed every ``MIG_CHECK_INTERVAL_S``.

Runs first in every cycle, whatever the plan: the layout decides which readings exist (utilization is
NotSupported with MIG on) and names the MIG devices the kubelet hands to pods (``Snapshot.migs``).
A changed layout forgets what the GPU answered NotSupported to, and restarts the GPM sample chains.
"""

from __future__ import annotations

import logging

from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext


class MigLayoutRead:
    name = "MIG layout"
    needs: frozenset[str] = frozenset()
    produces = frozenset({"state.mig"})

    def chosen(self, context: ReadContext) -> bool:
        return True

    def supported(self, state: DeviceState) -> bool:
        return True

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        state = cycle.state
        tracker = state.mig
        was_enabled = tracker.enabled
        try:
            changed = tracker.refresh(context.nvml, state.device.handle, state.device.identity.uuid, cycle.now)
        except Exception as exc:  # noqa: BLE001 - classified: lost GPU / NVML down propagate
            context.handle_error(state, exc, what="MIG layout")
            return
        if changed:
            _layout_changed(context, state, was_enabled)


def _layout_changed(context: ReadContext, state: DeviceState, was_enabled: bool) -> None:
    tracker = state.mig
    identity = state.device.identity
    state.mig_peaks.clear()  # GPU-instance ids may now name other instances
    state.mig_unsupported_queries.clear()  # new MIG devices may answer what the old ones did not
    if tracker.enabled != was_enabled:
        # MIG mode decides which readings exist (utilization is NotSupported with MIG on): ask again.
        state.unsupported_queries.clear()
        state.unsupported_fields.clear()
        state.static_results = None
        state.gpm.reset(context.nvml)
        state.utilization.reset()
        state.process_utilization = None
    for target in state.gpm.targets():
        if target is not None:  # GPU-instance ids may be reused by a different instance
            state.gpm.forget(context.nvml, target)
    if tracker.enabled or was_enabled:  # a MIG-capable GPU that keeps MIG off is not news
        layout = ",".join(f"{device.identity.profile}:GI{device.identity.gpu_instance_id}"
                          f"/CI{device.identity.compute_instance_id}" for device in tracker.devices)
        context.log.change(("mig", identity.uuid), (tracker.enabled, layout), logging.INFO,
                           "MIG layout", gpu=identity.index, uuid=identity.uuid, enabled=tracker.enabled,
                           devices=layout or "-")
