"""The exporter's watches (``exporter.kube.reflector``) against the REAL API server: bookmarks.

A node's pod watch (``fieldSelector=spec.nodeName=<node>``) sees few events of its own. Without
bookmarks it would resume every ended watch from the version of its last event, which the API
server's watch cache forgets after a few minutes of other pods' churn: 410 Gone, then a relist of
the node's pods on every node of the fleet. With ``allowWatchBookmarks=true`` the server sends
BOOKMARK events that carry its current resourceVersion, and the resumed watch starts from there.

How the real server paces them (k8s.io/apiserver ``pkg/storage/cacher``, v0.36.3): its dispatch
loop looks at the bookmark timers about once a second; a watcher is due a bookmark about once a
minute (``defaultBookmarkFrequency``) and, when it asked for ``timeoutSeconds``, 2 s before its
deadline; and a bookmark is sent only when the cache's version moved past the watch's own. So a
watch asked for 4 s gets its bookmark 2 s after it opened, once anything of its resource changed
anywhere. The test shrinks the exporter's watch timeout (``WatchTimeouts.watch_s``, a constructor
argument, no patching) and waits for the state it needs with a deadline; it never sleeps.

The exporter runs in this process (``KubernetesAttribution``: the pod and namespace watches of a
node, and the self-metrics it renders) with its own transport (``exporter.kube.apiserver``) and the
admin kubeconfig. A recording wrapper around that transport keeps each pods watch's query and the
lines its stream delivered: what went over the wire, seen from outside the reflector.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube.apiserver import build_lists
from exporter.kube.attribution import KubernetesAttribution
from exporter.kube.reflector import WatchTimeouts
from exporter.kube.series import attribution_families
from tests.platform.support import ensure_namespace, poll

# A node name no pod is bound to: every version this pods watch learns after its list comes from a
# bookmark, never from an event of its own.
NODE = "bookmark-watcher"
OTHER_NODE = "cpu-1"
NAMESPACE = "bookmarks"
SHORT = WatchTimeouts(watch_s=4, backoff_initial_s=0.2, backoff_max_s=1.0)


@dataclass
class WatchRecord:
    """One pods watch request: its query and the bytes its stream delivered."""

    query: dict[str, str]
    raw: bytearray = field(default_factory=bytearray)

    @property
    def resource_version(self) -> int:
        return int(self.query["resourceVersion"])

    def events(self) -> list[dict[str, Any]]:
        """The complete event lines received (a stream cut mid-line leaves a part that is no event)."""
        return [json.loads(line) for line in bytes(self.raw).split(b"\n")[:-1] if line.strip()]

    def bookmarks(self) -> list[int]:
        return [int(event["object"]["metadata"]["resourceVersion"]) for event in self.events()
                if event["type"] == "BOOKMARK"]


class _Recorded:
    """A streaming response whose chunks are copied into a ``WatchRecord`` as the reflector reads them."""

    def __init__(self, inner: Any, record: WatchRecord) -> None:
        self._inner = inner
        self._record = record

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[bytes]:
        for chunk in self._inner.stream(*args, **kwargs):
            self._record.raw.extend(chunk)
            yield chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class RecordingTransport:
    """The exporter's own transport, recording every pods watch (query and stream)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._watches: list[WatchRecord] = []

    @property
    def user_agent(self) -> str:
        return str(self._inner.user_agent)

    @user_agent.setter
    def user_agent(self, value: str) -> None:
        self._inner.user_agent = value

    def get(self, path: str, query: Sequence[tuple[str, str]], timeout: Any) -> Any:
        response = self._inner.get(path, query, timeout)
        parameters = dict(query)
        if path != "/api/v1/pods" or parameters.get("watch") != "true":
            return response
        record = WatchRecord(parameters)
        with self._lock:
            self._watches.append(record)
        return _Recorded(response, record)

    def watches(self) -> list[WatchRecord]:
        with self._lock:
            return list(self._watches)


def _resumed_past(transport: RecordingTransport, version: int) -> int | None:
    """The index of the first pods watch that resumed from ``version`` or later (None: not yet)."""
    for index, watch in enumerate(transport.watches()):
        if index and watch.resource_version >= version:
            return index
    return None


def test_watches_resume_from_the_real_servers_bookmarks_without_relisting(
        cluster: Cluster, admin: Api, tmp_path: Path) -> None:
    transport = RecordingTransport(build_lists(str(cluster.kubeconfig)))
    config = kubernetes_settings(Config(kubernetes=True, node_name=NODE, kubeconfig=str(cluster.kubeconfig),
                    pod_resources_socket=str(tmp_path / "no-kubelet.sock")))
    attribution = KubernetesAttribution(config, watch_timeouts=SHORT, api_factory=lambda: transport)
    attribution.start()
    try:
        poll("the pod and namespace watches held", lambda: attribution.metadata.state.up, deadline_s=60)
        # A pod on another node: its events never reach this node's watch (the field selector),
        # so only a bookmark can carry its resourceVersion here.
        ensure_namespace(admin, NAMESPACE)
        pod = admin.create(f"/api/v1/namespaces/{NAMESPACE}/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "elsewhere-"},
            "spec": {"nodeName": OTHER_NODE, "containers": [{"name": "main", "image": "registry.invalid/x:1"}]}})
        written = int(pod["metadata"]["resourceVersion"])
        resumed = poll(f"a pods watch resumed from resourceVersion {written} or later",
                       lambda: _resumed_past(transport, written), deadline_s=90)
        snapshot = attribution.snapshot((), ())
    finally:
        attribution.stop()
        admin.delete(f"/api/v1/namespaces/{NAMESPACE}")

    watches = transport.watches()[:resumed + 1]
    # what the exporter asked for: bookmarks, on this node's pods only
    assert all(w.query["allowWatchBookmarks"] == "true" and w.query["fieldSelector"] == f"spec.nodeName={NODE}"
               for w in watches)
    # nothing of this node reached the watch but bookmarks (no pod is bound to it)
    assert {event["type"] for w in watches for event in w.events()} == {"BOOKMARK"}
    # every watch resumed from the last bookmark of the one before it (or, with none, where that
    # one started): the bookmark's version, not a relist
    for previous, current in itertools.pairwise(watches):
        expected = (previous.bookmarks() or [previous.resource_version])[-1]
        assert current.resource_version == expected, (previous.query, previous.events(), current.query)
    past = watches[resumed - 1].bookmarks()
    assert past and past[-1] >= written, [w.bookmarks() for w in watches]

    # the exporter's own metrics say the same: one list of pods (the initial one), no relist, and
    # the bookmarks it received
    status = snapshot.status
    requests = dict(status.api_requests)
    assert [key for key in requests if key[:2] == ("pods", "list")] == [("pods", "list", "200")]
    assert requests[("pods", "list", "200")] == 1
    assert {key for key in requests if key[0] == "pods"} <= {("pods", "list", "200"), ("pods", "watch", "200")}
    assert dict(status.api_relists) == {("namespaces", "initial"): 1, ("pods", "initial"): 1}
    rendered = {tuple(sorted(sample.labels.items())): sample.value
                for family in attribution_families(snapshot, [], config.series)
                if family.name == "gpu_pod_exporter_kube_api_bookmarks" for sample in family.samples}
    assert rendered[(("resource", "pods"),)] >= sum(len(w.bookmarks()) for w in watches[:resumed])
