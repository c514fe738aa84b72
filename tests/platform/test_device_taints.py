"""Per-GPU quarantine with a DeviceTaintRule on a real control plane (issue 43).

kube-apiserver v1.36 serving ``resource.k8s.io/v1beta2`` DeviceTaintRules, the scheduler and the
controller-manager with the ``DRADeviceTaintRules`` gate (``scripts/cluster`` turns both on), kwok.
A kwok node publishes three GPUs through a ResourceSlice of NVIDIA's DRA driver (the shape the
exporter reads, ``simulator.dra_devices``); a two-replica workload claims one GPU per pod through a
ResourceClaimTemplate, under a PodDisruptionBudget. A fatal Xid on the GPU of one replica:

* the remediator (``device_taints: true``, ``taint_effect: NoExecute``, ``drain: evict``) writes a
  DeviceTaintRule selecting exactly that device by driver, pool and device name, NoSchedule while
  it drains; the node gets no taint and no cordon: its other GPUs stay in service;
* the drain goes through the Eviction API: refused (429) while the PDB allows no disruption, done
  once it allows one; then the rule becomes NoExecute;
* the ReplicaSet's replacement pod gets a new claim: the real scheduler allocates the node's last
  healthy GPU (the bad one is free by then, but tainted); one more claim stays unschedulable;
* the alert resolves and the hold passes: a real validation Job runs on the node; once it succeeded
  the rule is deleted, and the waiting claim lands on the repaired GPU. A second episode is cleared
  by hand as docs/remediation.md says (delete the rule and the node's annotations): the remediator
  does not put it back.

The remediator runs in-process with an injected clock (holds and backoff windows pass without
waiting); every API call is real.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.remediate import devicetaints as dt
from exporter.remediate.kubeapi import KubeApi, load_core_api
from exporter.remediate.nodestate import GPUS_ANNOTATION, STATE_ANNOTATION
from simulator import dra_devices
from simulator.fakeapiserver import resource_slice
from tests.platform.support import complete_job_pod, ensure_namespace, poll
from tests.platform.test_remediation import Clock, kwok_node, make, notify, our_taint, xid

NODE = "dra-taint-gpu-0"
SERIAL = itertools.count()
GROUP = "/apis/resource.k8s.io/v1"
RULES = "/apis/resource.k8s.io/v1beta2/devicetaintrules"
UUIDS = {index: f"GPU-dra-taint-{index:04d}-0000-0000-000000000000" for index in range(3)}
LABELS = {"app": "dra-trainer"}


def gpu_claim_spec() -> dict[str, Any]:
    return {"devices": {"requests": [{"name": "gpu", "exactly": {
        "deviceClassName": dra_devices.DRIVER, "allocationMode": "ExactCount", "count": 1}}]}}


def pod_spec(claim: dict[str, str]) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": NODE}, "resourceClaims": [{"name": "gpu", **claim}],
            "containers": [{"name": "main", "image": "registry.example/trainer:1",
                            "resources": {"claims": [{"name": "gpu"}]}}]}


def allocated_device(admin: Api, pod: dict[str, Any]) -> str | None:
    """The device name the scheduler allocated to the pod's claim, once it did."""
    statuses = pod.get("status", {}).get("resourceClaimStatuses") or []
    claim_name = next((s.get("resourceClaimName") for s in statuses if s.get("resourceClaimName")), None)
    if claim_name is None:
        spec_claims = pod["spec"].get("resourceClaims") or []
        claim_name = next((c.get("resourceClaimName") for c in spec_claims if c.get("resourceClaimName")), None)
    if claim_name is None:
        return None
    claim = admin.get(f"{GROUP}/namespaces/{pod['metadata']['namespace']}/resourceclaims/{claim_name}")
    results = (claim.get("status", {}).get("allocation") or {}).get("devices", {}).get("results") or []
    return str(results[0]["device"]) if results else None


