"""The node view: what the live page at ``/`` and ``/gpus.json`` show, built from exposition samples.

The view is derived from the metric samples of one rendered exposition (the same snapshot that
``/metrics`` serves), never from NVML or the kubelet directly: the page can then never disagree with
what Prometheus scrapes, it costs the sampler nothing, and the same function reads any exporter's
``/metrics`` text (``gpu-pod-exporter top`` pointed at one node uses it too). The input is plain
``(name, labels, value)`` triples, so tests feed it by hand.

The JSON schema is versioned (``SCHEMA``) and documented in docs/node-page.md; fields are only ever
added within a version. A reading the GPU does not report is ``null``, never a sentinel.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

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


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text not in (None, "") else None
    except ValueError:
        return None


def _memory_total(readings: Mapping[str, float]) -> float | None:
    used, free = readings.get("memory_used_mib"), readings.get("_memory_free_mib")
    if used is None or free is None:
        return None
    return used + free + readings.get("_memory_reserved_mib", 0.0)


def build_view(samples: Iterable[Sample], *, exporter_version: str = "", generation: int = 0) -> dict[str, Any]:
    """The ``/gpus.json`` document (schema ``SCHEMA``) for one exposition's samples."""
    gpus: dict[int, _Gpu] = {}
    node: str | None = None
    sampled_at: float | None = None
    for name, labels, value in samples:
        if not math.isfinite(value):
            continue  # the exporter exports none; another exporter's text might
        if name == "gpu_pod_exporter_last_sample_timestamp_seconds":
            sampled_at = value or None
            continue
        index = _int(labels.get("gpu"))
        if index is None:
            continue
        gpu = gpus.get(index)
        if gpu is None:
            gpu = gpus[index] = _Gpu(index)
        node = node or labels.get("Hostname") or labels.get("hostname") or None
        instance_id = _int(labels.get("GPU_I_ID"))
        if instance_id is None and labels.get("UUID"):
            gpu.uuid, gpu.pci_bus_id = labels["UUID"], labels.get("pci_bus_id", gpu.pci_bus_id)
            gpu.model = labels.get("modelName", gpu.model)
        elif not gpu.model:
            gpu.model = labels.get("modelName", "")
        if instance_id is not None and instance_id not in gpu.instances:
            gpu.instances[instance_id] = _Instance(instance_id, labels.get("GPU_I_PROFILE", ""))
        if labels.get("pod"):
            key = (instance_id, labels.get("namespace", ""), labels["pod"], labels.get("container", ""))
            container = gpu.containers.get(key)
            if container is None:
                container = gpu.containers[key] = _Container(key[1], key[2], key[3], labels.get("team") or None,
                                                             instance_id)
            reading = _CONTAINER_READINGS.get(name)
            if reading is None and "vgpu" in labels:  # --kubernetes-virtual-gpus: the pod's own share
                reading = _VIRTUAL_GPU_READINGS.get(name)
            if reading is not None:
                container.readings[reading] = value
                continue
        _gpu_sample(gpu, name, labels, value, instance_id)
    return {
        "schema": SCHEMA,
        "exporter_version": exporter_version,
        "generation": generation,
        "node": node,
        "sampled_at": sampled_at,
        "gpus": [_gpu_json(gpus[index]) for index in sorted(gpus)],
    }


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
    """A MIG GPU's parent has no utilisation or memory series of its own (as in dcgm-exporter): its
    memory is the sum over its instances, its utilisation their mean engine activity."""
    instances = [instance.readings for instance in gpu.instances.values()]
    totals: dict[str, float] = {}
    active = [r["engine_active_percent"] for r in instances if "engine_active_percent" in r]
    if active:
        totals["utilization_percent"] = round(sum(active) / len(active), 1)
    for key in ("memory_used_mib", "_memory_free_mib", "_memory_reserved_mib"):
        values = [r[key] for r in instances if key in r]
        if values:
            totals[key] = sum(values)
    return totals


def _gpu_json(gpu: _Gpu) -> dict[str, Any]:
    readings = gpu.readings
    if gpu.instances:
        readings = {**_mig_totals(gpu), **readings}
    allocated = readings.get("_allocated")
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
