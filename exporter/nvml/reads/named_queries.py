"""Named NVML queries (``exporter.nvml.queries.QUERIES``): one call may serve several catalog rows.

Static queries (the GPU's name, its limits) are read once per plan and kept; the others every cycle.
With MIG on, queries only instance rows use are read per MIG device instead (``mig_instances``). A
query the GPU answers NotSupported to is not asked again.
"""

from __future__ import annotations

from exporter.nvml.queries import QUERIES
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext


class NamedQueriesRead:
    name = "named queries"
    needs = frozenset({"state.mig"})
    produces = frozenset({"results"})

    def chosen(self, context: ReadContext) -> bool:
        return bool(context.plan.queries or context.plan.static_queries)

    def supported(self, state: DeviceState) -> bool:
        return True

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        plan = context.plan
        state = cycle.state
        if state.static_results is None:
            state.static_results = {}
            for name in plan.static_queries:
                result = _call_query(context, state, name)
                if result is not None:
                    state.static_results[name] = result
        cycle.results.update(state.static_results)
        mig_enabled = state.mig.enabled
        for name in plan.queries:
            if mig_enabled and name in plan.instance_only_queries:
                continue  # read per MIG instance instead (flex mode: no parent framebuffer rows)
            result = _call_query(context, state, name)
            if result is not None:
                cycle.results[name] = result


def _call_query(context: ReadContext, state: DeviceState, name: str) -> dict[str, float] | None:
    if name in state.unsupported_queries:
        return None
    try:
        return QUERIES[name].run(context.nvml, state.device.handle, state.query_state)
    except Exception as exc:  # noqa: BLE001 - every NVML failure is classified, none may stop the loop
        if context.handle_error(state, exc, what=name):
            state.unsupported_queries.add(name)
        return None
