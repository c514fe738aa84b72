"""The write path's retry policy (the one client's ``call_with_retries``): transient failures retried with
jittered backoff, the rest raised at once; and the requests each call sends."""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from exporter.backoff import BackoffPolicy
from exporter.kube.apiserver import HttpLists, build_core_v1_api, build_lists, status_error
from exporter.remediate.kubeapi import ApiConflictError, ApiError, KubeApi, classify
from tests.remediate.fakenodeapi import FakeNodeApiServer


class Response:
    """An unread answer, as the client's ``request`` returns it."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.released = False

    def read(self) -> bytes:
        return self.data

    def release_conn(self) -> None:
        self.released = True


class ScriptedCore:
    """Answers every ``request`` from a script of exceptions and bodies, recording what was sent."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.calls = 0
        self.sent: list[tuple[str, str, list[tuple[str, str]], Any, str | None, Any]] = []

    def request(self, method: str, path: str, query: Any = (), *, body: Any = None, content_type: str | None = None,
                timeout: Any = None) -> Response:
        self.calls += 1
        self.sent.append((method, path, list(query), body, content_type, timeout))
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return Response(step)


def api_exception(status: int, message: str = "") -> ApiError:
    """What the client raises for a non-2xx answer: the ``Status`` body holds the message."""
    return status_error(status, "Reason", json.dumps({"message": message}).encode() if message else b"")


def kube(core: ScriptedCore, attempts: int = 4) -> KubeApi:
    return KubeApi(core, BackoffPolicy(initial_s=0.001, max_s=0.002), attempts=attempts,
                   random_fraction=random.Random(1).random)


def test_transient_failures_are_retried_until_an_answer() -> None:
    core = ScriptedCore(api_exception(503), api_exception(429), ConnectionResetError("reset"), b'{"kind": "Node"}')
    assert kube(core).get_node("n") == {"kind": "Node"}
    assert core.calls == 4


def test_retries_stop_after_the_attempts_with_the_last_reason() -> None:
    core = ScriptedCore(*(api_exception(503, "etcd is slow") for _ in range(3)))
    with pytest.raises(ApiError, match=r"read node: giving up after 3 attempts: etcd is slow") as caught:
        kube(core, attempts=3).get_node("n")
    assert caught.value.status == 503 and core.calls == 3


@pytest.mark.parametrize(("status", "kind"), [(409, ApiConflictError), (403, ApiError), (404, ApiError),
                                              (422, ApiError)])
def test_other_answers_are_raised_at_once(status: int, kind: type[ApiError]) -> None:
    core = ScriptedCore(api_exception(status, "nodes is forbidden"))
    with pytest.raises(kind) as caught:
        kube(core).get_node("n")
    assert caught.value.status == status and core.calls == 1
    assert "nodes is forbidden" in str(caught.value)


def test_a_stop_request_ends_the_waiting() -> None:
    stop = threading.Event()
    stop.set()
    core = ScriptedCore(api_exception(503), b"{}")
    with pytest.raises(ApiError, match="stopped while retrying"):
        KubeApi(core, BackoffPolicy(initial_s=10, max_s=10), stop=stop).get_node("n")


