"""Pod and namespace metadata: how list+watch copes with what a real API server does only on a bad day.

The fake API server (``simulator.fakeapiserver``) stays here because each test injects what
the real one cannot produce on demand: an HTTP 410 to a watch request (kube-apiserver sends its 410s
inside the watch stream; proxies and aggregated APIs answer with the status), refused connections,
503s, a slow server, malformed bodies, cut streams, throttling. Our reading of Kubernetes itself
(field selectors, one list and then only the watch, label patches, bookmarks, the real 410 after a
compaction) runs against the real control plane: tests/platform/test_metadata.py,
test_reflector.py and test_attribution.py (docs/testing.md lists where each test went).
"""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.kube.apiserver import ApiError, build_core_v1_api
from exporter.kube.metadata import KubernetesMetadata, WatchTimeouts, pod_from_json, strip_container_id
from simulator.fakeapiserver import FakeApiServer

from .helpers import poll

NODE = "node-a"
CID = "containerd://" + "ab" * 32
FAST = WatchTimeouts(
    connect_s=1.0,
    list_read_s=1.0,
    watch_s=2,
    watch_read_slack_s=1.0,
    backoff_initial_s=0.02,
    backoff_max_s=0.1,
    stale_after_s=60.0,
)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer(NODE, bookmark_interval_s=0.05).start()
    server.add_namespace("ml", {"team": "research"})
    server.add_namespace("web", {})
    server.add_pod(
        "ml",
        "trainer-0",
        labels={"app": "trainer", "team": "vision"},
        containers=[("trainer", CID)],
        init_containers=[("log-shipper", "cri-o://" + "cd" * 32)],
    )
    server.add_pod("ml", "elsewhere", node_name="node-b")
    yield server
    server.stop()


def _metadata(
    api: FakeApiServer, tmp_path: Path, changes: list[int] | None = None, timeouts: WatchTimeouts = FAST
) -> KubernetesMetadata:
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    sink = changes if changes is not None else []
    return KubernetesMetadata(NODE, lambda: sink.append(1), kubeconfig=str(kubeconfig), timeouts=timeouts)


@pytest.fixture
def metadata(api: FakeApiServer, tmp_path: Path) -> Iterator[KubernetesMetadata]:
    watcher = _metadata(api, tmp_path)
    watcher.start()
    poll(lambda: watcher.synced and watcher.state.up, what="initial sync")
    yield watcher
    watcher.stop()


def _pods(metadata: KubernetesMetadata) -> list[tuple[str, str]]:
    return sorted(metadata.view().pods_by_name)


def test_410_as_http_status_relists(api: FakeApiServer, metadata: KubernetesMetadata) -> None:
    api.expire_history(as_http=True)
    api.delete_pod("ml", "trainer-0")
    poll(lambda: api.request_count("list", "pods") == 2, what="a relist")
    poll(lambda: _pods(metadata) == [], what="the deletion seen through the relist")
    poll(lambda: metadata.state.up, what="both watches held again")


@pytest.mark.parametrize("mode", ["refuse", "503"])
def test_outage_keeps_last_known_metadata_and_recovers(
    api: FakeApiServer, metadata: KubernetesMetadata, mode: str
) -> None:
    api.set_outage(mode)
    expected = "unreachable" if mode == "refuse" else "answered 503"
    poll(lambda: expected in metadata.state.error, what="the outage to be noticed")
    assert not metadata.state.up
    assert _pods(metadata) == [("ml", "trainer-0")]  # labels keep flowing from the last known state
    last_success = metadata.state.last_success_wall
    api.add_pod("ml", "during-outage")  # the server's state moves on meanwhile
    api.set_outage(None)
    poll(lambda: metadata.state.up, what="recovery")
    poll(lambda: ("ml", "during-outage") in metadata.view().pods_by_name, what="catching up")
    assert metadata.state.last_success_wall > last_success


