"""Rendering: a pure function from the sources' immutable values to Prometheus metric families.

Nothing here performs I/O or reads a clock; the exposition cache calls ``render`` once per new
snapshot (not per scrape) and tests call it with hand-built values.

Label names and order are dcgm-exporter's (its ``gpuMetricsFormat`` template in
``internal/pkg/rendermetrics/render_metrics.go``): ``gpu, UUID,
pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], Hostname, <CSV label rows>``, then the
workload labels ``container, namespace, pod, ...`` added by the attribution component. A GPU that
no single pod holds carries no workload labels at all (never empty strings).

Other components (attribution, Xid watcher, health, GPM) contribute families through
``FamilyBuilder`` callables that receive the same ``RenderContext``, so identity labels are built in
exactly one place.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric

from exporter import __version__
from exporter.metrics.catalog import MIB, dcgm_number
from exporter.metrics.counters import CounterSet
from exporter.metrics.owned import PEAK_FAMILIES, family_name, owned
from exporter.metrics.selection import DEFAULT as ALL_DEVICES
from exporter.metrics.selection import DeviceSelection, Entity, select
from exporter.snapshot import DeviceIdentity, InFlight, MigIdentity, Snapshot

WorkloadLabeler = Callable[[DeviceIdentity, int | None], Sequence[Mapping[str, str]]]


def no_workloads(_identity: DeviceIdentity, _gpu_instance_id: int | None) -> Sequence[Mapping[str, str]]:
    return ({},)


# (identity, gpu instance, field) -> the workload samples (extra labels, value) that replace the per-workload
# copies of that field's device value, or None to repeat it (--kubernetes-virtual-gpus: exporter.kube.series).
FieldWorkloads = Callable[[DeviceIdentity, int | None, str], Sequence[tuple[Mapping[str, str], float]] | None]


def no_field_workloads(_identity: DeviceIdentity, _gpu_instance_id: int | None,
                       _field: str) -> Sequence[tuple[Mapping[str, str], float]] | None:
    return None


@dataclass(frozen=True)
class RenderOptions:
    hostname: str | None  # None: --no-hostname
    replace_blanks_in_model_name: bool = False
    devices: DeviceSelection = ALL_DEVICES  # -d: which GPUs / GPU instances the CSV rows are reported for
    use_old_namespace: bool = False  # -o: dcgm-exporter 1.x label names (uuid instead of UUID)
    # The node label's name: Hostname (dcgm-exporter <= 4.8.2) or hostname (4.8.3+), --dcgm-exporter-compat.
    hostname_label: str = "Hostname"


@dataclass(frozen=True)
class RenderContext:
    """Everything a family builder may look at. Immutable; built once per render."""

    snapshot: Snapshot
    counters: CounterSet
    options: RenderOptions
    workloads: WorkloadLabeler = no_workloads
    field_workloads: FieldWorkloads = no_field_workloads
    stall: InFlight | None = None  # an NVML call in flight longer than the staleness limit
    # This render's join of GPUs to pods (-k), set by the Kubernetes context hook (exporter/kube/wiring.py)
    # so the payload series' workload labels and the attribution's own families come from one value. The
    # renderer only carries it (an ``exporter.kube.attribution.AttributionSnapshot``): metrics sits below
    # kube in the layers (pyproject.toml [tool.importlinter]) and never imports it, not even for its type.
    attribution: object | None = None

    def identity_labels(self, identity: DeviceIdentity, mig: MigIdentity | None = None) -> dict[str, str]:
        """gpu, UUID, pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], Hostname (or hostname)."""
        model = identity.model.replace(" ", "-") if self.options.replace_blanks_in_model_name else identity.model
        labels = {
            "gpu": str(identity.index),
            "uuid" if self.options.use_old_namespace else "UUID": identity.uuid,
            "pci_bus_id": identity.pci_bus_id,
            "device": identity.device_name,
            "modelName": model,
        }
        if mig is not None:
            labels["GPU_I_PROFILE"] = mig.profile
            labels["GPU_I_ID"] = str(mig.gpu_instance_id)
        if self.options.hostname is not None:
            labels[self.options.hostname_label] = self.options.hostname
        return labels

    def base_labels(self, identity: DeviceIdentity, mig: MigIdentity | None = None) -> dict[str, str]:
        """Identity labels plus the CSV's label rows (e.g. DCGM_FI_DRIVER_VERSION)."""
        labels = self.identity_labels(identity, mig)
        for row in self.counters.labels:
            value = row.spec.read.label(identity, self.snapshot.status)
            if value:
                labels[row.name] = value
        return labels

    def series_label_sets(self, identity: DeviceIdentity, mig: MigIdentity | None = None) -> list[dict[str, str]]:
        """Base labels extended by each workload label set (one set, or one per pod in virtual-GPU mode)."""
        base = self.base_labels(identity, mig)
        gpu_instance_id = mig.gpu_instance_id if mig is not None else None
        return [{**base, **extension} for extension in self.workloads(identity, gpu_instance_id)]