class RecordedWaits(threading.Event):
    """A stop event that is never set and records how long each retry would wait."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return False


def test_waits_follow_the_shared_backoff_windows_and_honour_retry_after() -> None:
    """One attempt per window (1, 2, 4, 8, 8 s: the shared policy's full jitter, here at its middle), and a
    429's Retry-After pushes the window behind it, as for every retrying client of the package."""
    throttled = status_error(429, "Too Many Requests", b"", retry_after=30.0)
    core = ScriptedCore(api_exception(503), api_exception(503), throttled, api_exception(503), b"{}")
    waits = RecordedWaits()
    now = [100.0]

    def clock() -> float:
        return now[0]

    api = KubeApi(core, BackoffPolicy(initial_s=1, max_s=8), waits, attempts=6, random_fraction=lambda: 0.5,
                  clock=clock)
    assert api.get_node("n") == {}
    # window 1 [100, 101), window 2 [101, 103), window 3 starts at the Retry-After: [130, 134), window 4 [134, 142)
    assert waits.waits == [0.5, 2.0, 32.0, 38.0]


def test_anything_unexpected_becomes_an_error_without_a_status() -> None:
    assert classify(ValueError("boom")).status == 0
    core = ScriptedCore(b"<html>")
    with pytest.raises(ApiError, match="not JSON"):
        kube(core).get_node("n")
    assert core.calls == 1


def test_each_call_is_one_request_of_the_client_with_the_field_manager_and_patch_type() -> None:
    """The paths, query and content types the kubernetes package's generated methods sent before."""
    core = ScriptedCore(b"{}", b"{}", b'{"items": [{"a": 1}]}', b"{}", b"{}")
    api = kube(core)
    api.patch_node("gpu-1", {"spec": {"unschedulable": True}})
    api.apply_resource_quota({"metadata": {"name": "gpus", "namespace": "ml"}}, field_manager="quota", dry_run=True)
    assert api.list_pods_on_node("gpu-1") == [{"a": 1}]
    api.create_event("default", {"reason": "GpuUnhealthy"})
    api.evict_pod("ml", "trainer-0")
    assert [(method, path, query, content_type) for method, path, query, _, content_type, _ in core.sent] == [
        ("PATCH", "/api/v1/nodes/gpu-1", [("fieldManager", "gpu-pod-exporter-remediate")],
         "application/strategic-merge-patch+json"),
        ("PATCH", "/api/v1/namespaces/ml/resourcequotas/gpus",
         [("fieldManager", "quota"), ("force", "true"), ("dryRun", "All")], "application/apply-patch+yaml"),
        ("GET", "/api/v1/pods", [("fieldSelector", "spec.nodeName=gpu-1")], None),
        ("POST", "/api/v1/namespaces/default/events", [("fieldManager", "gpu-pod-exporter-remediate")], None),
        ("POST", "/api/v1/namespaces/ml/pods/trainer-0/eviction", [("fieldManager", "gpu-pod-exporter-remediate")],
         None),
    ]
    assert {timeout for *_, timeout in core.sent} == {(5.0, 30.0)}


def test_an_eviction_is_one_attempt() -> None:
    """A PodDisruptionBudget's 429 is paced by the drain, not retried by the client."""
    core = ScriptedCore(api_exception(429, "Cannot evict pod as it would violate the pod's disruption budget."))
    with pytest.raises(ApiError, match="disruption budget") as caught:
        kube(core).evict_pod("ml", "trainer-0")
    assert caught.value.status == 429 and core.calls == 1


@pytest.mark.parametrize("transport", ["urllib3", "kubernetes package"])
def test_writes_reach_the_api_server_through_either_transport(transport: str, tmp_path: Path) -> None:
    """A kubeconfig only the kubernetes package can use (an exec plugin) sends the same writes through its
    ApiClient; a conflict is ``ApiConflictError`` and a missing node a 404 with the server's message, either way."""
    with FakeNodeApiServer(token="secret") as server:
        server.add_node("gpu-1")
        kubeconfig = str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        core = build_lists(kubeconfig) if transport == "urllib3" else build_core_v1_api(kubeconfig)
        assert isinstance(core, HttpLists) == (transport == "urllib3")
        api = kube(core)
        api.patch_node("gpu-1", {"metadata": {"labels": {"example.com/cordoned-by": "test"}}})
        assert server.node("gpu-1")["metadata"]["labels"]["example.com/cordoned-by"] == "test"
        stale = api.get_node("gpu-1")["metadata"]["resourceVersion"]
        api.patch_node("gpu-1", {"metadata": {"labels": {"again": "1"}}})
        with pytest.raises(ApiConflictError):
            api.patch_node("gpu-1", {"metadata": {"resourceVersion": stale, "labels": {"late": "1"}}})
        with pytest.raises(ApiError) as missing:
            api.get_node("gpu-9")
        assert missing.value.status == 404 and "gpu-9" in str(missing.value)
        patch = next(request for request in server.requests if request.method == "PATCH")
        assert patch.content_type == "application/strategic-merge-patch+json"