def test_after_an_outage_a_routine_cut_or_a_stop_is_no_failure(
    api: FakeApiServer, metadata: KubernetesMetadata, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpu_pod_exporter.kube.api")
    api.set_outage("refuse")
    poll(lambda: metadata.state.error_kind == "unreachable", what="the outage to be noticed")
    api.set_outage(None)
    poll(lambda: metadata.state.up, what="recovery")
    api.send_bookmarks()
    poll(lambda: all(r.status.settled and r.status.episode is None for r in metadata.reflectors),
         what="the resumed streams to deliver")
    # the recovery's own line is logged after the state turns up: wait for it, so it is not read as the cut's
    poll(lambda: any("up again" in r.getMessage() for r in caplog.records), what="the recovery to be logged")
    watches = [r.watches for r in metadata.reflectors]
    episodes: list[object] = []
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gpu_pod_exporter.kube.api"):
        api._end_watches(abort=True)  # every stream is cut mid-way, as an idle-timeout on a load balancer does
        while not all(r.watches > before for r, before in zip(metadata.reflectors, watches, strict=True)):
            episodes += [r.status.episode for r in metadata.reflectors if r.status.episode is not None]
            poll(lambda: True)
        metadata.stop()  # cuts the streams from our side
    assert episodes == []  # neither cut was a failure episode
    assert [r.getMessage() for r in caplog.records] == []  # and none was logged


def test_slow_server_times_out_then_recovers(api: FakeApiServer, tmp_path: Path) -> None:
    api.set_delay(3.0)
    watcher = _metadata(
        api,
        tmp_path,
        timeouts=WatchTimeouts(
            connect_s=0.5,
            list_read_s=0.3,
            watch_s=2,
            watch_read_slack_s=0.5,
            backoff_initial_s=0.02,
            backoff_max_s=0.1,
        ),
    )
    watcher.start()
    try:
        poll(lambda: watcher.state.error_kind == "timeout", what="a timeout")
        assert "timed out" in watcher.state.error and not watcher.state.up
        api.set_delay(0.0)
        poll(lambda: watcher.state.up and watcher.synced, what="recovery")
        assert _pods(watcher) == [("ml", "trainer-0")]
    finally:
        api.set_delay(0.0)
        watcher.stop()


def test_malformed_list_is_an_error_then_recovers(api: FakeApiServer, tmp_path: Path) -> None:
    api.malform_next_lists(2)
    watcher = _metadata(api, tmp_path)
    watcher.start()
    try:
        poll(lambda: watcher.synced and watcher.state.up, what="recovery after malformed lists")
        assert _pods(watcher) == [("ml", "trainer-0")]
        assert api.request_count("list", "pods") + api.request_count("list", "namespaces") == 4
    finally:
        watcher.stop()


def test_malformed_watch_event_forces_a_relist(api: FakeApiServer, metadata: KubernetesMetadata) -> None:
    lists = api.request_count("list", "pods")
    api.inject_malformed_watch_line()
    poll(lambda: api.request_count("list", "pods") > lists, what="a relist")
    poll(lambda: metadata.state.up, what="recovery")
    assert _pods(metadata) == [("ml", "trainer-0")]


def test_updates_that_change_nothing_kept_do_not_notify(api: FakeApiServer, tmp_path: Path) -> None:
    # Each notification records whether the API was up when it came: the group's own "up" notification
    # comes just after its state turns up (from whichever watch thread was last to be held), so the
    # baseline is taken once that one has arrived, not merely once the state reads up.
    up_at_notification: list[bool] = []
    kubeconfig = str(api.write_kubeconfig(tmp_path / "kubeconfig"))
    watcher = KubernetesMetadata(NODE, lambda: up_at_notification.append(watcher.state.up),
                                 kubeconfig=kubeconfig, timeouts=FAST)
    changes = up_at_notification
    watcher.start()
    try:
        poll(lambda: watcher.synced and watcher.state.up and True in up_at_notification,
             what="initial sync and its 'up' notification")
        version, notified = watcher.cache.version, len(changes)
        for _ in range(3):  # a status-only update: same labels, same containers
            api.add_pod(
                "ml",
                "trainer-0",
                labels={"app": "trainer", "team": "vision"},
                containers=[("trainer", CID)],
                init_containers=[("log-shipper", "cri-o://" + "cd" * 32)],
            )
        api.add_pod("ml", "marker")
        poll(lambda: ("ml", "marker") in watcher.view().pods_by_name, what="the marker pod")
        assert watcher.cache.version == version + 1
        assert len(changes) == notified + 1
    finally:
        watcher.stop()


def _reachable_objects(root: object) -> int:
    """Objects reachable from ``root`` (what it keeps alive), not counting types and modules."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        current = stack.pop()
        if id(current) in seen or isinstance(current, type | types.ModuleType | threading.Thread):
            continue
        seen.add(id(current))
        stack.extend(gc.get_referents(current))
    return len(seen)


def test_pod_churn_returns_memory_to_baseline(api: FakeApiServer, tmp_path: Path) -> None:
    watcher = _metadata(api, tmp_path)
    try:
        watcher.start()
        poll(lambda: watcher.synced and watcher.state.up, what="initial sync")
        api.delete_pod("ml", "trainer-0")
        poll(lambda: watcher.cache.pod_count() == 0, what="an empty cache")
        watcher.view()
        baseline_tracked = watcher.cache.tracked_objects()
        baseline = _reachable_objects(watcher.cache)

        for index in range(1000):
            api.add_pod(
                "churn",
                f"pod-{index}",
                labels={"app": "batch", "index": str(index)},
                containers=[("main", f"containerd://{index:064x}")],
            )
        poll(lambda: watcher.cache.pod_count() == 1000, timeout_s=60, what="1,000 pods")
        assert watcher.cache.tracked_objects() == baseline_tracked + 3000  # by name, by UID, by container ID
        assert len(watcher.view().pods_by_name) == 1000
        peak = _reachable_objects(watcher.cache)
        for index in range(1000):
            api.delete_pod("churn", f"pod-{index}")
        poll(lambda: watcher.cache.pod_count() == 0, timeout_s=60, what="every pod deleted")

        assert watcher.cache.tracked_objects() == baseline_tracked
        assert watcher.view().pods_by_name == {}
        assert peak - baseline > 10_000  # the measure is sensitive: 1,000 pods are many objects
        assert _reachable_objects(watcher.cache) == baseline
    finally:
        watcher.stop()


def test_metadata_is_dropped_after_a_long_outage(api: FakeApiServer, tmp_path: Path) -> None:
    changes: list[int] = []
    watcher = _metadata(
        api,
        tmp_path,
        changes,
        timeouts=WatchTimeouts(
            connect_s=0.5,
            list_read_s=0.5,
            watch_s=2,
            watch_read_slack_s=0.5,
            backoff_initial_s=0.02,
            backoff_max_s=0.05,
            stale_after_s=0.3,
        ),
    )
    watcher.start()
    try:
        poll(lambda: watcher.synced and watcher.state.up, what="initial sync")
        api.set_outage("refuse")
        poll(lambda: not watcher.state.up, what="the outage")
        poll(lambda: watcher.cache.pod_count() == 0, what="stale metadata to be dropped")
        assert watcher.view().namespaces == {}
    finally:
        watcher.stop()


def test_metadata_is_dropped_once_per_outage_even_if_one_resource_recovers(
        api: FakeApiServer, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Namespaces forbidden (RBAC taken away) for longer than the stale limit: the metadata is dropped
    once; the pods, still allowed, are relisted and stay, while namespaces keep failing."""
    watcher = _metadata(api, tmp_path, timeouts=WatchTimeouts(
        connect_s=0.5, list_read_s=0.5, watch_s=2, watch_read_slack_s=0.5, backoff_initial_s=0.02,
        backoff_max_s=0.05, stale_after_s=0.3))
    watcher.start()
    try:
        poll(lambda: watcher.synced and watcher.state.up, what="initial sync")
        api.access.forbid("namespaces")
        api.cut_watches()
        poll(lambda: dict(watcher.counters.relists()).get(("pods", "stale"), 0) == 1, what="the stale relist")
        poll(lambda: _pods(watcher) == [("ml", "trainer-0")], what="the pods relisted")
        poll(lambda: watcher.reflectors[1].status.retries >= 20, what="namespaces failing on")
        assert _pods(watcher) == [("ml", "trainer-0")] and watcher.view().namespaces == {}
        assert watcher.state.error_kind == "http-403"
        dropped = [r for r in caplog.records if "dropping what was mirrored" in r.getMessage()]
        assert len(dropped) == 1
    finally:
        watcher.stop()


def test_missing_configuration_is_a_visible_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    changes: list[int] = []
    watcher = KubernetesMetadata(NODE, lambda: changes.append(1))  # no kubeconfig, not in a cluster
    watcher.start()
    assert not watcher.state.up
    assert watcher.state.error.startswith("Kubernetes API not configured")
    assert changes == [1]
    missing = KubernetesMetadata(NODE, kubeconfig=str(tmp_path / "absent"))
    missing.start()
    assert missing.state.error_kind == "not-configured"


def test_pod_json_parsing() -> None:
    pod = pod_from_json(
        {
            "metadata": {"name": "p", "namespace": "n", "uid": "u", "labels": {"b": "2", "a": "1"}},
            "status": {
                "phase": "Running",
                "containerStatuses": [{"name": "c", "containerID": "docker://0123"}, {"name": "waiting"}],
            },
        }
    )
    assert pod.labels == (("a", "1"), ("b", "2"))
    assert pod.containers == (("0123", "c"),)
    assert pod.phase == "Running"
    with pytest.raises(ValueError, match=r"metadata\.name"):
        pod_from_json({"metadata": {"namespace": "n"}})
    assert strip_container_id("cri-o://abc") == "abc"
    assert strip_container_id("abc") == "abc"


def test_the_lists_do_not_load_the_generated_core_v1_api(api: FakeApiServer, tmp_path: Path) -> None:
    """The generated CoreV1Api module costs ~22 MiB of RSS (pydantic validators of ~250 models);
    the watch needs two GET endpoints only, sent through the same ApiClient without it. Releases of the
    kubernetes package before the new generator (37.0; the floor is older, .ci/floors.txt) have no
    ApiClient.param_serialize, and their light CoreV1Api is the fallback."""
    from kubernetes.client import ApiClient  # noqa: PLC0415 - the package is heavy; only this test needs it

    new_generator = hasattr(ApiClient, "param_serialize")
    kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
    script = (
        "import sys\n"
        "from exporter.kube.apiserver import build_core_v1_api\n"
        f"lists = build_core_v1_api({str(kubeconfig)!r})\n"
        "response = lists.list_pod_for_all_namespaces(field_selector='spec.nodeName=node-a', _preload_content=False)\n"
        "import json\n"
        "print(sorted(item['metadata']['name'] for item in json.loads(response.data)['items']))\n"
        "print('kubernetes.client.api.core_v1_api' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[2], timeout=60)
    assert result.stdout.splitlines() == ["['trainer-0']", str(not new_generator)]


def test_a_refused_list_raises_with_the_http_status(api: FakeApiServer, tmp_path: Path) -> None:
    lists = build_core_v1_api(str(api.write_kubeconfig(tmp_path / "kubeconfig")))
    api.expire_history(as_http=True)
    with pytest.raises(ApiError) as raised:
        lists.list_namespace(watch=True, resource_version="1", _preload_content=False, _request_timeout=(1, 2))
    assert raised.value.status == 410
    api.set_throttle(7)
    with pytest.raises(ApiError) as throttled:  # the package path reports Retry-After as the urllib3 one
        lists.list_namespace(_request_timeout=(1, 2))
    assert (throttled.value.status, throttled.value.retry_after) == (429, 7.0)
