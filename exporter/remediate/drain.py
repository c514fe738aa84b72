"""Which pods of a quarantined node to evict, and when: the drain plan. Pure.

A taint only keeps new pods away; the work already on a failed GPU keeps failing (or, with
``NoExecute``, is killed without regard to PodDisruptionBudgets). The remediator drains through
the Eviction API instead (``policy/v1`` Eviction, which the API server refuses with 429 while a
PodDisruptionBudget would be violated), pod by pod, under these rules:

* **only the pods on the failed GPUs** when the allocation is known (the alerts name the pods, as
  the exporter's pod attribution labels them); when it is not (a node-level alert, no pod labels),
  every pod of the node that requests a GPU resource;
* **never a DaemonSet's pod** (the DaemonSet would recreate it on the same node, and node agents
  such as the exporter itself must stay), never a mirror (static) pod, never a pod that has
  finished; **never an unmanaged pod** (no controller owner: evicting it deletes it for good)
  unless ``drain.unmanaged_pods`` allows it;
* a **mode** per pod: the pod's label ``drain.pod_label`` (value ``none``, ``evict`` or
  ``allow-completion``) wins over the mode of its namespace (``drain.namespaces``), which wins over
  ``drain.mode``. ``none``: left alone; ``evict``: evicted now; ``allow-completion``: left to finish
  until ``drain.deadline`` after the drain started, then evicted.

``plan()`` only decides; the controller makes the calls (and in dry-run prints the plan).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any

DRAIN_MODES = ("none", "evict", "allow-completion")
DEFAULT_POD_LABEL = "gpu-pod-exporter/drain"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


@dataclass(frozen=True)
class DrainPolicy:
    mode: str = "none"
    deadline_s: float = 3600.0
    namespaces: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    pod_label: str = DEFAULT_POD_LABEL
    unmanaged_pods: bool = False


@dataclass(frozen=True)
class PodDecision:
    namespace: str
    name: str
    action: str  # "evict" (now), "wait" (allowed to complete until the deadline), "skip"
    why: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}: {self.action} ({self.why})"


def owner_kind(pod: Mapping[str, Any]) -> str | None:
    """The kind of the pod's controller owner; None for an unmanaged pod."""
    for owner in pod.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return str(owner.get("kind", ""))
    return None


def requests_gpu(pod: Mapping[str, Any], prefixes: tuple[str, ...]) -> bool:
    for container in pod.get("spec", {}).get("containers") or []:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            if any(name.startswith(prefixes) and str(value) not in ("0", "")
                   for name, value in (resources.get(section) or {}).items()):
                return True
    return False


def pod_mode(pod: Mapping[str, Any], policy: DrainPolicy) -> tuple[str, str]:
    """(mode, where it came from) for one pod."""
    metadata = pod.get("metadata", {})
    labelled = (metadata.get("labels") or {}).get(policy.pod_label) if policy.pod_label else None
    if labelled in DRAIN_MODES:
        return labelled, f"pod label {policy.pod_label}={labelled}"
    namespace = metadata.get("namespace", "")
    if namespace in policy.namespaces:
        return policy.namespaces[namespace], f"namespace {namespace}"
    return policy.mode, "drain.mode"


def plan(pods: Iterable[Mapping[str, Any]], policy: DrainPolicy, *, on_failed_gpus: set[tuple[str, str]] | None,
         gpu_resources: tuple[str, ...], started: datetime, now: datetime) -> list[PodDecision]:
    """The decision for every pod of the node (``on_failed_gpus``: the pods known to use the failed GPUs,
    None when the allocation is unknown)."""
    decisions: list[PodDecision] = []
    deadline = started + timedelta(seconds=policy.deadline_s)
    for pod in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"].get("name", ""))):
        metadata = pod["metadata"]
        key = (metadata.get("namespace", ""), metadata.get("name", ""))
        decisions.append(PodDecision(*key, *_decide(pod, key, policy, on_failed_gpus=on_failed_gpus,
                                                    gpu_resources=gpu_resources, deadline=deadline, now=now)))
    return decisions


def _decide(pod: Mapping[str, Any], key: tuple[str, str], policy: DrainPolicy, *,
            on_failed_gpus: set[tuple[str, str]] | None, gpu_resources: tuple[str, ...], deadline: datetime,
            now: datetime) -> tuple[str, str]:
    if pod.get("status", {}).get("phase") in ("Succeeded", "Failed"):
        return "skip", "finished"
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return "skip", "already terminating"
    if on_failed_gpus is not None:
        if key not in on_failed_gpus:
            return "skip", "not on a failed GPU"
    elif not requests_gpu(pod, gpu_resources):
        return "skip", "requests no GPU"
    if MIRROR_ANNOTATION in (pod.get("metadata", {}).get("annotations") or {}):
        return "skip", "static (mirror) pod"
    kind = owner_kind(pod)
    if kind == "DaemonSet":
        return "skip", "DaemonSet pod: never evicted"
    if kind is None and not policy.unmanaged_pods:
        return "skip", "unmanaged pod (no controller): never evicted unless drain.unmanaged_pods is true"
    mode, source = pod_mode(pod, policy)
    if mode == "none":
        return "skip", f"drain mode none ({source})"
    if mode == "allow-completion" and now < deadline:
        return "wait", f"allowed to complete until {deadline:%Y-%m-%d %H:%M:%S} UTC ({source})"
    if mode == "allow-completion":
        return "evict", f"completion deadline passed ({source})"
    return "evict", f"drain mode evict ({source})"


def describe(decisions: Iterable[PodDecision]) -> str:
    """The plan in one line, for the dry-run Event and the log."""
    listed = [str(decision) for decision in decisions]
    return "; ".join(listed) if listed else "no pod on the node"


def remaining(decisions: Iterable[PodDecision]) -> list[PodDecision]:
    """What still keeps the drain from being done."""
    return [decision for decision in decisions if decision.action in ("evict", "wait")]
