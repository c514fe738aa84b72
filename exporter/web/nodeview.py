"""The node view: what the live page at ``/`` and ``/gpus.json`` show, built from exposition samples.

The view is derived from the metric samples of one rendered exposition (the same snapshot that
``/metrics`` serves), never from NVML or the kubelet directly: the page can then never disagree with
what Prometheus scrapes, it costs the sampler nothing, and the same function reads any exporter's
``/metrics`` text (``gpu-pod-exporter top`` pointed at one node uses it too). The input is plain
``(name, labels, value)`` triples, so tests feed it by hand.

The JSON schema is versioned (``SCHEMA``) and documented in docs/node-page.md; fields are only ever
added within a version. A reading the GPU does not report is ``null``, never a sentinel.

Conditions (idle, memory nearly full, fatal Xid, ...) come from ``exporter.conditions``, the one
definition the alert rules are checked against. A document has two parts: what the exposition says
(built once per exposition generation, ``build``) and when it is served (``served``: the server's
clock, the sampling interval, the stale bound and the node conditions that depend on the data's age),
so a cached view still turns stale when the sampler stops producing new generations.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.conditions import (
    GPU_FAMILIES,
    HISTORY_FAMILIES,
    NODE_FAMILIES,
    PROCESS_HISTORY,
    Context,
    CounterHistory,
    GpuSamples,
    NodeSamples,
    gpu_conditions,
    mig_slices,
    node_conditions,
    record,
    stale_after_s,
)

SCHEMA = "gpu-pod-exporter.gpus/v1"

Sample = tuple[str, Mapping[str, str], float]

# Which family feeds which reading of a GPU (or of a MIG instance, when the series has GPU_I_ID).
_GPU_READINGS: Mapping[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization_percent",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_FB_FREE": "_memory_free_mib",
    "DCGM_FI_DEV_FB_RESERVED": "_memory_reserved_mib",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_EXP_GPU_ALLOCATED": "_allocated",
    "DCGM_FI_DEV_FB_TOTAL": "_memory_total_mib",
    "DCGM_EXP_GPU_FB_TOTAL": "_card_memory_total_mib",
}
# Readings of the whole chip, never split per MIG instance.
_CHIP_READINGS = frozenset({"temperature_c", "power_w", "power_limit_w"})
_CONTAINER_READINGS: Mapping[str, str] = {
    "DCGM_EXP_CONTAINER_SM_UTIL": "sm_util_percent",
    "DCGM_EXP_CONTAINER_FB_USED": "memory_used_mib",
}
# dcgm-exporter's --kubernetes-virtual-gpus: per-pod copies of these families carry the pod's own share.
_VIRTUAL_GPU_READINGS: Mapping[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "sm_util_percent",
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
}


@dataclass
class _Container:
    namespace: str
    pod: str
    container: str
    team: str | None = None
    gpu_instance_id: int | None = None
    readings: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "pod": self.pod, "container": self.container, "team": self.team,
                "gpu_instance_id": self.gpu_instance_id,
                "sm_util_percent": self.readings.get("sm_util_percent"),
                "memory_used_mib": self.readings.get("memory_used_mib")}


@dataclass
class _Instance:
    gpu_instance_id: int
    profile: str
    readings: dict[str, float] = field(default_factory=dict)


@dataclass
class _Gpu:
    index: int
    uuid: str = ""
    pci_bus_id: str = ""
    model: str = ""
    up: bool | None = None
    healthy: bool | None = None
    health_reason: str | None = None
    readings: dict[str, float] = field(default_factory=dict)
    last_xid: tuple[int, str] | None = None
    recent_xids: float | None = None
    recent_window_s: float | None = None
    xid_totals: dict[str, float] = field(default_factory=dict)
    instances: dict[int, _Instance] = field(default_factory=dict)
    containers: dict[tuple[int | None, str, str, str], _Container] = field(default_factory=dict)
    condition_samples: GpuSamples | None = None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _memory_total(readings: Mapping[str, float]) -> float | None:
    """The card's total (``DCGM_EXP_GPU_FB_TOTAL``) first: a MIG GPU has no other; then the CSV's total,
    then used + free + reserved."""
    for key in ("_card_memory_total_mib", "_memory_total_mib"):
        if key in readings:
            return readings[key]
    used, free = readings.get("memory_used_mib"), readings.get("_memory_free_mib")
    if used is None or free is None:
        return None
    return used + free + readings.get("_memory_reserved_mib", 0.0)


# What ``remember_counters`` reads: the windowed conditions' counters, each GPU's identity (its UUID, on
# ``gpu_pod_exporter_device_up``) and the sample time.
COUNTER_FAMILIES = frozenset({*HISTORY_FAMILIES, "gpu_pod_exporter_device_up",
                              "gpu_pod_exporter_last_sample_timestamp_seconds"})


def remember_counters(samples: Iterable[Sample], history: CounterHistory | None = None) -> None:
    """Add one exposition's counters to the history without building a view (the exporter does this
    for every render), so a page opened now knows the errors of the last hour as Prometheus does."""
    history = PROCESS_HISTORY if history is None else history
    gpus: dict[int, GpuSamples] = {}
    sampled_at: float | None = None
    for name, labels, value in samples:
        if name == "gpu_pod_exporter_last_sample_timestamp_seconds":
            sampled_at = value or None
            continue
        index = _int(labels.get("gpu"))
        if index is None or not math.isfinite(value):
            continue
        gpu = gpus.setdefault(index, GpuSamples(index))
        if labels.get("UUID") and not labels.get("GPU_I_ID") and not gpu.uuid:
            gpu.uuid = labels["UUID"]  # as ``build`` names the GPU
        if name in HISTORY_FAMILIES:
            gpu.add(name, labels, value)
    at = sampled_at if sampled_at is not None else time.time()
    for gpu in gpus.values():
        record(gpu, at, history)


@dataclass(frozen=True)
class BuiltView:
    """What one exposition says (``document``), and the node's self-metrics its served form needs."""

    document: Mapping[str, Any]
    node_values: Mapping[str, float]


