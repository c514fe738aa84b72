"""The remediator's per-GPU quarantine decisions, in process against an in-memory cluster.

What one real run (tests/platform/test_device_taints.py) does not vary: dry-run reports the rule it
would write and writes nothing; a cluster that does not serve DeviceTaintRules keeps the node taint;
the share limit counts DRA-only nodes as GPU nodes; NoExecute without a drain is written at once.
The node patches go through the fake API server's own patch semantics (tests/remediate/fakenodeapi.py).
"""

from __future__ import annotations

import copy
import json
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from exporter.remediate import devicetaints as dt
from exporter.remediate.alerts import parse_notification
from exporter.remediate.controller import Remediator
from exporter.remediate.kubeapi import ApiError
from exporter.remediate.nodestate import TAINT_KEY
from exporter.remediate.policy import load_policy
from exporter.remediate.selfmetrics import RemediationMetrics
from simulator.dra_devices import DRIVER, gpu_device
from simulator.fakeapiserver import resource_slice
from simulator.fakepatch import apply_patch


class Cluster:
    """The calls the remediator makes, on plain dictionaries; records rule writes and node patches."""

    def __init__(self, dra_nodes: list[str], *, serves_rules: bool = True) -> None:
        self.stop = threading.Event()
        self.nodes: dict[str, dict[str, Any]] = {}
        self.slices = [resource_slice(f"{n}-gpus", DRIVER, n, [gpu_device(i, uuid(n, i)) for i in range(8)],
                                      node_name=n) for n in dra_nodes]
        for name in dra_nodes:
            self.nodes[name] = {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                                             "annotations": {}, "labels": {}},
                                "spec": {}, "status": {"allocatable": {"cpu": "64"}, "conditions": []}}
        self.serves_rules = serves_rules
        self.rules: dict[str, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self.node_patches: list[tuple[str, dict[str, Any]]] = []

    def get_node(self, name: str) -> dict[str, Any]:
        if name not in self.nodes:
            raise ApiError(404, f"nodes {name} not found")
        return copy.deepcopy(self.nodes[name])

    def list_nodes(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(n) for n in self.nodes.values()]

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.node_patches.append((name, patch))
        body = copy.deepcopy(patch)
        body.get("metadata", {}).pop("resourceVersion", None)
        self.nodes[name] = apply_patch(self.nodes[name], "application/strategic-merge-patch+json", body)
        return self.nodes[name]

    def patch_node_status(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.nodes[name]

    def list_pods_on_node(self, node: str) -> list[dict[str, Any]]:
        return []

    def create_event(self, namespace: str, event: dict[str, Any]) -> dict[str, Any]:
        self.events.append(event)
        return event

    def list_resource_slices(self, node: str | None = None) -> list[dict[str, Any]]:
        return [s for s in self.slices if node is None or s["spec"]["nodeName"] == node]

    def device_taint_rule_version(self, versions: tuple[str, ...]) -> str | None:
        return "v1beta2" if self.serves_rules else None

    def list_device_taint_rules(self, version: str, label_selector: str) -> list[dict[str, Any]]:
        return [copy.deepcopy(r) for r in self.rules.values()]

    def apply_device_taint_rule(self, version: str, body: dict[str, Any]) -> dict[str, Any]:
        self.rules[body["metadata"]["name"]] = copy.deepcopy(body)
        return body

    def delete_device_taint_rule(self, version: str, name: str) -> None:
        self.rules.pop(name, None)


def uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def remediator(cluster: Cluster, tmp_path: Path, policy: dict[str, Any]) -> tuple[Remediator, list[datetime]]:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    loaded = load_policy(str(path))
    now = [datetime(2026, 12, 4, 12, 0, tzinfo=UTC)]
    return Remediator(loaded, cluster, RemediationMetrics(loaded.mode), clock=lambda: now[0]), now  # type: ignore[arg-type]


def fire(target: Remediator, node: str, index: int, starts: datetime) -> None:
    alert = {"status": "firing", "labels": {"alertname": "GpuXidFatal", "Hostname": node, "UUID": uuid(node, index),
                                            "gpu": str(index), "xid": "79"},
             "annotations": {}, "startsAt": starts.isoformat(), "endsAt": "0001-01-01T00:00:00Z",
             "fingerprint": f"fp-{node}-{index}"}
    body = {"version": "4", "status": "firing", "receiver": "r", "groupKey": "g", "truncatedAlerts": 0,
            "alerts": [alert]}
    target.receive(parse_notification(json.dumps(body).encode()))


ENFORCE = {"mode": "enforce", "device_taints": True, "limits": {"cooldown": "0s", "max_tainted_percent": 100}}


def test_dry_run_reports_the_rule_it_would_write_and_writes_nothing(tmp_path: Path) -> None:
    cluster = Cluster(["n1"])
    target, now = remediator(cluster, tmp_path, {**ENFORCE, "mode": "dry-run"})
    fire(target, "n1", 3, now[0] - timedelta(minutes=1))
    target.run_once()
    assert cluster.rules == {} and cluster.node_patches == []
    [event] = [e for e in cluster.events if e["reason"] == "GpuRemediationDryRun"]
    name = dt.rule_name("n1", dt.DeviceRef(DRIVER, "n1", "gpu-3"))
    assert f"write DeviceTaintRule {name} ({DRIVER}/n1/gpu-3: {TAINT_KEY}:NoSchedule)" in event["message"]
    assert f"taint {TAINT_KEY}=" not in event["message"]  # no node taint


def test_a_cluster_that_serves_no_rules_keeps_the_node_taint(tmp_path: Path) -> None:
    cluster = Cluster(["n1"], serves_rules=False)
    target, now = remediator(cluster, tmp_path, ENFORCE)
    fire(target, "n1", 3, now[0] - timedelta(minutes=1))
    target.run_once()
    assert cluster.rules == {}
    assert cluster.nodes["n1"]["spec"]["taints"] == [{"key": TAINT_KEY, "value": "3", "effect": "NoSchedule"}]


def test_enforce_writes_one_rule_and_no_node_taint_and_no_execute_without_drain_at_once(tmp_path: Path) -> None:
    cluster = Cluster(["n1"])
    policy = {**ENFORCE, "alerts": {"GpuXidFatal": {"taint_effect": "NoExecute"}}}
    target, now = remediator(cluster, tmp_path, policy)
    fire(target, "n1", 5, now[0] - timedelta(minutes=1))
    target.run_once()
    [rule] = cluster.rules.values()
    assert rule["spec"]["deviceSelector"] == {"driver": DRIVER, "pool": "n1", "device": "gpu-5"}
    assert rule["spec"]["taint"]["effect"] == "NoExecute"  # no drain configured: the controller-manager evicts
    assert not cluster.nodes["n1"]["spec"].get("taints")
    fire(target, "n1", 6, now[0] - timedelta(minutes=1))  # a second GPU of the node: a second rule
    target.run_once()
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in cluster.rules.values()) == ["gpu-5", "gpu-6"]


def test_the_share_limit_counts_dra_only_nodes_as_gpu_nodes(tmp_path: Path) -> None:
    names = [f"dra-{i}" for i in range(10)]
    cluster = Cluster(names)
    policy = {**ENFORCE, "limits": {"cooldown": "0s", "max_tainted_percent": 20, "max_nodes_per_hour": 100}}
    target, now = remediator(cluster, tmp_path, policy)
    for name in names[:3]:
        fire(target, name, 0, now[0] - timedelta(minutes=1))
    target.run_once()
    # 20 % of 10 GPU nodes: two quarantined (without counting DRA nodes there would be 0 GPU nodes: one only)
    assert sorted({r["metadata"]["annotations"][dt.NODE_LABEL] for r in cluster.rules.values()}) == names[:2]
    held = [e for e in cluster.events if e["reason"] == "GpuRemediationSuppressed"]
    assert [e["involvedObject"]["name"] for e in held] == [names[2]]
    assert "max_tainted_percent" in held[0]["message"] or "of 10 GPU nodes" in held[0]["message"]


def test_without_the_right_to_read_slices_the_gpu_still_gets_the_node_taint(tmp_path: Path) -> None:
    """A missing RBAC rule must not leave a broken GPU in service: the node taint, and a warning."""
    cluster = Cluster(["n1"])

    def forbidden(node: str | None = None) -> list[dict[str, Any]]:
        raise ApiError(403, "resourceslices.resource.k8s.io is forbidden")

    cluster.list_resource_slices = forbidden  # type: ignore[method-assign]
    target, now = remediator(cluster, tmp_path, ENFORCE)
    fire(target, "n1", 2, now[0] - timedelta(minutes=1))
    target.run_once()
    assert cluster.rules == {}
    assert cluster.nodes["n1"]["spec"]["taints"] == [{"key": TAINT_KEY, "value": "2", "effect": "NoSchedule"}]

