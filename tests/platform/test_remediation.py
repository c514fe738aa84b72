"""The remediation state machine against a real control plane (issue 29).

kube-apiserver, etcd, kube-controller-manager (ReplicaSet, Job and disruption controllers), the
scheduler and kwok: an 8-GPU kwok node runs two replicas of a GPU workload protected by a
PodDisruptionBudget. A fatal Xid on one GPU takes the node through every state: quarantined (taint,
condition, annotation, opt-in cordon; a concurrent writer makes the API server answer real 409
Conflicts), draining (the Eviction API refuses with 429 while the PDB allows no disruption, and
evicts once it does), repair requested (a GpuRepairRequest of the chart's CRD), validating (a real
Job on the node; its pod finishes as a kubelet would report it) and healthy again. Every
transition is an Event on the node as ``kubectl describe node`` finds them (by the node's uid).
The false-positive storm runs against the same API server: at most the configured number of nodes
is ever tainted, none after the alerts resolve, nothing applied later.

The remediator runs in-process with an injected clock (holds and backoff windows pass without
waiting); every API call is real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.api import Api, ApiError
from devcluster.control_plane import Cluster
from devcluster.nodes import KWOK_ANNOTATION
from exporter.backoff import BackoffPolicy
from exporter.remediate.alerts import parse_notification
from exporter.remediate.controller import Remediator
from exporter.remediate.kubeapi import ApiConflictError, KubeApi, load_core_api
from exporter.remediate.nodestate import PHASE_ANNOTATION, TAINT_KEY
from exporter.remediate.policy import load_policy
from exporter.remediate.selfmetrics import RemediationMetrics
from exporter.remediate.status import node_status
from tests.deploy.chart_support import load_ci_values, render
from tests.platform.support import complete_job_pod, ensure_namespace, poll
from tests.remediate.test_chart import APIS, REMEDIATION_VALUES

NODE = "remediate-gpu-0"
NAMESPACE = "ml-remediate"
REQUESTS = "/apis/remediation.gpu-pod-exporter.io/v1alpha1/gpurepairrequests"


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


class Recording(KubeApi):
    """Counts the remediator's node patches."""

    def __init__(self, core: Any) -> None:
        super().__init__(core, BackoffPolicy(initial_s=0.05, max_s=0.2), attempts=3)
        self.patches: list[str] = []

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patches.append(name)
        return super().patch_node(name, patch)


class ConcurrentWriter(KubeApi):
    """After the remediator reads the node, someone else (a kubelet, an admin) changes it ``conflicts``
    times: the API server itself answers the next node patch with 409."""

    def __init__(self, core: Any, admin: Api, conflicts: int) -> None:
        super().__init__(core, BackoffPolicy(initial_s=0.05, max_s=0.2), attempts=3)
        self.admin, self.pending, self.conflicts = admin, conflicts, 0

    def get_node(self, name: str) -> dict[str, Any]:
        node = super().get_node(name)
        if self.pending and name == NODE:
            self.pending -= 1
            self.admin.request("PATCH", f"/api/v1/nodes/{name}",
                               {"metadata": {"labels": {"example.com/written-by-someone-else": str(self.pending)}}},
                               "application/strategic-merge-patch+json")
        return node

    def patch_node(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        try:
            return super().patch_node(name, patch)
        except ApiConflictError:
            self.conflicts += 1
            raise


def install_crd(admin: Api) -> None:
    values = load_ci_values(REMEDIATION_VALUES)
    values["remediation"]["repairRequest"] = {"enabled": True}
    crd = render(values, api_versions=APIS).one("CustomResourceDefinition",
                                                 "gpurepairrequests.remediation.gpu-pod-exporter.io")
    admin.apply_create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    poll("the GpuRepairRequest CRD is served", lambda: _served(admin))


def _served(admin: Api) -> bool:
    try:
        admin.get(REQUESTS)
    except ApiError:
        return False
    return True


def kwok_node(admin: Api, name: str, gpus: int = 8) -> None:
    capacity = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    admin.apply_create("/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "type": "kwok",
                                              "nvidia.com/gpu.present": "true"},
                     "annotations": {KWOK_ANNOTATION: "fake"}},
        "status": {"capacity": capacity, "allocatable": capacity}})
    poll(f"kwok reports {name} Ready", lambda: any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (admin.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions") or [])))


def workload(admin: Api) -> list[str]:
    """Two replicas on the node, one GPU each, and a PDB that allows no disruption yet."""
    ensure_namespace(admin, NAMESPACE)
    labels = {"app": "trainer"}
    admin.apply_create(f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "trainer"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": NODE},
                     "containers": [{"name": "main", "image": "registry.example/trainer:1",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}}})
    admin.apply_create(f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "trainer"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": labels}}})
    poll("the PDB counts both replicas healthy", lambda: admin.get(
        f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/trainer").get("status", {})
        .get("currentHealthy") == 2)
    return sorted(pod["metadata"]["name"] for pod in running_pods(admin))


def running_pods(admin: Api) -> list[dict[str, Any]]:
    pods = admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?fieldSelector=spec.nodeName={NODE}")["items"]
    return [p for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get(
        "deletionTimestamp")]


def notify(remediator: Remediator, *alerts: dict[str, Any]) -> None:
    body = {"version": "4", "status": alerts[0]["status"], "receiver": "remediate", "groupKey": "g",
            "truncatedAlerts": 0, "alerts": list(alerts)}
    remediator.receive(parse_notification(json.dumps(body).encode()))


def xid(node: str, starts: datetime, *, status: str = "firing", ends: datetime | None = None,
        **labels: str) -> dict[str, Any]:
    return {"status": status, "labels": {"alertname": "GpuXidFatal", "Hostname": node, "UUID": f"GPU-{node}-3",
                                         "gpu": "3", "xid": "79", "modelName": "NVIDIA H100 80GB HBM3", **labels},
            "annotations": {"summary": "fatal Xid"}, "startsAt": starts.isoformat(),
            "endsAt": (ends or datetime(1, 1, 1, tzinfo=UTC)).isoformat(), "fingerprint": f"fp-{node}"}


def node_events(admin: Api, node: dict[str, Any]) -> list[dict[str, Any]]:
    """The node's Events the way ``kubectl describe node`` selects them."""
    selector = (f"involvedObject.kind=Node,involvedObject.name={node['metadata']['name']},"
                f"involvedObject.uid={node['metadata']['uid']}")
    events = admin.get(f"/api/v1/events?fieldSelector={selector}")["items"]
    return sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))  # the order they were recorded


def our_taint(node: dict[str, Any]) -> dict[str, Any] | None:
    return next((t for t in node["spec"].get("taints") or [] if t["key"] == TAINT_KEY), None)


@pytest.fixture
def setup(cluster: Cluster, admin: Api, tmp_path: Path) -> Iterator[tuple[Api, Path]]:
    install_crd(admin)
    kwok_node(admin, NODE)
    try:
        yield admin, cluster.kubeconfig
    finally:
        admin.delete(f"/api/v1/namespaces/{NAMESPACE}")
        admin.delete(f"/api/v1/nodes/{NODE}")


def make(policy: dict[str, Any], kubeconfig: Path, tmp_path: Path, clock: Clock, api: KubeApi | None = None
         ) -> Remediator:
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy), encoding="utf-8")
    loaded = load_policy(str(path))
    return Remediator(loaded, api or KubeApi(load_core_api(str(kubeconfig))), RemediationMetrics(loaded.mode),
                      clock=clock, recheck_s=5)


