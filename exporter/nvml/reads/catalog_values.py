"""The catalog's rows of the whole GPU from this cycle's readings: each ``FieldSpec.read.value(cycle)``.

Makes no NVML call: it turns what ``named_queries``, ``gpm_metrics`` and ``field_values`` read into
DCGM-unit values under the rows' names (and the dependencies other components need). With MIG on,
instance-scoped rows are reported per GPU instance (``mig_instances``), like dcgm-exporter's flex mode.
"""

from __future__ import annotations

from exporter.metrics.catalog import Scope
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext


class CatalogValuesRead:
    name = "catalog values"
    needs = frozenset({"results", "gpm_values", "field_values", "field_times"})
    produces = frozenset({"values"})

    def chosen(self, context: ReadContext) -> bool:
        return bool(context.plan.readings)

    def supported(self, state: DeviceState) -> bool:
        return True

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        mig_enabled = cycle.state.mig.enabled
        for spec in context.plan.readings:
            if mig_enabled and spec.scope is Scope.INSTANCE:
                continue  # reported per GPU instance (MigReading), like dcgm-exporter's flex mode
            value = spec.read.value(cycle)
            if value is not None:
                cycle.values[spec.name] = value
