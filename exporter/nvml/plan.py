"""The sampling plan: what to read per GPU, derived once from the enabled counter rows.

The plan decides which kinds of read run (``exporter.nvml.reads``: each read's ``chosen(plan, ...)``)
and, inside each, which queries, field ids and GPM metrics it asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.metrics.catalog import CATALOG, FieldSpec, Scope
from exporter.nvml.mig import InstancePlan
from exporter.nvml.queries import QUERIES

T = TypeVar("T")


@dataclass(frozen=True)
class SamplingPlan:
    """What to read per GPU, derived once from the enabled counter rows.

    ``dependencies`` are readings other components need every cycle although the CSV does not export
    them: the ``needs`` of enabled rows (the clock-event reasons bitmask behind DCGM_EXP_CLOCK_EVENTS_*)
    and readings a component asks for itself (the GPU health gauge's row-remap and retired-page flags).
    They ride in the same queries and the same batched field call, land in ``DeviceReading.values``
    under their catalog names, and are not listed as unsupported fields (no CSV row asked for them).
    """

    specs: tuple[FieldSpec, ...]
    queries: tuple[str, ...]
    static_queries: tuple[str, ...]
    field_keys: tuple[tuple[int, int], ...]  # (field id, scope id) for the batched call
    # GPM and MIG (exporter/nvml/gpm.py, mig.py): metric ids per GPU, those a MIG parent keeps
    # (device-scoped), field keys only needed when a GPU has no GPM, queries only instance rows use.
    gpm_metrics: tuple[int, ...] = ()
    gpm_device_metrics: tuple[int, ...] = ()
    fallback_keys: frozenset[tuple[int, int]] = frozenset()
    instance_only_queries: frozenset[str] = frozenset()
    instance: InstancePlan = field(default_factory=lambda: InstancePlan((), (), ()))
    # Readings other components need (health, clock events) even when the CSV does not export them.
    dependencies: tuple[FieldSpec, ...] = ()

    @property
    def readings(self) -> tuple[FieldSpec, ...]:
        return (*self.specs, *self.dependencies)

    @classmethod
    def for_specs(cls, specs: Sequence[FieldSpec], dependencies: Sequence[FieldSpec] = ()) -> SamplingPlan:
        served = tuple(spec for spec in specs if spec.served and not spec.is_label)
        extra = _dependencies(served, dependencies)
        readings = (*served, *extra)
        queries = _unique(name for spec in readings for name in spec.read.queries)
        dynamic = tuple(name for name in queries if not QUERIES[name].static)
        fields = _unique(key for spec in readings for key in spec.read.field_keys)
        gpm = [spec for spec in served if spec.read.gpm_metric is not None]
        fallbacks = frozenset(key for spec in gpm for key in spec.read.fallback_keys) - set(fields)
        return cls(specs=served, queries=dynamic, static_queries=tuple(name for name in queries if name not in dynamic),
                   field_keys=(*fields, *sorted(fallbacks)),
                   gpm_metrics=_gpm_metrics(gpm),
                   gpm_device_metrics=_gpm_metrics(spec for spec in gpm if spec.scope is not Scope.INSTANCE),
                   fallback_keys=fallbacks,
                   instance_only_queries=frozenset(dynamic) - _device_queries(readings),
                   instance=InstancePlan.for_specs(served),
                   dependencies=extra)


def _dependencies(served: Sequence[FieldSpec], dependencies: Sequence[FieldSpec]) -> tuple[FieldSpec, ...]:
    """Served readings other components need although the CSV does not export them, each once."""
    wanted = [*dependencies, *(CATALOG.lookup(name) for spec in served for name in spec.needs)]
    return _unique(spec for spec in wanted if spec is not None and spec.served and spec not in served)


def _gpm_metrics(specs: Iterable[FieldSpec]) -> tuple[int, ...]:
    return _unique(metric for spec in specs if (metric := spec.read.gpm_metric) is not None)


def _device_queries(readings: Iterable[FieldSpec]) -> set[str]:
    """Named queries some whole-GPU row needs (the others are read per MIG instance when MIG is on)."""
    return {name for spec in readings if spec.scope is not Scope.INSTANCE for name in spec.read.queries}


def _unique(items: Iterable[T]) -> tuple[T, ...]:
    """The items in first-seen order, each once (the plan's call order follows the CSV's)."""
    return tuple(dict.fromkeys(items))
