"""Labels and metric families that the Kubernetes attribution adds to the exposition. Pure.

The renderer passes, per GPU (and per MIG instance), its ordered base labels (``gpu, UUID,
pci_bus_id, device, modelName, [GPU_I_PROFILE, GPU_I_ID], Hostname, [DCGM_FI_DRIVER_VERSION]``)
as a ``LabeledDevice``. From the ``AttributionSnapshot`` this module derives:

``workload_label_sets`` - the workload labels for that device's payload series (``DCGM_FI_*``):

* held by exactly one container, whole or through any number of time-slicing/MPS replica IDs
  (``GPU-<uuid>::0``, ``::3``, GKE ``nvidia<N>/vgpu<K>``): one set ``container, namespace, pod``
  (+ ``pod_uid`` with ``--kubernetes-enable-pod-uid``, + ``team`` when known, + allowlisted pod
  labels), appended after the base labels in that order;
* unallocated, or allocation unknown: ``[{}]`` (no workload labels at all, never empty strings);
* shared (several containers), default mode: ``[{}]``. A device reading (utilisation,
  temperature, total framebuffer use) belongs to no single pod, and dcgm-exporter's habit of
  giving it to whichever pod came last makes per-pod dashboards lie;
* ``--kubernetes-virtual-gpus``: one set per holding container, each with a ``vgpu`` label (its
  lowest replica ID) when it holds replicas, so the device series is repeated once per pod exactly
  as dcgm-exporter does; dashboards built for that mode keep working.

``attribution_families`` - the families the attribution owns:

* ``DCGM_EXP_GPU_ALLOCATED`` (base labels; 1 if any container holds the device, else 0);
* ``DCGM_EXP_GPU_ALLOCATION_INFO`` (value 1, base + workload labels, one series per holding
  container, + ``vgpu`` when it holds replicas): on a shared GPU this lists every sharing pod;
* ``DCGM_EXP_CONTAINER_FB_USED`` (MiB, base + workload labels): the framebuffer memory of each
  container's own processes on the device, from NVML's process list and their cgroups;
* ``DCGM_EXP_PROCESS_FB_USED`` (MiB, base + ``pid`` + workload labels when known; only with
  ``--kubernetes-process-metrics``);
* ``DCGM_EXP_UNATTRIBUTED_FB_USED`` (MiB, base labels): memory held by GPU processes that
  belong to no known pod, the "pod is gone but its memory is not" signal (only with process
  attribution);
* ``DCGM_EXP_CONTAINER_{SM,MEM,ENC,DEC}_UTIL`` (%, base + workload labels): how much of the
  whole GPU each container's processes used over the last process interval, from NVML's
  per-process utilization samples; every holder of the GPU has a series (0 when idle), so "who
  is busy on a shared GPU" is one query. ``DCGM_EXP_UNATTRIBUTED_{SM,MEM,ENC,DEC}_UTIL`` (%, base
  labels): what processes of no known pod used. Only for GPUs whose samples were read (not
  MIG-enabled GPUs, not drivers without the calls);
* ``DCGM_EXP_CONTAINER_FB_USED_PEAK`` (MiB) and ``DCGM_EXP_CONTAINER_SM_UTIL_PEAK`` (%), with the labels of
  ``DCGM_EXP_CONTAINER_FB_USED`` / ``..._SM_UTIL``: each container's highest value at the process reads of
  the trailing peak window (``exporter.kube.container_peaks``), never below its current value; a
  container whose processes ended keeps its peak series one window longer (the spike that killed it);
* self-metrics ``gpu_pod_exporter_kubelet_up``, ``gpu_pod_exporter_kube_api_up``, their
  ``..._last_success_timestamp_seconds``, ``gpu_pod_exporter_kubernetes_pods``, and the API
  request, relist and bookmark counters ``gpu_pod_exporter_kube_api_requests_total{resource,verb,code}``,
  ``gpu_pod_exporter_kube_api_relists_total{resource,reason}`` and
  ``gpu_pod_exporter_kube_api_bookmarks_total{resource}`` (watch bookmarks received).

Their names, types, units and help texts are registered in ``exporter.metrics.owned`` (the
README's metric table is generated from there).

Why sums stay correct:

* Default mode: every device series exists once per device (shared devices carry no pod
  labels), so ``sum(DCGM_FI_DEV_FB_USED)`` counts each GPU once. Per-pod questions are answered
  by ``DCGM_EXP_CONTAINER_FB_USED``, whose series partition the device's process memory between
  containers plus ``DCGM_EXP_UNATTRIBUTED_FB_USED``; summing either by pod or by device is
  correct. To put a device reading next to the pods sharing it, join with
  ``DCGM_EXP_GPU_ALLOCATION_INFO`` on ``UUID``.
* Virtual mode (``--kubernetes-virtual-gpus``): a shared device's series is repeated once per
  sharing container with identical values, so a plain ``sum`` counts the device N times. Sum by
  device first, e.g. ``sum(max by (UUID, GPU_I_ID) (DCGM_FI_DEV_FB_USED))``; per-pod memory
  still comes from ``DCGM_EXP_CONTAINER_FB_USED``, which is never duplicated.

DRA (``--kubernetes-enable-dra``): a device held through a DRA claim carries dcgm-exporter's
``dra_claim_name, dra_claim_namespace, dra_driver_name, dra_pool_name, dra_device_name`` (+
``dra_mig_profile, dra_mig_device_uuid`` for a MIG device) after the workload labels, wherever that
holder's workload labels appear (payload series of an exclusive device, the allocation info, and
each holder's series with ``--kubernetes-virtual-gpus``). A claim shared by several pods, or a
device shared between claims (``share_id``), has several holders and follows the sharing rules
above. ``gpu_pod_exporter_unresolved_devices{reason}`` counts the DRA devices of GPUs that could not
be attributed, and ``gpu_pod_exporter_dra_resourceslices_up`` says whether the ResourceSlice watch
is held.

Label dicts are built in the documented order; the renderer's encoder keeps insertion order
and escapes values (quotes, backslashes, newlines pass through here unmodified).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric

from exporter.kube.attribution import NO_UTILIZATION, AllocationHolder, AttributionSnapshot, Workload
from exporter.kube.container_peaks import PeakKey
from exporter.kube.deviceids import GpuKey
from exporter.kube.settings import SeriesSettings
from exporter.metrics.render import owned_family

MIB = 1024.0 * 1024.0
WORKLOAD_NAMES = ("container", "namespace", "pod")
OLD_WORKLOAD_NAMES = ("container_name", "pod_namespace", "pod_name")  # -o/--use-old-namespace (1.x)


@dataclass(frozen=True)
class LabeledDevice:
    """One GPU (``gpu_instance_id`` None) or MIG instance and its ordered base labels."""

    uuid: str
    gpu_instance_id: int | None
    labels: Mapping[str, str]

    @property
    def key(self) -> GpuKey:
        return GpuKey(self.uuid, self.gpu_instance_id)


def workload_labels(workload: Workload, settings: SeriesSettings,
                    base: Mapping[str, str] | None = None, *, pod_uid: bool = False) -> dict[str, str]:
    """``container, namespace, pod [, pod_uid] [, team] [, pod labels...]``; a name already in
    ``base`` is never overridden, and a label without a value is left out. With ``-o`` the first
    three are dcgm-exporter 1.x's ``container_name, pod_namespace, pod_name``. ``pod_uid`` comes with
    ``--kubernetes-enable-pod-uid``, or always where ``pod_uid=True`` (virtual-GPU per-pod series)."""
    names = OLD_WORKLOAD_NAMES if settings.use_old_namespace else WORKLOAD_NAMES
    labels: dict[str, str] = dict(zip(names, (workload.container, workload.namespace, workload.pod), strict=True))
    if (pod_uid or settings.kubernetes_enable_pod_uid) and workload.pod_uid:
        labels["pod_uid"] = workload.pod_uid
    if workload.team:
        labels["team"] = workload.team
    for name, value in workload.pod_labels:
        if name not in labels and value:
            labels[name] = value
    if base:
        labels = {name: value for name, value in labels.items() if name not in base}
    return {name: value for name, value in labels.items() if value}


def dra_labels(holder: AllocationHolder, settings: SeriesSettings, base: Mapping[str, str]) -> dict[str, str]:
    """dcgm-exporter's ``dra_*`` labels of the claim ``holder`` holds the device through (its first,
    when a container holds one device through several claims); empty values are left out."""
    if not settings.kubernetes_enable_dra or not holder.claims:
        return {}
    claim = holder.claims[0]
    labels = {"dra_claim_name": claim.name, "dra_claim_namespace": claim.namespace, "dra_driver_name": claim.driver,
              "dra_pool_name": claim.pool, "dra_device_name": claim.device, "dra_mig_profile": claim.mig_profile,
              "dra_mig_device_uuid": claim.mig_device_uuid}
    return {name: value for name, value in labels.items() if value and name not in base}


def holder_labels(holder: AllocationHolder, settings: SeriesSettings, base: Mapping[str, str], *,
                  pod_uid: bool = False) -> dict[str, str]:
    """A holder's workload labels followed by its ``dra_*`` labels (``pod_uid``: see ``workload_labels``)."""
    labels = workload_labels(holder.workload, settings, base, pod_uid=pod_uid)
    labels.update(dra_labels(holder, settings, {**base, **labels}))
    return labels