def test_a_fatal_xid_on_one_gpu_of_an_8_gpu_node_goes_through_the_whole_state_machine(
        setup: tuple[Api, Path], tmp_path: Path) -> None:
    admin, kubeconfig = setup
    pods = workload(admin)
    clock = Clock()
    policy = {"mode": "enforce",
              "alerts": {"GpuXidFatal": {"actions": ["event", "taint", "annotate", "condition", "cordon"],
                                         "untaint_after": "10m"}},
              "limits": {"cooldown": "0s", "max_tainted_percent": 100},
              "drain": {"mode": "evict"}, "repair_request": True,
              "validation": {"image": "registry.example/gpu-diag:1", "namespace": NAMESPACE,
                             "command": ["dcgmi", "diag", "-r", "2"]}}
    api = ConcurrentWriter(load_core_api(str(kubeconfig)), admin, conflicts=2)
    remediator = make(policy, kubeconfig, tmp_path, clock, api)
    failed_gpu_pod = pods[0]  # the exporter's attribution names the pod on GPU 3
    notify(remediator, xid(NODE, clock.now - timedelta(minutes=1), pod=failed_gpu_pod, namespace=NAMESPACE))

    # quarantined, through two real 409 Conflicts; the other writer's label survives
    remediator.run_once()
    node = admin.get(f"/api/v1/nodes/{NODE}")
    assert api.conflicts == 2
    assert node["metadata"]["labels"]["example.com/written-by-someone-else"] == "0"
    assert our_taint(node) is not None and our_taint(node)["value"] == "3"
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["annotations"]["gpu-pod-exporter/unhealthy-gpus"] == f"GPU-{NODE}-3"
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == "UnhealthyGPU"]
    assert condition["status"] == "True" and condition["reason"] == "GpuXidFatal"

    # draining: the PDB (minAvailable 2) refuses, the remediator backs off; relaxed, the eviction passes
    assert {p["metadata"]["name"] for p in running_pods(admin)} == set(pods)
    assert remediator.metrics.actions.labels("evict", "deferred")._value.get() == 1
    draining = node_status(admin.get(f"/api/v1/nodes/{NODE}"))  # what `remediate status` prints for the node
    assert draining is not None and draining.state == "draining", draining
    assert (f"{NAMESPACE}/{failed_gpu_pod}: eviction refused by PodDisruptionBudget {NAMESPACE}/trainer ("
            in draining.why), draining.why
    admin.request("PATCH", f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/trainer",
                  {"spec": {"minAvailable": 1}}, "application/merge-patch+json")
    poll("the PDB allows one disruption", lambda: admin.get(
        f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/trainer")["status"].get(
        "disruptionsAllowed") == 1)
    for _ in range(3):
        clock.advance(seconds=20)
        remediator.run_once()
    poll("the pod on the failed GPU is gone", lambda: failed_gpu_pod not in {
        p["metadata"]["name"] for p in running_pods(admin)})
    remaining = {p["metadata"]["name"] for p in running_pods(admin)}
    assert failed_gpu_pod not in remaining and pods[1] in remaining  # the healthy GPU's replica stays
    assert remediator.metrics.actions.labels("evict", "applied")._value.get() == 1
    replacement = [p for p in admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
                   if p["metadata"]["name"] not in pods]
    assert all(not p["spec"].get("nodeName") for p in replacement)  # the taint and cordon keep it off

    # repair requested
    node = admin.get(f"/api/v1/nodes/{NODE}")
    assert json.loads(node["metadata"]["annotations"][PHASE_ANNOTATION])["phase"] == "repair-requested"
    [request] = [r for r in admin.get(REQUESTS)["items"] if r["spec"]["nodeName"] == NODE]
    assert request["spec"]["gpus"] == [{"uuid": f"GPU-{NODE}-3", "index": "3"}]
    assert request["spec"]["evidence"][0]["xid"] == "79"

    # validating: the alert resolves, the hold passes, a real Job runs on the node
    notify(remediator, xid(NODE, clock.now - timedelta(minutes=1), status="resolved", ends=clock.now,
                           pod=failed_gpu_pod, namespace=NAMESPACE))
    clock.advance(minutes=11)
    remediator.run_once()
    [job] = admin.get(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")["items"]
    assert our_taint(admin.get(f"/api/v1/nodes/{NODE}")) is not None
    job_pod = poll("the validation pod runs on the node", lambda: next(
        (p for p in admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=job-name={job['metadata']['name']}")
         ["items"] if p["spec"].get("nodeName") == NODE and p.get("status", {}).get("phase") == "Running"), None))
    clock.advance(seconds=10)
    remediator.run_once()
    assert our_taint(admin.get(f"/api/v1/nodes/{NODE}")) is not None  # still running: still out
    complete_job_pod(admin, NAMESPACE, job, job_pod)  # the diagnostic passes
    clock.advance(seconds=10)
    remediator.run_once()

    # healthy again: our own taint, cordon and condition removed
    node = admin.get(f"/api/v1/nodes/{NODE}")
    assert our_taint(node) is None and not node["spec"].get("unschedulable")
    assert PHASE_ANNOTATION not in node["metadata"]["annotations"]
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == "UnhealthyGPU"]
    assert condition["status"] == "False"
    reasons = [e["reason"] for e in node_events(admin, node)]
    assert reasons == ["GpuXidFatal", "GpuRemediationTainted", "GpuRemediationDrained",
                       "GpuRemediationRepairRequested", "GpuRemediationValidating", "GpuRemediationValidated",
                       "GpuRemediationUntainted"], reasons