def build(samples: Iterable[Sample], *, exporter_version: str = "", generation: int = 0,
          history: CounterHistory | None = None) -> BuiltView:
    """The exposition part of the ``/gpus.json`` document. Counters the windowed conditions read are
    added to ``history`` (default: this process's, ``exporter.conditions.PROCESS_HISTORY``)."""
    history = PROCESS_HISTORY if history is None else history
    gpus: dict[int, _Gpu] = {}
    node: str | None = None
    sampled_at: float | None = None
    node_values: dict[str, float] = {}
    for name, labels, value in samples:
        if not math.isfinite(value):
            continue  # the exporter exports none; another exporter's text might
        if name == "gpu_pod_exporter_last_sample_timestamp_seconds":
            sampled_at = value or None
            continue
        index = _int(labels.get("gpu"))
        if index is None:
            if name in NODE_FAMILIES:
                node_values.setdefault(name, value)
            continue
        gpu = gpus.get(index)
        if gpu is None:
            gpu = gpus[index] = _Gpu(index)
        if name in GPU_FAMILIES:
            if gpu.condition_samples is None:
                gpu.condition_samples = GpuSamples(index)
            gpu.condition_samples.add(name, labels, value)
        node = node or labels.get("Hostname") or labels.get("hostname") or None
        instance_id = _int(labels.get("GPU_I_ID"))
        _identify(gpu, labels, instance_id)
        if labels.get("pod") and _container_sample(gpu, name, labels, value, instance_id):
            continue
        _gpu_sample(gpu, name, labels, value, instance_id)
    at = sampled_at if sampled_at is not None else time.time()
    documents = [_gpu_document(gpus[index], at, history) for index in sorted(gpus)]
    document = {
        "schema": SCHEMA,
        "exporter_version": exporter_version,
        "generation": generation,
        "node": node,
        "sampled_at": sampled_at,
        "gpus": documents,
    }
    return BuiltView(document, node_values)


def _identify(gpu: _Gpu, labels: Mapping[str, str], instance_id: int | None) -> None:
    """What a sample's labels say about its GPU (UUID, bus id and model from a whole-GPU series) or instance."""
    if instance_id is None and labels.get("UUID"):
        gpu.uuid, gpu.pci_bus_id = labels["UUID"], labels.get("pci_bus_id", gpu.pci_bus_id)
        gpu.model = labels.get("modelName", gpu.model)
    elif not gpu.model:
        gpu.model = labels.get("modelName", "")
    if instance_id is not None and instance_id not in gpu.instances:
        gpu.instances[instance_id] = _Instance(instance_id, labels.get("GPU_I_PROFILE", ""))