FamilyBuilder = Callable[[RenderContext], Iterable[Metric]]


def dcgm_families(ctx: RenderContext) -> list[Metric]:
    """One family per active CSV row, one sample per selected GPU / GPU instance (and workload) that has it,
    then the ``DCGM_EXP_*_PEAK`` families of the enabled peak readings (``_peak_family``).

    Which entities: ``-d/--devices`` (``exporter.metrics.selection``); by default every GPU and every
    MIG GPU instance with its own readings.
    """
    families: list[Metric] = []
    entities = list(select(ctx.options.devices, ctx.snapshot.devices))
    label_sets = [ctx.series_label_sets(entity.reading.identity, entity.mig.identity if entity.mig else None)
                  for entity in entities]
    for row in ctx.counters.metrics:
        if row.spec.read.produced_by is not None:
            continue  # rendered by the producing component's own builder (it adds its own labels)
        family = Metric(row.name, row.help, row.prom_type)
        for entity, labels in zip(entities, label_sets, strict=True):
            value = entity.values.get(row.spec.name)
            mig = entity.mig.identity if entity.mig else None
            own = ctx.field_workloads(entity.reading.identity, mig.gpu_instance_id if mig else None, row.name)
            if own is None:
                _add_samples(family, row.name, value, labels)
                continue
            base = ctx.base_labels(entity.reading.identity, mig)  # the device series, then each workload's own
            _add_samples(family, row.name, value, (base,))
            for extension, own_value in own:
                family.add_sample(row.name, {**base, **extension}, own_value)
        families.append(family)
    enabled = {row.spec.name for row in ctx.counters.metrics}
    for field_name, name in PEAK_FAMILIES.items():
        if field_name in enabled:
            families.append(_peak_family(ctx, name, field_name, entities, label_sets))
    return families


def _peak_family(ctx: RenderContext, name: str, field_name: str, entities: Sequence[Entity],
                 label_sets: Sequence[list[dict[str, str]]]) -> Metric:
    """``DCGM_EXP_*_PEAK``: a peak reading's trailing-window maximum (exporter/nvml/peaks.py).

    Rendered with the CSV rows so it reuses their label sets: one sample per selected GPU or GPU
    instance that has the reading, with the very labels of that reading's own series, so
    ``DCGM_EXP_FB_USED_PEAK`` and ``DCGM_FI_DEV_FB_USED`` divide, compare and join one to one. A GPU
    instance has only its own peaks (not its parent's chip-wide ones). Only for readings whose CSV
    row is enabled (the sampler reads no other). Where the reading's series are per workload
    (``field_workloads``: --kubernetes-virtual-gpus), so are its peak's: the device's peak, then each
    workload's own (exporter/kube/container_peaks.py), never the device's repeated under a pod's labels.
    """
    family = owned_family(name)
    for entity, labels in zip(entities, label_sets, strict=True):
        mig = entity.mig.identity if entity.mig else None
        peak = (entity.mig.peaks if entity.mig is not None else entity.reading.peaks).get(field_name)
        own = ctx.field_workloads(entity.reading.identity, mig.gpu_instance_id if mig else None, name)
        if own is None:
            _add_samples(family, name, peak, labels)
            continue
        base = ctx.base_labels(entity.reading.identity, mig)
        _add_samples(family, name, peak, (base,))
        for extension, own_value in own:
            family.add_sample(name, {**base, **extension}, own_value)
    return family


def _add_samples(family: Metric, name: str, value: float | None, label_sets: Iterable[Mapping[str, str]]) -> None:
    if value is None:
        return
    for labels in label_sets:
        family.add_sample(name, dict(labels), value)