def test_the_false_positive_storm_taints_at_most_the_limit_and_nothing_after_it_resolves(
        setup: tuple[Api, Path], tmp_path: Path) -> None:
    admin, kubeconfig = setup
    storm = [f"remediate-storm-{index}" for index in range(10)]
    try:
        for name in storm:
            kwok_node(admin, name)
        clock = Clock()
        policy = {"mode": "enforce", "alerts": {"GpuXidFatal": {"untaint_after": "0s"}},
                  "limits": {"cooldown": "10m", "max_nodes_per_hour": 2, "max_tainted_percent": 100}}
        api = Recording(load_core_api(str(kubeconfig)))
        remediator = make(policy, kubeconfig, tmp_path, clock, api)
        starts = clock.now - timedelta(minutes=1)
        notify(remediator, *(xid(name, starts) for name in storm))
        tainted_ever: set[str] = set()

        def tainted() -> set[str]:
            now = {n for n in storm if our_taint(admin.get(f"/api/v1/nodes/{n}")) is not None}
            tainted_ever.update(now)
            return now

        remediator.run_once()
        assert len(tainted()) == 2 and remediator.breaker.is_open
        clock.advance(minutes=4)
        remediator.run_once()
        notify(remediator, *(xid(name, starts, status="resolved", ends=clock.now) for name in storm))
        for _ in range(15):  # the two tainted ones wait out the cooldown, then are untainted
            clock.advance(minutes=1)
            remediator.run_once()
            tainted()
        assert tainted() == set()
        patched = len(api.patches)
        for _ in range(30):  # two hours: nothing held is left to land
            clock.advance(minutes=5)
            remediator.run_once()
            tainted()
        assert len(tainted_ever) == 2 and tainted() == set()
        assert len(api.patches) == patched  # nothing applied later
        dropped = [e for e in admin.get("/api/v1/namespaces/default/events")["items"]
                   if e["reason"] == "GpuRemediationDropped" and e["involvedObject"]["name"] in storm]
        assert len(dropped) == 8
    finally:
        for name in storm:
            admin.delete(f"/api/v1/nodes/{name}")
