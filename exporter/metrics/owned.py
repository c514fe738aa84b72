"""Metrics the exporter defines itself (not DCGM fields): their names, types, units, labels and meaning.

Builders take help texts from here and the README's metric table is generated from here and from
the DCGM catalog, so documentation and output cannot drift apart. Two groups:

* exporter-owned payload under dcgm-exporter's ``DCGM_EXP_`` convention (allocation, health, ...),
* self-metrics under ``gpu_pod_exporter_`` with Prometheus naming (base units, ``_total`` counters).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class OwnedMetric:
    name: str
    type: str  # gauge | counter (a counter's samples carry the _total suffix in `name`)
    unit: str
    labels: tuple[str, ...]
    help: str
    source: str  # where the value comes from, for the documentation table
    component: str  # core | kubernetes | health | gpm | ...


SELF_METRICS: tuple[OwnedMetric, ...] = (
    OwnedMetric("gpu_pod_exporter_build_info", "gauge", "", ("version", "python_version"),
                "Build information of gpu-pod-exporter; the value is always 1.", "constant", "core"),
    OwnedMetric("gpu_pod_exporter_nvml_up", "gauge", "0/1", (),
                "1 when NVML is initialised and answering, 0 otherwise.", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_devices", "gauge", "GPUs", (), "Number of GPUs found by NVML.",
                "nvmlDeviceGetCount at start", "core"),
    OwnedMetric("gpu_pod_exporter_device_up", "gauge", "0/1", ("gpu", "UUID", "pci_bus_id", "device", "Hostname"),
                "1 when the GPU answers NVML, 0 when it is lost.", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_sampling_duration_seconds", "gauge", "s", (),
                "Duration of the last complete NVML sampling cycle.", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_last_sample_timestamp_seconds", "gauge", "s", (),
                "Unix time at which the last complete sampling cycle ended.", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_nvml_calls_per_cycle", "gauge", "calls", (),
                "NVML calls made in the last complete sampling cycle (fewer is cheaper).", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_nvml_calls_total", "counter", "calls", (),
                "NVML calls made by the sampler since start.", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_sampling_cycles_total", "counter", "cycles", (),
                "Complete sampling cycles since start.", "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_sampler_stalled", "gauge", "0/1", (),
                "1 when an NVML call has been in flight longer than three collect intervals.", "watchdog", "core"),
    OwnedMetric("gpu_pod_exporter_thread_restarts_total", "counter", "restarts", ("thread",),
                "Restarts of a long-lived thread after an unexpected error (a bug; the log has its traceback).",
                "thread supervisor", "core"),
    OwnedMetric("gpu_pod_exporter_field_unsupported", "gauge", "1", ("gpu", "UUID", "field"),
                "1 for each (GPU, field) that NVML reported as not supported; the field is omitted.",
                "sampler", "core"),
    OwnedMetric("gpu_pod_exporter_counters_skipped_rows", "gauge", "rows", ("reason",),
                "Rows of the counters CSV in use that are not exported, by reason: unknown_field (a DCGM-shaped "
                "name no DCGM release this exporter knows has: a newer DCGM's field or a typo), "
                "not_readable_through_nvml (a DCGM field this exporter cannot read), duplicate. The log names "
                "each row's file:line at load.",
                "counters CSV, at start and at each ConfigMap reload (-m); every reason always present",
                "core"),
    OwnedMetric("gpu_pod_exporter_peak_window_seconds", "gauge", "s", (),
                "Trailing window over which the DCGM_EXP_*_PEAK series take their maximum (--peak-window).",
                "configuration", "core"),
)

PAYLOAD_METRICS: tuple[OwnedMetric, ...] = (
    OwnedMetric("DCGM_EXP_GPU_HEALTHY", "gauge", "0/1", ("reason",),
                "Should this GPU stay in service? 1 healthy (reason ok), 0 drain it; reason is the worst current "
                "one: gpu_lost > row_remap_failure > fatal_xid > retired_pages_pending > row_remap_pending.",
                "sampler (GPU lost; NVML fields 31, 144, 145) and the NVML event set (fatal Xid within the Xid "
                "window); one series per GPU, always on", "health"),
    OwnedMetric("DCGM_EXP_GPU_FB_TOTAL", "gauge", "MiB", (),
                "Framebuffer memory of the whole GPU (in MiB). On a MIG-enabled GPU this is the card's total, which "
                "the per-instance DCGM_FI_DEV_FB_TOTAL series do not add up to (MIG keeps some for itself).",
                "nvmlDeviceGetMemoryInfo(GPU handle).total / 2^20, read once at start (no NVML call per cycle); one "
                "series per GPU, MIG-enabled or not, with the GPU's identity labels and no workload labels; absent "
                "when NVML refuses the GPU's memory info", "core"),
)

# Peaks between scrapes (exporter/nvml/peaks.py): one series per GPU and reading the CSV samples, with the
# same labels as the reading's own series (workload labels included), so it sits beside it in a query.
_PEAK_SOURCE = ("highest {field} sample of the last --peak-window milliseconds (trailing window of the 1 s samples "
                "the sampler already takes; no NVML call; only when the counters CSV has {field}); one series per "
                "GPU or MIG instance that has the reading")
PEAK_METRICS: tuple[OwnedMetric, ...] = tuple(
    OwnedMetric(f"DCGM_EXP_{name}_PEAK", "gauge", unit, (),
                f"Highest {what} over the trailing peak window (gpu_pod_exporter_peak_window_seconds), so a "
                f"spike between two scrapes shows in the next one (in {unit}).",
                _PEAK_SOURCE.format(field=f"DCGM_FI_DEV_{name}"), "peaks")
    for name, unit, what in (("FB_USED", "MiB", "framebuffer memory used"), ("GPU_UTIL", "%", "GPU utilization"),
                             ("POWER_USAGE", "W", "power draw"), ("GPU_TEMP", "C", "GPU temperature")))

# Kubernetes attribution (-k): payload families per GPU or MIG instance, then its self-metrics.
_WORKLOAD = ("container", "namespace", "pod", "pod_uid", "team")
KUBERNETES_PAYLOAD_METRICS: tuple[OwnedMetric, ...] = (
    OwnedMetric("DCGM_EXP_GPU_ALLOCATED", "gauge", "0/1", (),
                "1 if a Kubernetes container holds this GPU or MIG instance, else 0 (absent while the kubelet's "
                "allocation is unknown).",
                "kubelet PodResources List; one series per GPU, or per GPU instance on MIG GPUs", "kubernetes"),
    OwnedMetric("DCGM_EXP_GPU_ALLOCATION_INFO", "gauge", "1", (*_WORKLOAD, "vgpu"),
                "Containers holding this GPU or MIG instance (always 1; one series per container, vgpu is its "
                "lowest replica id when it holds time-slicing or MPS replicas). Lists every pod sharing a "
                "time-sliced GPU.",
                "kubelet PodResources List + pod metadata from the API", "kubernetes"),
    OwnedMetric("DCGM_EXP_CONTAINER_FB_USED", "gauge", "MiB", _WORKLOAD,
                "Framebuffer memory used by the container's processes on this GPU or MIG instance (in MiB).",
                "NVML running-process lists, PID -> /proc/<pid>/cgroup -> container "
                "(--kubernetes-process-attribution, needs hostPID)", "kubernetes"),
    OwnedMetric("DCGM_EXP_UNATTRIBUTED_FB_USED", "gauge", "MiB", (),
                "Framebuffer memory used by GPU processes that belong to no known pod (in MiB).",
                "NVML running-process lists whose PIDs are in no known pod's cgroup "
                "(--kubernetes-process-attribution)", "kubernetes"),
    OwnedMetric("DCGM_EXP_PROCESS_FB_USED", "gauge", "MiB", ("pid", *_WORKLOAD),
                "Framebuffer memory used by one GPU process (in MiB).",
                "NVML running-process lists (--kubernetes-process-metrics; one series per process)", "kubernetes"),
    *(OwnedMetric(f"DCGM_EXP_CONTAINER_{engine}_UTIL", "gauge", "%", _WORKLOAD,
                  f"{what} of this GPU used by the container's processes, averaged over the last process interval "
                  f"(in %).",
                  "NVML per-process utilization samples since the previous read, PID -> /proc/<pid>/cgroup -> "
                  "container (--kubernetes-process-attribution; not on MIG-enabled GPUs)", "kubernetes")
      for engine, what in (("SM", "SM time (kernels running)"), ("MEM", "Memory bandwidth time (reads and writes)"),
                           ("ENC", "Video encoder time"), ("DEC", "Video decoder time"))),
    *(OwnedMetric(f"DCGM_EXP_UNATTRIBUTED_{engine}_UTIL", "gauge", "%", (),
                  f"{what} of this GPU used by processes that belong to no known pod, averaged over the last "
                  f"process interval (in %).",
                  "NVML per-process utilization samples of PIDs in no known pod's cgroup "
                  "(--kubernetes-process-attribution)", "kubernetes")
      for engine, what in (("SM", "SM time"), ("MEM", "Memory bandwidth time"), ("ENC", "Video encoder time"),
                           ("DEC", "Video decoder time"))),
)
# Peaks between scrapes per container (exporter/kube/container_peaks.py): beside the container's own series,
# with its labels, also for a container that left within the last window.
_CONTAINER_PEAK_SOURCE = (
    "highest value of {field} at the process reads (--process-interval) of the last --peak-window milliseconds; "
    "no NVML call; one series per container and {where}, kept one window after the container's processes end "
    "(--kubernetes-process-attribution)")
CONTAINER_PEAK_METRICS: tuple[OwnedMetric, ...] = (
    OwnedMetric("DCGM_EXP_CONTAINER_FB_USED_PEAK", "gauge", "MiB", _WORKLOAD,
                "Highest framebuffer memory used by the container's processes on this GPU or MIG instance over the "
                "trailing peak window (gpu_pod_exporter_peak_window_seconds), so a container's spike between two "
                "scrapes shows in the next one, even when the container died of it (in MiB).",
                _CONTAINER_PEAK_SOURCE.format(field="DCGM_EXP_CONTAINER_FB_USED", where="GPU or MIG instance"),
                "kubernetes"),
    OwnedMetric("DCGM_EXP_CONTAINER_SM_UTIL_PEAK", "gauge", "%", _WORKLOAD,
                "Highest SM time of this GPU used by the container's processes in one process interval over the "
                "trailing peak window (gpu_pod_exporter_peak_window_seconds) (in %).",
                _CONTAINER_PEAK_SOURCE.format(field="DCGM_EXP_CONTAINER_SM_UTIL",
                                              where="GPU (not on MIG-enabled GPUs)"), "kubernetes"),
)
# The readings whose peaks are kept (catalog names, DCGM units) and the family each peak is exported as.
PEAK_FAMILIES: Mapping[str, str] = {
    "DCGM_FI_DEV_FB_USED": "DCGM_EXP_FB_USED_PEAK",
    "DCGM_FI_DEV_GPU_UTIL": "DCGM_EXP_GPU_UTIL_PEAK",
    "DCGM_FI_DEV_POWER_USAGE": "DCGM_EXP_POWER_USAGE_PEAK",
    "DCGM_FI_DEV_GPU_TEMP": "DCGM_EXP_GPU_TEMP_PEAK",
}
# The families per-process utilization feeds; a GPU without it lists them as unsupported fields.
PROCESS_UTILIZATION_FAMILIES: tuple[str, ...] = (*(
    f"DCGM_EXP_{owner}_{engine}_UTIL" for owner in ("CONTAINER", "UNATTRIBUTED")
    for engine in ("SM", "MEM", "ENC", "DEC")), "DCGM_EXP_CONTAINER_SM_UTIL_PEAK")
KUBERNETES_SELF_METRICS: tuple[OwnedMetric, ...] = (
    OwnedMetric("gpu_pod_exporter_kubelet_up", "gauge", "0/1", (),
                "1 if the last kubelet PodResources List succeeded, else 0.", "kubelet client", "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kube_api_up", "gauge", "0/1", (),
                "1 while the Kubernetes API pod and namespace watches are both held open (proven by an event, a "
                "bookmark or 5 s without an error), else 0: a relist loop that never keeps a watch open is down.",
                "API watches", "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kube_api_requests_total", "counter", "requests", ("resource", "verb", "code"),
                "Requests sent to the Kubernetes API by resource (pods, namespaces, resourceslices), verb (list, "
                "watch) and HTTP status code (<error> when no answer came).", "API watches", "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kube_api_relists_total", "counter", "relists", ("resource", "reason"),
                "Full lists of a resource by reason: initial, expired (410 Gone), too-large (the API server's "
                "store was reset), malformed, stale (metadata dropped after a long outage).", "API watches",
                "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kube_api_bookmarks_total", "counter", "bookmarks", ("resource",),
                "Watch bookmarks received from the Kubernetes API by resource: each moves the resourceVersion a "
                "watch resumes from, so a watch that ends resumes without a relist. 0 while watches are held for "
                "minutes: something between the exporter and the API server drops them.", "API watches",
                "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kubelet_last_success_timestamp_seconds", "gauge", "s", (),
                "Unix time of the last successful kubelet PodResources List (0: never).", "kubelet client",
                "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kube_api_last_success_timestamp_seconds", "gauge", "s", (),
                "Unix time of the last successful Kubernetes API list, watch event or bookmark (0: never).",
                "API watches", "kubernetes"),
    OwnedMetric("gpu_pod_exporter_kubernetes_pods", "gauge", "pods", (),
                "Pods on this node known from the Kubernetes API watch.", "API watches", "kubernetes"),
    OwnedMetric("gpu_pod_exporter_dra_resourceslices_up", "gauge", "0/1", (),
                "1 while the watch of this node's DRA ResourceSlices is held open, else 0 (only with "
                "--kubernetes-enable-dra).", "ResourceSlice watch", "kubernetes"),
    OwnedMetric("gpu_pod_exporter_unresolved_devices", "gauge", "devices", ("reason",),
                "DRA devices held by pods that could not be attributed to a GPU or MIG device of this node, by "
                "reason (slice-missing, slices-unavailable, no-uuid, not-on-node, driver-unknown, cdi-only); the "
                "GPU's metrics continue without workload labels (only with --kubernetes-enable-dra).",
                "kubelet DRA claims joined with ResourceSlices", "kubernetes"),
)

OWNED: tuple[OwnedMetric, ...] = (*PAYLOAD_METRICS, *PEAK_METRICS, *KUBERNETES_PAYLOAD_METRICS,
                                  *CONTAINER_PEAK_METRICS, *SELF_METRICS, *KUBERNETES_SELF_METRICS)
OWNED_BY_NAME = {metric.name: metric for metric in OWNED}


def family_name(metric: OwnedMetric) -> str:
    """The family name a builder creates: counters drop the ``_total`` their samples carry."""
    return metric.name.removesuffix("_total") if metric.type == "counter" else metric.name


def owned(name: str) -> OwnedMetric:
    return OWNED_BY_NAME[name]
