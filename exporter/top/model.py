"""What ``gpu-pod-exporter top`` shows: GPU and pod rows, sorted by use, filtered, idle ones marked.

Pure functions of node views (``exporter.web.nodeview``: the ``/gpus.json`` document), whichever
source produced them (a Prometheus query or an exporter's ``/metrics``), so the tests and the
terminal UI share one sort order. "Allocated but idle" and every other condition come from
``exporter.conditions``, the definition the node page and the alert rules use.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.conditions import IDLE_BELOW_PERCENT, SHARE_IDLE_BELOW_PERCENT, is_idle

__all__ = ["IDLE_BELOW_PERCENT", "Condition", "Filters", "GpuRow", "NodeView", "PodRow", "Screen", "gpu_rows",
           "screen", "sort_gpus", "sort_pods"]
FILTER_KEYS = ("cluster", "node", "namespace", "team")
SORTS = ("use", "memory", "name")


@dataclass(frozen=True)
class NodeView:
    """One node's ``/gpus.json`` document and the cluster it belongs to ("" when unlabelled)."""

    cluster: str
    node: str
    view: Mapping[str, Any]


@dataclass(frozen=True)
class PodRow:
    cluster: str
    node: str
    namespace: str
    pod: str
    container: str
    team: str
    gpu: str  # "3", or "3/MIG 1"
    util_percent: float | None  # its own SM use on a shared GPU, the GPU's (MIG: instance's) when it has it alone
    memory_mib: float | None
    idle: bool


@dataclass(frozen=True)
class Condition:
    """One firing condition of a GPU or node, as the view reports it (``exporter.conditions``)."""

    id: str
    alert: str
    severity: str  # "warning" or "critical"
    text: str


def _conditions(entries: Sequence[Mapping[str, Any]] | None) -> tuple[Condition, ...]:
    return tuple(Condition(str(e.get("id", "")), str(e.get("alert", "")), str(e.get("severity", "")),
                           str(e.get("text", ""))) for e in entries or ())


@dataclass(frozen=True)
class GpuRow:
    cluster: str
    node: str
    gpu: int
    model: str
    uuid: str
    util_percent: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    temperature_c: float | None
    power_w: float | None
    healthy: bool | None
    health_reason: str
    pods: tuple[PodRow, ...]
    idle: bool  # allocated (a pod holds it) and used less than the idle threshold
    conditions: tuple[Condition, ...] = ()  # every condition that holds on it, worst first, with its reason

    @property
    def allocated(self) -> bool:
        return bool(self.pods)


@dataclass(frozen=True)
class Filters:
    """Exact matches; an empty value matches everything."""

    values: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Filters:
        """``namespace=ml team=vision`` -> Filters; raises ValueError naming a bad term."""
        values: dict[str, str] = {}
        for term in text.split():
            key, sep, value = term.partition("=")
            if not sep or key not in FILTER_KEYS:
                raise ValueError(f"filter {term!r}: use KEY=VALUE with KEY one of {', '.join(FILTER_KEYS)}")
            values[key] = value
        return cls({key: value for key, value in values.items() if value})

    def describe(self) -> str:
        return " ".join(f"{key}={value}" for key, value in self.values.items()) or "none"

    def pod_matches(self, pod: PodRow) -> bool:
        return all(getattr(pod, key) == value for key, value in self.values.items())

    def gpu_matches(self, gpu: GpuRow) -> bool:
        if any(getattr(gpu, key) != value for key, value in self.values.items() if key in ("cluster", "node")):
            return False
        workload = {key: value for key, value in self.values.items() if key in ("namespace", "team")}
        return not workload or any(all(getattr(pod, k) == v for k, v in workload.items()) for pod in gpu.pods)