def owned_family(name: str) -> Metric:
    """An empty family for an exporter-owned metric, with the documented help text and type."""
    spec = owned(name)
    return Metric(family_name(spec), spec.help, spec.type)


def self_families(ctx: RenderContext) -> list[Metric]:
    """The exporter's own health, under ``gpu_pod_exporter_`` with Prometheus naming."""
    status = ctx.snapshot.status
    families: list[Metric] = []

    def single(name: str, value: float, labels: Mapping[str, str] | None = None) -> None:
        family = owned_family(name)
        family.add_sample(name, dict(labels or {}), value)
        families.append(family)

    single("gpu_pod_exporter_build_info", 1, {"version": __version__, "python_version": platform.python_version()})
    single("gpu_pod_exporter_nvml_up", 1 if status.nvml_up else 0)
    single("gpu_pod_exporter_devices", status.device_count)
    up_family = owned_family("gpu_pod_exporter_device_up")
    for reading in ctx.snapshot.devices:
        # The identity labels minus modelName: self-metrics follow Prometheus naming (snake_case labels)
        # and still join with the DCGM series on gpu/UUID/Hostname.
        labels = {key: value for key, value in ctx.identity_labels(reading.identity).items() if key != "modelName"}
        up_family.add_sample("gpu_pod_exporter_device_up", labels, 1 if reading.up else 0)
    families.append(up_family)
    single("gpu_pod_exporter_sampling_duration_seconds", status.last_cycle_duration_s)
    if status.last_sample_wall_time:
        single("gpu_pod_exporter_last_sample_timestamp_seconds", status.last_sample_wall_time)
    single("gpu_pod_exporter_nvml_calls_per_cycle", status.last_cycle_nvml_calls)
    single("gpu_pod_exporter_nvml_calls_total", status.nvml_calls_total)
    single("gpu_pod_exporter_sampling_cycles_total", status.cycles)
    single("gpu_pod_exporter_sampler_stalled", 1 if ctx.stall is not None else 0)
    unsupported = owned_family("gpu_pod_exporter_field_unsupported")
    identities = {reading.identity.index: reading.identity for reading in ctx.snapshot.devices}
    for index, field_name in status.unsupported_fields:
        identity = identities.get(index)
        if identity is not None:
            unsupported.add_sample("gpu_pod_exporter_field_unsupported",
                                   {"gpu": str(index), "UUID": identity.uuid, "field": field_name}, 1)
    families.append(unsupported)
    # From the counters in use (Hub.set_counters swaps them on a ConfigMap reload, and the cache re-renders).
    skipped = owned_family("gpu_pod_exporter_counters_skipped_rows")
    for reason, count in ctx.counters.skipped.items():
        skipped.add_sample("gpu_pod_exporter_counters_skipped_rows", {"reason": reason}, count)
    families.append(skipped)
    if status.peak_window_s:
        single("gpu_pod_exporter_peak_window_seconds", status.peak_window_s)
    return families


def framebuffer_total_family(ctx: RenderContext) -> list[Metric]:
    """``DCGM_EXP_GPU_FB_TOTAL``: each GPU's whole framebuffer, from the inventory (``DeviceIdentity``).

    The one GPU-level total of a MIG-enabled GPU (its CSV framebuffer series are per instance), so a
    view of the card divides its instances' used memory by the card, not by the sum of the instances.
    Identity labels only: the card's size belongs to no pod. Not subject to ``-d``: it describes the
    card, like ``gpu_pod_exporter_device_up``.
    """
    family = owned_family("DCGM_EXP_GPU_FB_TOTAL")
    for reading in ctx.snapshot.devices:
        total = reading.identity.memory_total_bytes
        if total is not None:
            family.add_sample(family.name, ctx.base_labels(reading.identity), dcgm_number(total / MIB, True))
    return [family]


DEFAULT_BUILDERS: tuple[FamilyBuilder, ...] = (dcgm_families, framebuffer_total_family, self_families)


def render(ctx: RenderContext, builders: Sequence[FamilyBuilder] = DEFAULT_BUILDERS) -> list[Metric]:
    families: list[Metric] = []
    for builder in builders:
        families.extend(builder(ctx))
    return families