def running(admin: Api, ns: str) -> dict[str, str]:
    """Running, not terminating pods of the workload -> their allocated device."""
    pods = admin.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Ddra-trainer")["items"]
    found = {}
    for pod in pods:
        if pod.get("status", {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp"):
            device = allocated_device(admin, pod)
            if device:
                found[pod["metadata"]["name"]] = device
    return found


def rules_of_node(admin: Api) -> list[dict[str, Any]]:
    return [r for r in admin.get(RULES)["items"]
            if (r["metadata"].get("annotations") or {}).get(dt.NODE_LABEL) == NODE]


def unschedulable(admin: Api, ns: str, name: str) -> bool:
    pod = admin.get(f"/api/v1/namespaces/{ns}/pods/{name}")
    return not pod["spec"].get("nodeName") and any(
        c["type"] == "PodScheduled" and c["status"] == "False" for c in pod.get("status", {}).get("conditions") or [])


@pytest.fixture
def dra_node(cluster: Cluster, admin: Api) -> Iterator[tuple[Api, Path, str]]:
    kwok_node(admin, NODE, gpus=0)
    admin.apply_create(f"{GROUP}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": dra_devices.DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{dra_devices.DRIVER}'"}}]}})
    admin.create(f"{GROUP}/resourceslices", resource_slice(
        f"{NODE}-gpus", dra_devices.DRIVER, NODE, [dra_devices.gpu_device(i, UUIDS[i]) for i in range(3)],
        node_name=NODE))
    ns = f"ml-dra-taint-{next(SERIAL)}"  # a deleted namespace terminates for a while: one per test
    ensure_namespace(admin, ns)
    try:
        yield admin, cluster.kubeconfig, ns
    finally:
        for rule in rules_of_node(admin):
            admin.delete(f"{RULES}/{rule['metadata']['name']}")
        admin.delete(f"/api/v1/namespaces/{ns}")
        admin.delete(f"{GROUP}/resourceslices/{NODE}-gpus")
        admin.delete(f"/api/v1/nodes/{NODE}")


def test_the_api_server_serves_device_taint_rules_where_the_remediator_looks(
        dra_node: tuple[Api, Path, str]) -> None:
    _, kubeconfig, _ = dra_node
    api = KubeApi(load_core_api(str(kubeconfig)))
    assert api.device_taint_rule_version(dt.VERSIONS) == "v1beta2"  # 1.36: not in v1, v1beta2 before v1alpha3


def test_one_gpu_is_quarantined_by_a_device_taint_rule_and_the_node_stays_in_service(
        dra_node: tuple[Api, Path, str], tmp_path: Path) -> None:
    admin, kubeconfig, ns = dra_node
    admin.create(f"{GROUP}/namespaces/{ns}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu"},
        "spec": {"spec": gpu_claim_spec()}})
    admin.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "dra-trainer"},
        "spec": {"replicas": 2, "selector": {"matchLabels": LABELS}, "template": {
            "metadata": {"labels": LABELS}, "spec": pod_spec({"resourceClaimTemplateName": "gpu"})}}})
    admin.create(f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "dra-trainer"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": LABELS}}})
    first = poll("both replicas run, each on an allocated GPU", lambda: (r := running(admin, ns)) and len(r) == 2 and r)
    poll("the PDB counts both replicas healthy", lambda: admin.get(
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/dra-trainer").get("status", {})
        .get("currentHealthy") == 2)
    victim, bad_device = sorted(first.items())[0]
    survivor = next(name for name in first if name != victim)
    bad_index = int(bad_device.removeprefix("gpu-"))
    [free_device] = {f"gpu-{i}" for i in range(3)} - set(first.values())

    clock = Clock()
    policy = {"mode": "enforce", "device_taints": True,
              "alerts": {"GpuXidFatal": {"actions": ["event", "taint", "annotate", "condition"],
                                         "taint_effect": "NoExecute", "untaint_after": "10m"}},
              "limits": {"cooldown": "0s", "max_tainted_percent": 100}, "drain": {"mode": "evict"},
              "validation": {"image": "registry.example/gpu-diag:1", "namespace": ns,
                             "command": ["dcgmi", "diag", "-r", "2"]}}
    remediator = make(policy, kubeconfig, tmp_path, clock)
    alert = xid(NODE, clock.now - timedelta(minutes=1), UUID=UUIDS[bad_index], gpu=str(bad_index), pod=victim,
                namespace=ns)
    notify(remediator, alert)

    # quarantined: one rule for exactly that device, NoSchedule while its pod drains; no node taint, no cordon
    remediator.run_once()
    [rule] = rules_of_node(admin)
    assert rule["spec"]["deviceSelector"] == {"driver": dra_devices.DRIVER, "pool": NODE, "device": bad_device}
    assert rule["spec"]["taint"]["key"] == dt.TAINT_KEY and rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert rule["metadata"]["annotations"][dt.UUID_ANNOTATION] == UUIDS[bad_index]
    node = admin.get(f"/api/v1/nodes/{NODE}")
    assert our_taint(node) is None and not node["spec"].get("unschedulable")
    assert node["metadata"]["annotations"][GPUS_ANNOTATION] == UUIDS[bad_index]
    [condition] = [c for c in node["status"]["conditions"] if c["type"] == "UnhealthyGPU"]
    assert condition["status"] == "True"

    # the drain respects the PDB: 429 first, the eviction once one disruption is allowed
    assert set(running(admin, ns)) == {victim, survivor}
    assert remediator.metrics.actions.labels("evict", "deferred")._value.get() == 1
    admin.request("PATCH", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/dra-trainer",
                  {"spec": {"minAvailable": 1}}, "application/merge-patch+json")
    poll("the PDB allows one disruption", lambda: admin.get(
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/dra-trainer")["status"].get(
        "disruptionsAllowed") == 1)

    def drained() -> bool:
        clock.advance(seconds=20)
        remediator.run_once()
        return bool(remediator.metrics.actions.labels("evict", "applied")._value.get() == 1)

    poll("the victim is evicted through the Eviction API", drained, deadline_s=60)
    poll("the victim is gone", lambda: victim not in running(admin, ns))
    assert running(admin, ns).get(survivor) == first[survivor]  # the healthy GPU's replica is untouched
    [rule] = rules_of_node(admin)
    assert rule["spec"]["taint"]["effect"] == "NoExecute"  # drained: the effect the policy asked for

    def eviction_status() -> dict[str, Any] | None:  # the controller-manager's device-taint-eviction controller
        current = admin.get(f"{RULES}/{rule['metadata']['name']}")
        return next((c for c in current.get("status", {}).get("conditions") or []
                     if c["type"] == "EvictionInProgress" and c.get("observedGeneration") == current["metadata"]
                     ["generation"]), None)

    condition = poll("the controller-manager reports on the NoExecute rule", eviction_status)
    assert condition["status"] == "False", condition  # nothing left for it to delete: the drain did it, PDB-paced

    # the replacement's new claim lands on the node's other healthy GPU, never the (now free) bad one
    after = poll("the ReplicaSet's replacement runs", lambda: (r := running(admin, ns)) and len(r) == 2 and r)
    replacement = next(name for name in after if name not in first)
    assert after[replacement] == free_device != bad_device
    admin.create(f"{GROUP}/namespaces/{ns}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "waiting"},
        "spec": gpu_claim_spec()})
    admin.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting"},
        "spec": pod_spec({"resourceClaimName": "waiting"})})
    poll("a third claim is unschedulable: the only free GPU is tainted", lambda: unschedulable(admin, ns, "waiting"))

    # resolved and held: a real validation Job on the node; once it succeeded the rule is removed, the node's
    # marks cleared, and the waiting claim gets the repaired GPU
    notify(remediator, xid(NODE, clock.now - timedelta(minutes=1), status="resolved", ends=clock.now,
                           UUID=UUIDS[bad_index], gpu=str(bad_index), pod=victim, namespace=ns))
    clock.advance(minutes=11)
    remediator.run_once()
    [job] = admin.get(f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    job_pod = poll("the validation pod runs on the node", lambda: next(
        (p for p in admin.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name={job['metadata']['name']}")
         ["items"] if p["spec"].get("nodeName") == NODE and p.get("status", {}).get("phase") == "Running"), None))
    clock.advance(seconds=10)
    remediator.run_once()
    assert len(rules_of_node(admin)) == 1  # validating: still out
    complete_job_pod(admin, ns, job, job_pod)  # the diagnostic passes
    clock.advance(seconds=10)
    remediator.run_once()
    assert rules_of_node(admin) == []
    node = admin.get(f"/api/v1/nodes/{NODE}")
    assert GPUS_ANNOTATION not in node["metadata"].get("annotations", {})
    pod = poll("the waiting pod is scheduled", lambda: (p := admin.get(
        f"/api/v1/namespaces/{ns}/pods/waiting"))["spec"].get("nodeName") and p)
    assert pod["spec"]["nodeName"] == NODE
    assert poll("its claim is allocated", lambda: allocated_device(admin, pod)) == bad_device


def test_a_rule_cleared_by_hand_is_not_put_back(dra_node: tuple[Api, Path, str], tmp_path: Path) -> None:
    admin, kubeconfig, _ = dra_node
    clock = Clock()
    policy = {"mode": "enforce", "device_taints": True, "limits": {"cooldown": "0s", "max_tainted_percent": 100}}
    remediator = make(policy, kubeconfig, tmp_path, clock)
    starts = clock.now - timedelta(minutes=1)
    notify(remediator, xid(NODE, starts, UUID=UUIDS[1], gpu="1"))
    remediator.run_once()
    [rule] = rules_of_node(admin)
    assert rule["spec"]["deviceSelector"]["device"] == "gpu-1" and rule["spec"]["taint"]["effect"] == "NoSchedule"

    # docs/remediation.md, "Clearing by hand", DRA nodes
    admin.delete(f"{RULES}/{rule['metadata']['name']}")
    admin.request("PATCH", f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {
        GPUS_ANNOTATION: None, STATE_ANNOTATION: None}}}, "application/merge-patch+json")
    for _ in range(3):  # Alertmanager's repeats of the same occurrence change nothing
        notify(remediator, xid(NODE, starts, UUID=UUIDS[1], gpu="1"))
        clock.advance(minutes=5)
        remediator.run_once()
    assert rules_of_node(admin) == []
