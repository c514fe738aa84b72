"""Kubernetes Events (core/v1) that explain an alert and what the remediator did about it. Pure.

Two kinds, both readable with ``kubectl describe node|pod`` and ``kubectl get events``:

* **alert context**, reason = the alert name, on the Node and on every pod of the GPU: which GPU
  (index, UUID, model), the Xid code and what it means, the pods sharing that GPU, the alert's
  summary and runbook, so the on-call engineer does not have to look them up;
* **decisions**, on the Node: ``GpuRemediationTainted`` / ``Untainted`` (done),
  ``GpuRemediationDryRun`` (what enforce mode would have done), ``GpuRemediationSuppressed``
  (held by the circuit breaker), ``GpuRemediationDeferred`` (held by the cooldown),
  ``GpuRemediationDropped`` (its alert resolved while the change was held) and
  ``GpuRemediationBreakerOpen`` (the hourly limit latched the breaker open), ``GpuRemediationEvicted``
  (on the pod: evicted by the drain), ``GpuRemediationDrained`` (nothing on the failed GPUs left),
  ``GpuRemediationRepairRequested``, ``GpuRemediationValidating``, ``GpuRemediationValidated`` and
  ``GpuRemediationValidationFailed`` (the hand-off and re-admission, docs/remediation.md).

Event names are derived from what they report (alert occurrence, object, reason), so a replayed
webhook, even after a restart of the remediator, creates the same name and the API server answers
409 AlreadyExists instead of recording a duplicate.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from exporter.remediate.nodestate import rfc3339
from exporter.xid_codes import xid_message

COMPONENT = "gpu-pod-exporter-remediate"
NODE_EVENT_NAMESPACE = "default"  # where the kubelet records node events too
MAX_MESSAGE = 1024
REASON_TAINTED = "GpuRemediationTainted"
REASON_UNTAINTED = "GpuRemediationUntainted"
REASON_DRY_RUN = "GpuRemediationDryRun"
REASON_SUPPRESSED = "GpuRemediationSuppressed"
REASON_DEFERRED = "GpuRemediationDeferred"
REASON_DROPPED = "GpuRemediationDropped"
REASON_EVICTED = "GpuRemediationEvicted"
REASON_DRAINED = "GpuRemediationDrained"
REASON_REPAIR_REQUESTED = "GpuRemediationRepairRequested"
REASON_VALIDATING = "GpuRemediationValidating"
REASON_VALIDATION_FAILED = "GpuRemediationValidationFailed"
REASON_VALIDATED = "GpuRemediationValidated"
REASON_BREAKER_OPEN = "GpuRemediationBreakerOpen"
_NAME_UNSAFE = re.compile(r"[^a-z0-9.-]+")

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


def describe_gpu(labels: Mapping[str, str]) -> str:
    """``GPU 3 (GPU-..., H100 80GB HBM3, MIG instance 2)`` from an alert's labels."""
    if not labels.get("UUID"):
        return "the node as a whole (the alert names no GPU UUID)"
    details = [labels["UUID"]]
    if labels.get("modelName"):
        details.append(labels["modelName"])
    if labels.get("GPU_I_ID"):
        details.append(f"MIG {labels.get('GPU_I_PROFILE', '')} instance {labels['GPU_I_ID']}".replace("  ", " "))
    return f"GPU {labels.get('gpu', '?')} ({', '.join(details)})"


def describe_problem(labels: Mapping[str, str]) -> str:
    """The alert's cause in words: the Xid code and its meaning when there is one."""
    xid = labels.get("xid", "")
    if xid.isdigit():
        return f"Xid {xid} ({xid_message(int(xid))})"
    return labels.get("alertname", "alert")


def alert_context(labels: Mapping[str, str], annotations: Mapping[str, str], pods: Iterable[PodRef], *,
                  node: str) -> str:
    """The shared part of the alert-context messages (``node``: as the controller's node-label lookup found it)."""
    sharing = sorted({str(pod) for pod in pods})
    parts = [f"{labels.get('alertname', 'alert')}: {describe_gpu(labels)} on node "
             f"{node or '?'} reported {describe_problem(labels)}."]
    parts.append(f"Pods on this GPU: {', '.join(sharing)}." if sharing else "No pod is known to use this GPU.")
    if annotations.get("summary"):
        parts.append(annotations["summary"].rstrip(".") + ".")
    if annotations.get("runbook_url"):
        parts.append(f"Runbook: {annotations['runbook_url']}")
    return " ".join(parts)


def event_name(object_name: str, *identity: str) -> str:
    """``<object>.<16 hex>``: deterministic for the same ``identity``, a valid DNS subdomain."""
    digest = hashlib.sha256("\0".join(identity).encode("utf-8")).hexdigest()[:16]
    prefix = _NAME_UNSAFE.sub("-", object_name.lower()).strip(".-")[:200] or "object"
    return f"{prefix}.{digest}"


def node_event(node: str, node_uid: str, reason: str, message: str, now: datetime, *, identity: str,
               warning: bool = True, instance: str = "") -> tuple[str, JsonObject]:
    """(namespace, Event) about a Node."""
    involved = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid or node}
    return NODE_EVENT_NAMESPACE, _event(NODE_EVENT_NAMESPACE, event_name(node, "Node", node, reason, identity),
                                        involved, reason, message=message, now=now, warning=warning,
                                        instance=instance)


def pod_event(pod: PodRef, reason: str, message: str, now: datetime, *, identity: str,
              instance: str = "") -> tuple[str, JsonObject]:
    """(namespace, Event) about a pod."""
    involved: JsonObject = {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "namespace": pod.namespace}
    if pod.uid:
        involved["uid"] = pod.uid
    name = event_name(pod.name, "Pod", pod.namespace, pod.name, reason, identity)
    return pod.namespace, _event(pod.namespace, name, involved, reason, message=message, now=now, warning=True,
                                 instance=instance)


def _event(namespace: str, name: str, involved: JsonObject, reason: str, *, message: str, now: datetime,
           warning: bool, instance: str) -> JsonObject:
    stamp = rfc3339(now)
    text = message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 1] + "…"
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": namespace,
                     "labels": {"app.kubernetes.io/managed-by": COMPONENT}},
        "involvedObject": involved,
        "reason": reason,
        "message": text,
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance or COMPONENT,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
