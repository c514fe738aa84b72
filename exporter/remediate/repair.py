"""The hand-off to repair and the validation before re-admission: the objects the remediator creates. Pure.

**Repair request: a small CRD, not a webhook.** ``GpuRepairRequest``
(``remediation.gpu-pod-exporter.io/v1alpha1``, cluster-scoped, one per node and episode) carries
the node, the failed GPUs (index, UUID) and the evidence (alert names, Xid codes, ECC and
row-remap reasons, fingerprints). A CRD is durable (it survives a restart of either side and a
repair system that is down for a day), needs no endpoint, credentials or retry queue of ours,
is visible with ``kubectl get gpurepairrequests``, is guarded by RBAC like everything else, and
the repair side (a person, a ticketing bridge, a vendor tool) writes its own ``status``. A webhook
would need all of that rebuilt. The schema is in the chart (``crds/``) and docs/remediation.md.

**Validation Job.** When ``validation.image`` is set, re-admission waits for a Job running that
image (the user's GPU diagnostic, e.g. DCGM's ``dcgmi diag -r 2``) on the node, with our taint
tolerated and every GPU of the node visible, to succeed; a failed Job keeps the node out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from exporter.remediate.alerts import Alert
from exporter.remediate.nodestate import TAINT_KEY, rfc3339

API_VERSION = "remediation.gpu-pod-exporter.io/v1alpha1"
KIND = "GpuRepairRequest"
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-pod-exporter-remediate"}

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class Validation:
    """``validation:`` in the policy file."""

    image: str
    namespace: str = "gpu-monitoring"
    command: tuple[str, ...] = ()


def episode_name(node: str, since: datetime) -> str:
    """``<node>-<8 hex>``: one name per node and quarantine episode (a replay creates the same name: 409)."""
    digest = hashlib.sha256(f"{node}\0{rfc3339(since)}".encode()).hexdigest()[:8]
    return f"{node[:200]}-{digest}"


def evidence(alerts: Iterable[Alert]) -> list[JsonObject]:
    """What the alerts say about the fault: alert, Xid, reason (ECC, row remap...), when, fingerprint."""
    found = []
    for alert in sorted(alerts, key=lambda a: (a.starts_at, a.fingerprint)):
        item = {"alert": alert.name, "fingerprint": alert.fingerprint, "since": rfc3339(alert.starts_at)}
        for label in ("xid", "reason", "err_code", "modelName"):
            if alert.labels.get(label):
                item[label] = alert.labels[label]
        found.append(item)
    return found


def repair_request(node: str, since: datetime, gpus: Mapping[str, str], alerts: Iterable[Alert]) -> JsonObject:
    """The GpuRepairRequest for ``node``; ``gpus``: UUID -> index (``node`` for a node-level fault)."""
    return {
        "apiVersion": API_VERSION, "kind": KIND,
        "metadata": {"name": episode_name(node, since), "labels": dict(MANAGED_BY)},
        "spec": {"nodeName": node, "requestedAt": rfc3339(since),
                 "gpus": [{"uuid": uuid, "index": index} for uuid, index in sorted(gpus.items())],
                 "evidence": evidence(alerts)},
    }


def validation_job(node: str, since: datetime, validation: Validation) -> JsonObject:
    """The Job that must succeed on ``node`` before the remediator lifts its marks."""
    # Every GPU of the node, the failed one included, which the device plugin may no longer hand out:
    # NVIDIA_VISIBLE_DEVICES=all (the container toolkit's default mode honours it) instead of a resource claim.
    container: JsonObject = {"name": "validate", "image": validation.image,
                             "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
    if validation.command:
        container["command"] = list(validation.command)
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": f"validate-{episode_name(node, since)}"[:63].rstrip("-"),
                     "namespace": validation.namespace, "labels": dict(MANAGED_BY)},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 86400,
                 "template": {"metadata": {"labels": dict(MANAGED_BY)},
                              "spec": {"nodeName": node, "restartPolicy": "Never",
                                       "tolerations": [{"key": TAINT_KEY, "operator": "Exists"},
                                                       {"key": "node.kubernetes.io/unschedulable",
                                                        "operator": "Exists", "effect": "NoSchedule"}],
                                       "containers": [container]}}},
    }


def job_outcome(job: Mapping[str, Any]) -> str:
    """``succeeded``, ``failed`` or ``running``, from the Job's status."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") == "True" and condition.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if condition.get("status") == "True" and condition.get("type") in ("Failed", "FailureTarget"):
            return "failed"
    if status.get("succeeded"):
        return "succeeded"
    if status.get("failed"):
        return "failed"
    return "running"
