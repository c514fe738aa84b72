"""NVML field values (``nvmlDeviceGetFieldValues``): every field id the plan needs in one batched call.

Fields the GPU answered NotSupported to are left out of later batches; fields that only stand in
for GPM rows (``SamplingPlan.fallback_keys``) are read only on a GPU without GPM. A batch that fails
as a whole (an old driver without the symbol) takes every field with it.
"""

from __future__ import annotations

from typing import Any

import pynvml

from exporter.nvml.queries import decode_field_value
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext


class FieldValuesRead:
    name = "field values"
    needs = frozenset({"state.gpm"})
    produces = frozenset({"field_values", "field_times"})

    def chosen(self, context: ReadContext) -> bool:
        return bool(context.plan.field_keys)

    def supported(self, state: DeviceState) -> bool:
        return True

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        state = cycle.state
        skipped = context.plan.fallback_keys if state.gpm.supported else frozenset()  # GPM serves those rows
        keys = [key for key in context.plan.field_keys if key not in state.unsupported_fields and key not in skipped]
        if not keys:
            return
        try:
            entries = context.nvml.call(pynvml.nvmlDeviceGetFieldValues, state.device.handle, keys)
        except Exception as exc:  # noqa: BLE001
            # The whole batch failed (e.g. an old driver without the symbol): every field goes with it.
            if context.handle_error(state, exc, what="nvmlDeviceGetFieldValues"):
                state.unsupported_fields.update(keys)
            return
        for key, entry in zip(keys, entries, strict=False):
            if entry.nvmlReturn == pynvml.NVML_SUCCESS:
                _decoded(context, cycle, key, entry)
            elif context.handle_error(state, pynvml.NVMLError(entry.nvmlReturn), what=f"field {key[0]}"):
                state.unsupported_fields.add(key)


def _decoded(context: ReadContext, cycle: DeviceCycle, key: tuple[int, int], entry: Any) -> None:
    try:
        cycle.field_values[key] = decode_field_value(entry)
    except ValueError:
        return
    cycle.field_times[key] = entry.timestamp / 1e6 if entry.timestamp else context.clock()