def _pods(node: NodeView, gpu: Mapping[str, Any], idle_below: float) -> tuple[PodRow, ...]:
    """A row per container, idle as the alerts say it: alone on a GPU or MIG instance, the GPU's utilisation
    or the instance's engine activity below ``idle_below`` (GpuAllocatedButIdle); one of several sharing a
    GPU, its own SM use below ``SHARE_IDLE_BELOW_PERCENT`` (GpuSharedShareIdle)."""
    containers: Sequence[Mapping[str, Any]] = gpu.get("containers") or []
    activity = {instance.get("gpu_instance_id"): instance.get("engine_active_percent")
                for instance in gpu.get("mig") or []}
    activity[None] = gpu.get("utilization_percent")
    rows = []
    instance_pods: dict[Any, int] = {}
    for container in containers:
        instance_pods[container.get("gpu_instance_id")] = instance_pods.get(container.get("gpu_instance_id"), 0) + 1
    for container in containers:
        instance = container.get("gpu_instance_id")
        util = container.get("sm_util_percent")
        alone = instance_pods[instance] == 1
        if util is None and alone:
            util = activity.get(instance)  # alone on a GPU or instance: its use is this pod's use
        idle = is_idle(util, True, idle_below if alone else SHARE_IDLE_BELOW_PERCENT)
        where = str(gpu["gpu"]) if instance is None else f"{gpu['gpu']}/MIG {instance}"
        rows.append(PodRow(node.cluster, node.node, str(container.get("namespace", "")), str(container.get("pod", "")),
                           str(container.get("container", "")), str(container.get("team") or ""), where, util,
                           container.get("memory_used_mib"), idle))
    return tuple(rows)


def gpu_rows(nodes: Iterable[NodeView], idle_below: float = IDLE_BELOW_PERCENT) -> list[GpuRow]:
    rows = []
    for node in nodes:
        for gpu in node.view.get("gpus", []):
            pods = _pods(node, gpu, idle_below)
            util = gpu.get("utilization_percent")  # a MIG GPU's: its instances' activity weighted by their size
            lost = gpu.get("up") is False
            healthy = False if lost and gpu.get("healthy") is None else gpu.get("healthy")
            reason = gpu.get("health_reason") or ("lost" if lost else "")
            rows.append(GpuRow(node.cluster, node.node, int(gpu["gpu"]), str(gpu.get("model", "")),
                               str(gpu.get("uuid", "")), util, gpu.get("memory_used_mib"), gpu.get("memory_total_mib"),
                               gpu.get("temperature_c"), gpu.get("power_w"), healthy, reason, pods,
                               is_idle(util, bool(pods), idle_below), _conditions(gpu.get("conditions"))))
    return rows


def _use_key(value: float | None) -> float:
    return -1.0 if value is None else value


def _gpu_name(row: GpuRow) -> tuple[str, str, int]:
    return row.cluster, row.node, row.gpu


def _pod_name(row: PodRow) -> tuple[str, ...]:
    return row.cluster, row.namespace, row.pod, row.container, row.node, row.gpu


def sort_gpus(rows: Iterable[GpuRow], by: str = "use") -> list[GpuRow]:
    """Busiest first (``use``), most memory first (``memory``), or by cluster/node/index (``name``)."""
    name = _gpu_name
    if by == "memory":
        return sorted(rows, key=lambda row: (-_use_key(row.memory_used_mib), name(row)))
    if by == "name":
        return sorted(rows, key=name)
    return sorted(rows, key=lambda row: (-_use_key(row.util_percent), name(row)))


def sort_pods(rows: Iterable[PodRow], by: str = "use") -> list[PodRow]:
    name = _pod_name
    if by == "memory":
        return sorted(rows, key=lambda row: (-_use_key(row.memory_mib), name(row)))
    if by == "name":
        return sorted(rows, key=name)
    return sorted(rows, key=lambda row: (-_use_key(row.util_percent), name(row)))


@dataclass(frozen=True)
class Screen:
    """Everything one refresh shows, already filtered and sorted."""

    gpus: tuple[GpuRow, ...]
    pods: tuple[PodRow, ...]
    clusters: tuple[str, ...]


def screen(nodes: Iterable[NodeView], filters: Filters, sort: str = "use",
           idle_below: float = IDLE_BELOW_PERCENT) -> Screen:
    rows = gpu_rows(nodes, idle_below)
    clusters = tuple(sorted({row.cluster for row in rows if row.cluster}))
    gpus = [row for row in rows if filters.gpu_matches(row)]
    pods = [pod for row in rows for pod in row.pods if filters.pod_matches(pod)]
    return Screen(tuple(sort_gpus(gpus, sort)), tuple(sort_pods(pods, sort)), clusters)

