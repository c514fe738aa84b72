"""The fake API server speaks list/watch JSON over real HTTP, and the official client consumes it."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config, watch

from simulator.fakeapiserver import FakeApiServer

NODE = "node-a"


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(NODE, bookmark_interval_s=None).start()
    server.add_namespace("ml", {"team": "research"})
    server.add_pod("ml", "here", labels={"app": "x"}, containers=[("main", "containerd://" + "a" * 64)])
    server.add_pod("ml", "there", node_name="node-b")
    yield server
    server.stop()


def _get(api: FakeApiServer, path: str) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
    connection.request("GET", path)
    response = connection.getresponse()
    body = response.read()
    connection.close()
    return response.status, dict(response.getheaders()), body


class _Stream:
    """A raw watch stream: one JSON event per line in a chunked HTTP body."""

    def __init__(self, api: FakeApiServer, path: str) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=5)
        self.connection.request("GET", path)
        self.response = self.connection.getresponse()

    def event(self) -> dict[str, Any]:
        line = self.response.readline()
        assert line, "the stream ended"
        return json.loads(line)  # type: ignore[no-any-return]

    def ended(self) -> bool:
        return self.response.readline() == b""

    def close(self) -> None:
        self.connection.close()


def test_list_filters_by_node_and_carries_resource_versions(api: FakeApiServer) -> None:
    status, headers, body = _get(api, f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE}")
    assert status == 200 and headers["Content-Type"] == "application/json"
    pod_list = json.loads(body)
    assert pod_list["kind"] == "PodList"
    assert [item["metadata"]["name"] for item in pod_list["items"]] == ["here"]
    assert int(pod_list["metadata"]["resourceVersion"]) == api.resource_version
    item = pod_list["items"][0]
    assert item["status"]["containerStatuses"][0]["containerID"] == "containerd://" + "a" * 64
    assert int(item["metadata"]["resourceVersion"]) < api.resource_version
    everything = json.loads(_get(api, "/api/v1/pods")[2])
    assert len(everything["items"]) == 2


def test_watch_streams_changes_from_a_resource_version(api: FakeApiServer) -> None:
    since = api.resource_version
    stream = _Stream(
        api, f"/api/v1/pods?watch=true&resourceVersion={since}&fieldSelector=spec.nodeName%3D{NODE}"
    )
    try:
        assert stream.response.getheader("Transfer-Encoding") == "chunked"
        api.add_pod("ml", "new")
        api.add_pod("ml", "other-node", node_name="node-b")  # filtered out
        api.delete_pod("ml", "new")
        events = [stream.event() for _ in range(2)]
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
            ("ADDED", "new"),
            ("DELETED", "new"),
        ]
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert versions == sorted(versions) and versions[0] > since
    finally:
        stream.close()


def test_watch_without_version_starts_with_the_current_objects(api: FakeApiServer) -> None:
    stream = _Stream(api, "/api/v1/namespaces?watch=1")
    try:
        event = stream.event()
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "ml")
    finally:
        stream.close()


def test_bookmarks_and_timeout(api: FakeApiServer) -> None:
    since = api.resource_version
    stream = _Stream(
        api, f"/api/v1/pods?watch=true&resourceVersion={since}&allowWatchBookmarks=true&timeoutSeconds=1"
    )
    try:
        api.add_namespace("moves-the-version")
        api.send_bookmarks()
        bookmark = stream.event()
        assert bookmark["type"] == "BOOKMARK"
        assert bookmark["object"]["kind"] == "Pod"
        assert int(bookmark["object"]["metadata"]["resourceVersion"]) == api.resource_version > since
        assert stream.ended()  # timeoutSeconds ends the stream cleanly
    finally:
        stream.close()


def test_expired_versions_answer_410_both_ways(api: FakeApiServer) -> None:
    since = api.resource_version
    stream = _Stream(api, f"/api/v1/pods?watch=true&resourceVersion={since}")
    try:
        api.expire_history()
        error = stream.event()
        assert error["type"] == "ERROR"
        assert error["object"]["code"] == 410 and error["object"]["reason"] == "Expired"
        assert stream.ended()
    finally:
        stream.close()
    status, _, body = _get(api, f"/api/v1/pods?watch=true&resourceVersion={since}")
    assert status == 200 and json.loads(body.splitlines()[0])["object"]["code"] == 410
    api.expire_history(as_http=True)
    status, _, body = _get(api, f"/api/v1/pods?watch=true&resourceVersion={since}")
    assert status == 410 and json.loads(body)["reason"] == "Expired"


def test_outages_delay_and_malformed_bodies(api: FakeApiServer) -> None:
    api.set_outage("503")
    status, _, body = _get(api, "/api/v1/pods")
    assert status == 503 and json.loads(body)["code"] == 503
    api.set_outage("refuse")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", api.port), timeout=2).close()
    api.set_outage(None)
    assert _get(api, "/api/v1/pods")[0] == 200  # same port again
    api.malform_next_lists(1)
    with pytest.raises(json.JSONDecodeError):
        json.loads(_get(api, "/api/v1/pods")[2])
    assert json.loads(_get(api, "/api/v1/pods")[2])["kind"] == "PodList"
    api.set_delay(0.5)
    connection = http.client.HTTPConnection("127.0.0.1", api.port, timeout=0.1)
    connection.request("GET", "/api/v1/pods")
    with pytest.raises(TimeoutError):
        connection.getresponse()
    connection.close()
    api.set_delay(0.0)


def test_unknown_paths_and_selectors(api: FakeApiServer) -> None:
    assert _get(api, "/api/v1/services")[0] == 404
    assert _get(api, "/api/v1/pods?fieldSelector=status.phase%3DRunning")[0] == 400


def test_the_official_client_consumes_it(api: FakeApiServer, tmp_path: Path) -> None:
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(api.write_kubeconfig(tmp_path / "kubeconfig")), client_configuration=configuration
    )
    core = client.CoreV1Api(client.ApiClient(configuration))
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
    assert [pod.metadata.name for pod in pods.items] == ["here"]
    assert pods.items[0].status.container_statuses[0].container_id == "containerd://" + "a" * 64
    namespaces = core.list_namespace()
    assert namespaces.items[0].metadata.labels["team"] == "research"

    api.add_pod("ml", "watched")
    events = list(
        watch.Watch().stream(
            core.list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={NODE}",
            resource_version=pods.metadata.resource_version,
            timeout_seconds=1,
        )
    )
    assert [(event["type"], event["object"].metadata.name) for event in events] == [("ADDED", "watched")]
