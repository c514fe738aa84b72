"""GPM metrics of the whole GPU (``exporter.nvml.gpm.GpmReader``: Hopper and newer), in NVML units.

Support is probed once per GPU; a GPU without GPM gets one warning naming the profiling rows it
cannot serve (rows with field-value fallbacks are read by ``field_values`` instead). With MIG on, the
GPU keeps its device-scoped metrics and each GPU instance is sampled by ``mig_instances``
(``gpm_failed`` is the failure handling both share).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from exporter.nvml.client import ErrorClass, classify, describe
from exporter.nvml.gpm import gpm_unsupported
from exporter.nvml.reads.base import DeviceCycle, DeviceState, ReadContext


class GpmRead:
    name = "GPM"
    needs = frozenset({"state.mig"})
    produces = frozenset({"gpm_values", "state.gpm"})

    def chosen(self, context: ReadContext) -> bool:
        return bool(context.plan.gpm_metrics or context.plan.instance.gpm_metrics)

    def supported(self, state: DeviceState) -> bool:
        return state.gpm.supported is not False

    def read(self, context: ReadContext, cycle: DeviceCycle) -> None:
        state = cycle.state
        plan = context.plan
        metrics = plan.gpm_device_metrics if state.mig.enabled else plan.gpm_metrics
        if not (metrics or (state.mig.enabled and plan.instance.gpm_metrics)):
            return
        if not _probe(context, state):
            return
        if not metrics:
            return
        try:
            cycle.gpm_values = state.gpm.read(context.nvml, state.device.handle, metrics, context.clock())
        except Exception as exc:  # noqa: BLE001
            gpm_failed(context, state, exc, None, metrics)


def _probe(context: ReadContext, state: DeviceState) -> bool:
    """Whether the GPU samples GPM (asked once); a GPU without it is named once with the rows it omits."""
    try:
        supported = state.gpm.probe(context.nvml, state.device.handle)
    except Exception as exc:  # noqa: BLE001
        if not gpm_unsupported(exc):
            context.handle_error(state, exc, what="GPM")  # raises for a lost GPU / NVML down
            return False
        state.gpm.supported = supported = False
    if not supported:
        _say_unsupported(context, state)
    return supported


def gpm_failed(context: ReadContext, state: DeviceState, exc: Exception, target: int | None,
               metrics: Sequence[int]) -> None:
    """A GPM sample or metrics call failed for one target (the GPU, or one GPU instance).

    Only NotSupported-like answers stop the target's metrics for good (logged once); a lost GPU or
    NVML going away propagates; anything else (including InvalidArgument, which NVML also uses
    for samples it cannot compare) restarts the target's sample chain at the next cycle.
    """
    identity = state.device.identity
    where = "the whole GPU" if target is None else f"GPU instance {target}"
    if gpm_unsupported(exc):
        state.gpm.unsupported_metrics.update((target, metric) for metric in metrics)
        context.log.once(("gpm-target-unsupported", identity.uuid, target is None), logging.WARNING,
                         "GPM samples are not supported here; its profiling rows are omitted",
                         gpu=identity.index, uuid=identity.uuid, target=where, error=describe(exc))
        return
    if classify(exc) in (ErrorClass.DEVICE_LOST, ErrorClass.NVML_DOWN):
        context.handle_error(state, exc, what="GPM")  # raises
    context.log.once(("gpm-transient", identity.uuid, describe(exc)), logging.WARNING,
                     "GPM sample failed; its sample chain restarts next cycle", gpu=identity.index,
                     target=where, error=describe(exc))
    state.gpm.forget(context.nvml, target)


def _say_unsupported(context: ReadContext, state: DeviceState) -> None:
    """One warning per GPU naming the profiling rows it cannot serve (a GPU without GPM)."""
    gpm = [spec for spec in context.plan.specs if spec.read.gpm_metric is not None]
    omitted = [spec.name for spec in gpm if not spec.read.fallback_keys]
    fallback = [spec.name for spec in gpm if spec.read.fallback_keys]
    if not omitted:
        return
    identity = state.device.identity
    context.log.once(("gpm-unsupported", identity.uuid), logging.WARNING,
                     "profiling metrics need NVML GPM (Hopper or newer), which this GPU does not support; "
                     "their rows are omitted for it", gpu=identity.index, uuid=identity.uuid,
                     omitted=",".join(omitted), from_field_values=",".join(fallback) or "-")