def _container_sample(gpu: _Gpu, name: str, labels: Mapping[str, str], value: float, instance_id: int | None) -> bool:
    """Note a pod's container on this GPU; True when the sample is one of the container's own readings (so it
    is not the GPU's)."""
    key = (instance_id, labels.get("namespace", ""), labels["pod"], labels.get("container", ""))
    container = gpu.containers.get(key)
    if container is None:
        container = gpu.containers[key] = _Container(key[1], key[2], key[3], labels.get("team") or None, instance_id)
    reading = _CONTAINER_READINGS.get(name)
    if reading is None and "vgpu" in labels:  # --kubernetes-virtual-gpus: the pod's own share
        reading = _VIRTUAL_GPU_READINGS.get(name)
    if reading is None:
        return False
    container.readings[reading] = value
    return True


def _gpu_document(gpu: _Gpu, at: float, history: CounterHistory) -> dict[str, Any]:
    """One GPU's entry, with its conditions (its counters recorded into ``history`` at ``at`` first)."""
    conditions: list[dict[str, str]] = []
    if gpu.condition_samples is not None:
        gpu.condition_samples.uuid = gpu.uuid
        record(gpu.condition_samples, at, history)
        profiles = {str(key): instance.profile for key, instance in gpu.instances.items()}
        conditions = gpu_conditions(gpu.condition_samples, Context(at, history, profiles))
    return {**_gpu_json(gpu), "conditions": conditions}


def served(built: BuiltView, *, served_at: float, sampling_interval_s: float | None) -> dict[str, Any]:
    """The document as served at ``served_at``: the server's clock (a client computes the data's age as
    ``served_at - sampled_at``), the sampling interval, the stale bound, and the node conditions."""
    sampled_at = built.document.get("sampled_at")
    node = NodeSamples(built.node_values, sampled_at, served_at, sampling_interval_s)
    return {**built.document,
            "served_at": served_at,
            "sampling_interval_s": sampling_interval_s,
            "stale_after_s": None if sampling_interval_s is None else stale_after_s(sampling_interval_s),
            "conditions": node_conditions(node)}


def build_view(samples: Iterable[Sample], *, exporter_version: str = "", generation: int = 0,
               history: CounterHistory | None = None, sampling_interval_s: float | None = None,
               served_at: float | None = None) -> dict[str, Any]:
    """The ``/gpus.json`` document (schema ``SCHEMA``) for one exposition's samples, served now (or at
    ``served_at``)."""
    built = build(samples, exporter_version=exporter_version, generation=generation, history=history)
    return served(built, served_at=time.time() if served_at is None else served_at,
                  sampling_interval_s=sampling_interval_s)


def _gpu_sample(gpu: _Gpu, name: str, labels: Mapping[str, str], value: float, instance_id: int | None) -> None:
    if name == "gpu_pod_exporter_device_up":
        gpu.up = value == 1
    elif name == "DCGM_EXP_GPU_HEALTHY":
        gpu.healthy, gpu.health_reason = value == 1, labels.get("reason") or None
    elif name == "DCGM_FI_DEV_XID_ERRORS":
        code = _int(labels.get("err_code"))
        if code:
            gpu.last_xid = (code, labels.get("err_msg", ""))
    elif name == "DCGM_EXP_XID_ERRORS_COUNT":
        gpu.recent_xids = value
        window_ms = _int(labels.get("window_size_in_ms"))
        gpu.recent_window_s = window_ms / 1000 if window_ms is not None else None
    elif name == "DCGM_EXP_XID_ERRORS_TOTAL" and labels.get("xid"):
        gpu.xid_totals[labels["xid"]] = value
    elif name == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and instance_id is not None:
        gpu.instances[instance_id].readings["engine_active_percent"] = round(value * 100, 1)
    else:
        reading = _GPU_READINGS.get(name)
        if reading is None:
            return
        # Chip-wide readings belong to the GPU even when they come on a MIG instance's series
        # (--mig-chip-series per-instance and dcgm-exporter's -d f repeat them on every instance).
        if instance_id is None or reading in _CHIP_READINGS:
            target = gpu.readings
        else:
            target = gpu.instances[instance_id].readings
        target.setdefault(reading, value)  # workload-labelled copies of a GPU series repeat the same value