def workload_label_sets(attribution: AttributionSnapshot, device: LabeledDevice,
                        settings: SeriesSettings) -> list[dict[str, str]]:
    """The workload-label extensions for one device's payload series (see the module docstring)."""
    allocation = attribution.allocation(device.uuid, device.gpu_instance_id)
    if allocation is None or not allocation.holders:
        return [{}]
    if not settings.kubernetes_virtual_gpus:
        if allocation.shared:
            return [{}]
        return [holder_labels(allocation.holders[0], settings, device.labels)]
    sets: list[dict[str, str]] = []
    for holder in allocation.holders:
        labels = holder_labels(holder, settings, device.labels)
        if holder.replica_ids and "vgpu" not in device.labels:
            labels["vgpu"] = holder.replica_ids[0]
        sets.append(labels)
    return sets


# dcgm-exporter's --kubernetes-virtual-gpus (its pull request 594): these two fields keep the device
# series and add one per holder with what that holder's own processes use, not the device total. Their
# peaks (DCGM_EXP_*_PEAK) do the same with each holder's own peak (exporter/kube/container_peaks.py).
VIRTUAL_GPU_PEAKS = {"DCGM_EXP_GPU_UTIL_PEAK": "DCGM_FI_DEV_GPU_UTIL", "DCGM_EXP_FB_USED_PEAK": "DCGM_FI_DEV_FB_USED"}
VIRTUAL_GPU_FIELDS = frozenset({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", *VIRTUAL_GPU_PEAKS})


def _same_container(a: Workload, b: Workload) -> bool:
    return (a.namespace, a.pod, a.container) == (b.namespace, b.pod, b.container)


def virtual_gpu_samples(attribution: AttributionSnapshot, device: LabeledDevice, field: str,
                        settings: SeriesSettings) -> list[tuple[dict[str, str], float]] | None:
    """With ``--kubernetes-virtual-gpus``, the per-holder samples of GPU_UTIL / FB_USED, as dcgm-exporter.

    None: the field is not one of those two (or virtual mode is off, or the device has no holder),
    and the caller repeats the device's series per holder as for every other field. Otherwise the
    caller writes the device series once with the device's value (no workload labels) and then
    one series per holder (workload labels, always with ``pod_uid`` as upstream, ``vgpu``) with:
    FB_USED the MiB of that holder's processes on the device (or MIG instance), GPU_UTIL the % of
    the whole GPU its processes used (NVML's per-process samples, summed per container); 0 for a
    holder without processes. While the process data of the device is unknown (not read yet, or
    unreadable) the list is empty: no per-holder series rather than the device total copied onto
    every pod.
    MIG: memory only (NVML samples no processes there), as upstream. The peak of either field
    (``DCGM_EXP_FB_USED_PEAK``, ``DCGM_EXP_GPU_UTIL_PEAK``) is, per holder, that holder's own peak over
    the peak window (never below its current value), so a pod's peak is its spike, not a neighbour's.
    """
    if not settings.kubernetes_virtual_gpus or field not in VIRTUAL_GPU_FIELDS:
        return None
    allocation = attribution.allocation(device.uuid, device.gpu_instance_id)
    if allocation is None or not allocation.holders:
        return None
    peak_of = VIRTUAL_GPU_PEAKS.get(field)
    if peak_of is not None:
        current = virtual_gpu_samples(attribution, device, peak_of, settings)
        return _with_peaks(attribution, device, allocation.holders, current, peak_of) if current else current
    if field == "DCGM_FI_DEV_GPU_UTIL" and device.gpu_instance_id is not None:
        return None  # NVML samples no processes of a MIG instance
    used = _process_usage(attribution, device, field)
    if used is None:
        return []  # the device's process data is unknown: no per-holder series
    samples = []
    for holder in allocation.holders:
        # Always with pod_uid, --kubernetes-enable-pod-uid or not: dcgm-exporter sets it on these per-pod series
        # (its process_metrics transformation keys them by pod UID), and queries written for it join on it.
        labels = holder_labels(holder, settings, device.labels, pod_uid=True)
        if holder.replica_ids and "vgpu" not in device.labels:
            labels["vgpu"] = holder.replica_ids[0]
        samples.append((labels, sum(value for workload, value in used if _same_container(workload, holder.workload))))
    return samples


def _process_usage(attribution: AttributionSnapshot, device: LabeledDevice,
                   field: str) -> list[tuple[Workload, float]] | None:
    """Per process owner, its GPU_UTIL (% of the whole GPU) or FB_USED (MiB) on ``device``; None while
    the device's process data is unknown (not read yet, or unreadable)."""
    if field == "DCGM_FI_DEV_GPU_UTIL":
        if device.uuid not in attribution.utilization_gpus:
            return None
        return [(item.workload, float(item.utilization.sm)) for item in attribution.utilization(device.uuid)]
    if device.uuid not in attribution.process_gpus:
        return None
    return [(item.workload, item.used_bytes / MIB) for item in attribution.memory(device.uuid, device.gpu_instance_id)]


def _with_peaks(attribution: AttributionSnapshot, device: LabeledDevice, holders: Sequence[AllocationHolder],
                current: list[tuple[dict[str, str], float]], peak_of: str) -> list[tuple[dict[str, str], float]]:
    """Each holder's current sample raised to its own peak over the window (``peak_of``'s peak family)."""
    memory, sm_util = attribution.container_peaks.memory, attribution.container_peaks.sm_util
    peaks, scale = (sm_util, 1.0) if peak_of == "DCGM_FI_DEV_GPU_UTIL" else (memory, 1 / MIB)
    samples = []
    for holder, (labels, value) in zip(holders, current, strict=True):
        peak = peaks.get(_peak_key(device, holder.workload))
        samples.append((labels, max(value, peak[1] * scale) if peak is not None else value))
    return samples


def attribution_families(attribution: AttributionSnapshot, devices: Sequence[LabeledDevice],
                         settings: SeriesSettings) -> list[Metric]:
    """Every family the Kubernetes attribution contributes (see the module docstring).

    Nothing is emitted when Kubernetes mode is off. Allocation families are left out while the
    allocation is unknown (kubelet never answered, or its answer aged out): 0 would be a claim.
    Memory families cover the devices whose process lists were attributed.
    """
    if not attribution.status.enabled:
        return []
    families: list[Metric] = []
    if attribution.allocation_known:
        families += _allocation_families(attribution, devices, settings)
    if attribution.process_gpus:
        families += _memory_families(attribution, devices, settings)
    if attribution.utilization_gpus:
        families += _utilization_families(attribution, devices, settings)
    families += _self_metrics(attribution)
    return families


def _allocation_families(attribution: AttributionSnapshot, devices: Sequence[LabeledDevice],
                         settings: SeriesSettings) -> list[Metric]:
    allocated = owned_family("DCGM_EXP_GPU_ALLOCATED")
    info = owned_family("DCGM_EXP_GPU_ALLOCATION_INFO")
    for device in devices:
        allocation = attribution.allocation(device.uuid, device.gpu_instance_id)
        holders = allocation.holders if allocation is not None else ()
        allocated.add_sample(allocated.name, dict(device.labels), 1.0 if holders else 0.0)
        for holder in holders:
            labels = {**device.labels, **holder_labels(holder, settings, device.labels)}
            if holder.replica_ids and "vgpu" not in labels:
                labels["vgpu"] = holder.replica_ids[0]
            info.add_sample(info.name, labels, 1.0)
    return [allocated, info]


def _memory_families(attribution: AttributionSnapshot, devices: Sequence[LabeledDevice],
                     settings: SeriesSettings) -> list[Metric]:
    container_fb = owned_family("DCGM_EXP_CONTAINER_FB_USED")
    container_peak = owned_family("DCGM_EXP_CONTAINER_FB_USED_PEAK")
    unattributed = owned_family("DCGM_EXP_UNATTRIBUTED_FB_USED")
    process_fb = owned_family("DCGM_EXP_PROCESS_FB_USED")
    peaks, _ = attribution.container_peaks.by_gpu()
    for device in devices:
        if device.uuid not in attribution.process_gpus:
            continue
        current = []
        for item in attribution.memory(device.uuid, device.gpu_instance_id):
            labels = {**device.labels, **workload_labels(item.workload, settings, device.labels)}
            container_fb.add_sample(container_fb.name, labels, item.used_bytes / MIB)
            current.append((item.workload, float(item.used_bytes), labels))
        _add_peaks(container_peak, device, current, peaks.get(device.key, {}), settings, scale=1 / MIB)
        unattributed.add_sample(unattributed.name, dict(device.labels),
                                attribution.unattributed_bytes.get(device.key, 0) / MIB)
        if not settings.process_metrics:
            continue
        for process in attribution.processes:
            if process.used_bytes is None or (process.uuid, process.gpu_instance_id) != (
                    device.uuid, device.gpu_instance_id):
                continue  # another device, or NVML did not say: omit rather than invent a value
            labels = {**device.labels, "pid": str(process.pid)}
            if process.workload is not None:
                labels.update(workload_labels(process.workload, settings, labels))
            process_fb.add_sample(process_fb.name, labels, process.used_bytes / MIB)
    families = [container_fb, container_peak, unattributed]
    return [*families, process_fb] if settings.process_metrics else families


def _peak_key(device: LabeledDevice, workload: Workload) -> PeakKey:
    return PeakKey(device.uuid, device.gpu_instance_id, workload.namespace, workload.pod, workload.container)


def _add_peaks(family: Metric, device: LabeledDevice, current: Sequence[tuple[Workload, float, dict[str, str]]],
               peaks: Mapping[PeakKey, tuple[Workload, float]], settings: SeriesSettings, *, scale: float) -> None:
    """A container's peak beside each of its current series (never below the current value, which the
    memoised join may have from a newer read), then the peaks of containers that left within the window."""
    shown: set[PeakKey] = set()
    for workload, value, labels in current:
        key = _peak_key(device, workload)
        shown.add(key)
        peak = peaks.get(key)
        family.add_sample(family.name, labels, max(value, peak[1]) * scale if peak is not None else value * scale)
    for key, (workload, peak_value) in sorted(peaks.items()):
        if key not in shown:
            family.add_sample(family.name, {**device.labels, **workload_labels(workload, settings, device.labels)},
                              peak_value * scale)


_ENGINES = (("SM", "sm"), ("MEM", "memory"), ("ENC", "encoder"), ("DEC", "decoder"))
# Served only with process attribution (or per-process metrics) on: they need NVML's process lists and
# the host's /proc, which the default install does not read.
PROCESS_ATTRIBUTION_FAMILIES = frozenset({
    "DCGM_EXP_CONTAINER_FB_USED", "DCGM_EXP_UNATTRIBUTED_FB_USED", "DCGM_EXP_PROCESS_FB_USED",
    "DCGM_EXP_CONTAINER_FB_USED_PEAK", "DCGM_EXP_CONTAINER_SM_UTIL_PEAK",
    *(f"DCGM_EXP_{owner}_{engine}_UTIL" for owner in ("CONTAINER", "UNATTRIBUTED") for engine, _ in _ENGINES)})


def _utilization_families(attribution: AttributionSnapshot, devices: Sequence[LabeledDevice],
                          settings: SeriesSettings) -> list[Metric]:
    """Per-container and unattributed utilization of every whole GPU whose samples were read."""
    containers = [(owned_family(f"DCGM_EXP_CONTAINER_{engine}_UTIL"), part) for engine, part in _ENGINES]
    nobody = [(owned_family(f"DCGM_EXP_UNATTRIBUTED_{engine}_UTIL"), part) for engine, part in _ENGINES]
    sm_peak = owned_family("DCGM_EXP_CONTAINER_SM_UTIL_PEAK")
    _, peaks = attribution.container_peaks.by_gpu()
    for device in devices:
        if device.gpu_instance_id is not None or device.uuid not in attribution.utilization_gpus:
            continue
        current = []
        for item in attribution.utilization(device.uuid):
            labels = {**device.labels, **workload_labels(item.workload, settings, device.labels)}
            for family, part in containers:
                family.add_sample(family.name, labels, getattr(item.utilization, part))
            current.append((item.workload, float(item.utilization.sm), labels))
        _add_peaks(sm_peak, device, current, peaks.get(device.key, {}), settings, scale=1.0)
        unattributed = attribution.unattributed_utilization.get(device.uuid, NO_UTILIZATION)
        for family, part in nobody:
            family.add_sample(family.name, dict(device.labels), getattr(unattributed, part))
    return [*(family for family, _ in containers), sm_peak, *(family for family, _ in nobody)]


def _self_metrics(attribution: AttributionSnapshot) -> list[Metric]:
    status = attribution.status
    values = (
        ("gpu_pod_exporter_kubelet_up", 1.0 if status.kubelet_up else 0.0),
        ("gpu_pod_exporter_kube_api_up", 1.0 if status.api_up else 0.0),
        ("gpu_pod_exporter_kubelet_last_success_timestamp_seconds", status.kubelet_last_success),
        ("gpu_pod_exporter_kube_api_last_success_timestamp_seconds", status.api_last_success),
        ("gpu_pod_exporter_kubernetes_pods", float(status.pods_known)),
    )
    families = []
    for name, value in values:
        family = owned_family(name)
        family.add_sample(name, {}, value)
        families.append(family)
    if status.dra_enabled:
        slices_up = owned_family("gpu_pod_exporter_dra_resourceslices_up")
        slices_up.add_sample(slices_up.name, {}, 1.0 if status.resourceslices_up else 0.0)
        unresolved = owned_family("gpu_pod_exporter_unresolved_devices")
        for reason, count in sorted(attribution.unresolved.items()):
            unresolved.add_sample(unresolved.name, {"reason": reason}, float(count))
        families += [slices_up, unresolved]
    requests = owned_family("gpu_pod_exporter_kube_api_requests_total")
    for (resource, verb, code), count in status.api_requests:
        requests.add_sample("gpu_pod_exporter_kube_api_requests_total",
                            {"resource": resource, "verb": verb, "code": code}, float(count))
    relists = owned_family("gpu_pod_exporter_kube_api_relists_total")
    for (resource, reason), count in status.api_relists:
        relists.add_sample("gpu_pod_exporter_kube_api_relists_total", {"resource": resource, "reason": reason},
                           float(count))
    bookmarks = owned_family("gpu_pod_exporter_kube_api_bookmarks_total")
    for resource, count in status.api_bookmarks:
        bookmarks.add_sample("gpu_pod_exporter_kube_api_bookmarks_total", {"resource": resource}, float(count))
    return [*families, requests, relists, bookmarks]
