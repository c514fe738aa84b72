"""The writing side of the fake API server behaves as kube-apiserver does where the remediator relies on it."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from simulator.fakepatch import JSON_PATCH, MERGE, STRATEGIC, apply_patch
from tests.remediate.fakenodeapi import FakeNodeApiServer


@pytest.fixture
def api() -> Iterator[FakeNodeApiServer]:
    with FakeNodeApiServer(token="t") as server:
        server.add_node("gpu-1")
        server.add_node("cpu-1", gpus=0, labels={"pool": "cpu"})
        server.add_pod("ml", "trainer-0", "gpu-1")
        server.add_pod("web", "frontend-0", "cpu-1", gpus=0)
        yield server


def call(api: FakeNodeApiServer, method: str, path: str, body: Any = None, content_type: str = STRATEGIC,
         token: str = "t") -> tuple[int, dict[str, Any]]:
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
    try:
        data = json.dumps(body).encode() if body is not None else None
        connection.request(method, path, body=data, headers={"Authorization": f"Bearer {token}",
                                                              "Content-Type": content_type})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_lists_and_selectors(api: FakeNodeApiServer) -> None:
    assert [n["metadata"]["name"] for n in call(api, "GET", "/api/v1/nodes")[1]["items"]] == ["gpu-1", "cpu-1"]
    assert [n["metadata"]["name"] for n in call(api, "GET", "/api/v1/nodes?labelSelector=pool%3Dcpu")[1]["items"]] \
        == ["cpu-1"]
    pods = call(api, "GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-1")[1]["items"]
    assert [p["metadata"]["name"] for p in pods] == ["trainer-0"]
    assert call(api, "GET", "/api/v1/nodes/nope")[0] == 404
    assert call(api, "GET", "/api/v1/nodes", token="wrong")[0] == 401


def test_a_patch_with_an_old_resource_version_conflicts(api: FakeNodeApiServer) -> None:
    version = api.node("gpu-1")["metadata"]["resourceVersion"]
    api.touch_node("gpu-1")
    status, answer = call(api, "PATCH", "/api/v1/nodes/gpu-1",
                          {"metadata": {"resourceVersion": version}, "spec": {"unschedulable": True}})
    assert (status, answer["reason"]) == (409, "Conflict")
    assert "unschedulable" not in api.node("gpu-1")["spec"]
    current = api.node("gpu-1")["metadata"]["resourceVersion"]
    status, answer = call(api, "PATCH", "/api/v1/nodes/gpu-1",
                          {"metadata": {"resourceVersion": current}, "spec": {"unschedulable": True}})
    assert status == 200 and answer["spec"]["unschedulable"] is True
    assert answer["metadata"]["resourceVersion"] != current


def test_the_status_subresource_and_the_main_resource_keep_to_their_parts(api: FakeNodeApiServer) -> None:
    condition = {"type": "UnhealthyGPU", "status": "True", "reason": "GpuXidFatal"}
    call(api, "PATCH", "/api/v1/nodes/gpu-1/status", {"status": {"conditions": [condition]}, "spec": {"x": 1}})
    node = api.node("gpu-1")
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready", "UnhealthyGPU"]  # merged by type
    assert "x" not in node["spec"]
    call(api, "PATCH", "/api/v1/nodes/gpu-1", {"status": {"conditions": []}})
    assert len(api.node("gpu-1")["status"]["conditions"]) == 2


def test_invalid_taints_are_refused(api: FakeNodeApiServer) -> None:
    taint = {"key": "k", "value": "a,b", "effect": "NoSchedule"}
    assert call(api, "PATCH", "/api/v1/nodes/gpu-1", {"spec": {"taints": [taint]}})[0] == 422
    twice = [{"key": "k", "value": "1", "effect": "NoSchedule"}] * 2
    assert call(api, "PATCH", "/api/v1/nodes/gpu-1", {"spec": {"taints": twice}})[0] == 422


def test_events_are_created_once_per_name(api: FakeNodeApiServer) -> None:
    event = {"metadata": {"name": "gpu-1.abc", "namespace": "default"}, "reason": "R", "message": "m",
             "involvedObject": {"kind": "Node", "name": "gpu-1"}}
    assert call(api, "POST", "/api/v1/namespaces/default/events", event)[0] == 201
    assert call(api, "POST", "/api/v1/namespaces/default/events", event)[1]["reason"] == "AlreadyExists"
    pod_event = {**event, "metadata": {"name": "p.1"}, "involvedObject": {"kind": "Pod", "name": "trainer-0",
                                                                          "namespace": "ml"}}
    assert call(api, "POST", "/api/v1/namespaces/default/events", pod_event)[0] == 422  # wrong namespace
    assert call(api, "POST", "/api/v1/namespaces/ml/events", {"metadata": {"name": "x"}})[0] == 422
    assert [r.status for r in api.writes("POST")] == [201, 409, 422, 422]


def test_injected_failures_answer_first(api: FakeNodeApiServer) -> None:
    api.fail_next(2, 503)
    assert [call(api, "GET", "/api/v1/nodes")[0] for _ in range(3)] == [503, 503, 200]


def test_the_three_patch_types() -> None:
    node = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"taints": [{"key": "x"}]}}
    assert apply_patch(node, MERGE, {"metadata": {"labels": {"a": None}}})["metadata"]["labels"] == {"b": "2"}
    assert apply_patch(node, STRATEGIC, {"spec": {"taints": []}})["spec"]["taints"] == []
    patched = apply_patch(node, JSON_PATCH, [{"op": "test", "path": "/metadata/labels/a", "value": "1"},
                                             {"op": "add", "path": "/spec/taints/-", "value": {"key": "y"}}])
    assert patched["spec"]["taints"] == [{"key": "x"}, {"key": "y"}]
    with pytest.raises(ValueError, match="test failed"):
        apply_patch(node, JSON_PATCH, [{"op": "test", "path": "/metadata/labels/a", "value": "2"}])
    with pytest.raises(ValueError, match="unsupported"):
        apply_patch(node, "application/apply-patch+yaml", {})


def test_an_eviction_is_refused_while_a_disruption_budget_blocks_it_then_deletes_the_pod(
        api: FakeNodeApiServer) -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "trainer-0", "namespace": "ml"}}
    path = "/api/v1/namespaces/ml/pods/trainer-0/eviction"
    api.block_evictions("ml", "trainer-0", 1)
    status, answer = call(api, "POST", path, eviction, "application/json")
    assert (status, answer["reason"]) == (429, "TooManyRequests") and "disruption budget" in answer["message"]
    assert call(api, "POST", path, {**eviction, "kind": "Pod"}, "application/json")[0] == 400
    assert call(api, "POST", path, eviction, "application/json")[0] == 201
    assert ("ml", "trainer-0") not in api.pods
    assert call(api, "POST", path, eviction, "application/json")[0] == 404


def test_named_api_groups_create_once_and_read_back(api: FakeNodeApiServer) -> None:
    path = "/apis/batch/v1/namespaces/ops/jobs"
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "validate-1"}, "spec": {}}
    status, created = call(api, "POST", path, job, "application/json")
    assert status == 201 and created["metadata"]["namespace"] == "ops" and created["metadata"]["uid"]
    assert call(api, "POST", path, job, "application/json")[0] == 409
    api.set_object_status("jobs", "validate-1", {"succeeded": 1})
    assert call(api, "GET", f"{path}/validate-1")[1]["status"] == {"succeeded": 1}
    assert call(api, "GET", f"{path}/other")[0] == 404
    cluster_scoped = "/apis/remediation.gpu-pod-exporter.io/v1alpha1/gpurepairrequests"
    assert call(api, "POST", cluster_scoped, {"metadata": {"name": "r"}}, "application/json")[0] == 201
    assert [o["metadata"]["name"] for o in api.objects_of("gpurepairrequests")] == ["r"]
    assert call(api, "POST", cluster_scoped, {"metadata": {}}, "application/json")[0] == 422