def _mig_totals(gpu: _Gpu) -> dict[str, float]:
    """A MIG GPU's parent has no utilisation or memory series of its own (as in dcgm-exporter).

    Its utilisation is its instances' engine activity weighted by their compute slices (a 3g instance
    is three times a 1g one): the share of the partitioned GPU that is busy, not an unweighted mean.
    Its memory used is the sum over the instances; its memory total is the card's own
    (``DCGM_EXP_GPU_FB_TOTAL``, read from NVML at start, see ``_memory_total``), never the sum of the
    instances' totals, which leaves out what MIG keeps for itself. Another exporter's text without that
    family gives no GPU-level total for a MIG parent (its FB series are per instance), so the total is
    then unknown (null).
    """
    totals: dict[str, float] = {}
    weighted = [(instance.readings["engine_active_percent"], _instance_weight(instance))
                for instance in gpu.instances.values() if "engine_active_percent" in instance.readings]
    weight = sum(w for _, w in weighted)
    if weighted and weight > 0:
        totals["utilization_percent"] = round(sum(active * w for active, w in weighted) / weight, 1)
    used = [instance.readings["memory_used_mib"] for instance in gpu.instances.values()
            if "memory_used_mib" in instance.readings]
    if used:
        totals["memory_used_mib"] = sum(used)
    return totals


def _instance_weight(instance: _Instance) -> float:
    """Compute slices of the instance's profile; its memory where the profile names none."""
    slices = mig_slices(instance.profile)
    if slices is not None:
        return float(slices)
    return _memory_total(instance.readings) or 0.0


def _gpu_json(gpu: _Gpu) -> dict[str, Any]:
    readings = gpu.readings
    if gpu.instances:
        readings = {**_mig_totals(gpu), **readings}
    allocated = readings.get("_allocated")
    if gpu.instances:
        allocated = max((i.readings["_allocated"] for i in gpu.instances.values() if "_allocated" in i.readings),
                        default=allocated)
    containers = sorted(gpu.containers.values(), key=lambda c: (c.gpu_instance_id or -1, c.namespace, c.pod,
                                                                c.container))
    return {
        "gpu": gpu.index,
        "uuid": gpu.uuid,
        "pci_bus_id": gpu.pci_bus_id,
        "model": gpu.model,
        "up": gpu.up if gpu.up is not None else bool(readings),
        "healthy": gpu.healthy,
        "health_reason": gpu.health_reason,
        "utilization_percent": readings.get("utilization_percent"),
        "memory_used_mib": readings.get("memory_used_mib"),
        "memory_total_mib": _memory_total(readings),
        "temperature_c": readings.get("temperature_c"),
        "power_w": readings.get("power_w"),
        "power_limit_w": readings.get("power_limit_w"),
        "allocated": None if allocated is None else allocated > 0 or bool(containers),
        "xid": {
            "last": None if gpu.last_xid is None else {"code": gpu.last_xid[0], "message": gpu.last_xid[1]},
            "recent_count": gpu.recent_xids,
            "window_s": gpu.recent_window_s,
            "totals": dict(sorted(gpu.xid_totals.items(), key=lambda item: int(item[0]))),
        },
        "containers": [container.as_json() for container in containers],
        "mig": [{"gpu_instance_id": instance.gpu_instance_id, "profile": instance.profile,
                 "memory_used_mib": instance.readings.get("memory_used_mib"),
                 "memory_total_mib": _memory_total(instance.readings),
                 "engine_active_percent": instance.readings.get("engine_active_percent")}
                for instance in (gpu.instances[key] for key in sorted(gpu.instances))],
    }


def view_json(view: Mapping[str, Any]) -> bytes:
    """Compact UTF-8 JSON; ``<``, ``>`` and ``&`` escaped so no pod name can close a script or tag."""
    text = json.dumps(view, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026").encode("utf-8")
