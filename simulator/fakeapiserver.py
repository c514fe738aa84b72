"""A fake Kubernetes API server: real HTTP, the list/watch JSON the official client consumes.

Serves ``GET /api/v1/pods`` (with ``fieldSelector=spec.nodeName=<node>``) and
``GET /api/v1/namespaces`` as lists and as watches, with what a client must cope with on a real
cluster:

* ``resourceVersion`` on every object and list, a bounded event history, and watches that
  resume from a resourceVersion; ``watch`` without one (or with "0") starts with synthetic
  ADDED events for the current objects, as the real server does;
* chunked watch streams (one JSON event per line), ``timeoutSeconds``, and BOOKMARK events when
  ``allowWatchBookmarks=true`` (every ``bookmark_interval_s`` and on demand);
* 410 Gone for a resourceVersion older than the history (``expire_history``), either as an
  ERROR event inside an HTTP 200 watch stream (what kube-apiserver does) or as an HTTP 410;
  ``set_gone_storm`` answers every resumed watch that way (an API server stuck in a 410 loop);
* lists as the watch cache serves them: ``resourceVersion=0`` (any state) and
  ``resourceVersion=X`` with ``resourceVersionMatch=NotOlderThan`` come from the cache, no
  ``resourceVersion`` is a consistent read (``list_reads`` counts both); a version the server has
  not reached (after ``restart(reset_resource_versions=True)``) gets what kube-apiserver sends:
  HTTP 504 "Too large resource version" with ``Retry-After: 1``, for lists and watches;
* injectable outages: connection refused (the port closes) or HTTP 503 / 500 for every request;
  throttling (HTTP 429 with ``Retry-After``, as API Priority and Fairness rejects); a restart (port
  closed for a while, every connection cut, optionally resourceVersions starting over); slowness
  (a delay before every answer); malformed JSON in a list body or a watch stream;
* optionally HTTPS (``ssl_context``, which may require client certificates) and a required bearer
  ``token`` (401 otherwise); every request's Authorization header is kept in ``authorizations``;
* every request is recorded (``log``: arrival time, verb, resource, query, User-Agent, status), so
  tests can count requests per client, per phase and per second.

ConfigMaps (``set_configmap``): ``GET /api/v1/namespaces/<ns>/configmaps/<name>``, what ``-m/--configmap-data``
reads, under the same token, RBAC (``access``: the chart grants ``get`` on configmaps only with ``-m``), outages
and throttling as every other request.

DRA: ``ResourceSlice`` objects (``add_resource_slice``) under
``/apis/resource.k8s.io/<version>/resourceslices`` for the versions in ``resource_versions``
(default v1 only; a 404 for the others, as a cluster without them answers), listed and watched like
pods (``fieldSelector=spec.nodeName=<node>``); under ``v1beta1`` a device's attributes sit in
``basic`` as that version has them.

Writes (simulator/fakewrites.py, mixed in): Nodes and their patches, Events, evictions of this server's
pods and objects of named API groups, for the remediator; ``fail_next`` answers the next requests of
any kind with a status, and ``calls`` keeps every request with its method, path, body and status.

Pods, namespaces and ResourceSlices change at runtime (``add_pod``, ``delete_pod``, ``add_namespace``,
``set_namespace_labels``, ``add_resource_slice``: what ``--simulate`` scenarios, the benchmarks and the
failure tests need), each change producing the watch event a real server would send. Our reading of
Kubernetes itself is judged by the real API server (tests/platform/), not by this fake. The
stdlib ``ThreadingHTTPServer`` is enough: one thread per connection, and watches block on a
condition variable until there is something to send.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import json
import socket
import ssl
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from simulator.fakeaccess import ACCESS_REVIEW_PATH, AccessRules
from simulator.fakewrites import NodeWrites, Request, label_selector_matches, stable_uid, status_object

RESOURCE_GROUP = "resource.k8s.io"
SLICE_VERSIONS = ("v1", "v1beta2", "v1beta1")
KINDS = {"pods": "Pod", "namespaces": "Namespace", "resourceslices": "ResourceSlice"}

JsonObject = dict[str, Any]

DEFAULT_HISTORY = 10_000
TOO_OLD = "too old resource version"
REQUEST_LOG_LIMIT = 200_000  # records kept (a long --simulate run must not grow without bound)
OUTAGES = {"refuse": 0, "503": 503, "500": 500}


@dataclass
class RequestRecord:
    """One request as the server saw it. ``status`` is 0 until answered (-1: the client went away)."""

    at: float  # time.monotonic() on arrival
    verb: str  # list | watch
    resource: str
    query: dict[str, str]
    user_agent: str
    status: int = 0
    answered_at: float = field(default=0.0)


@dataclass(frozen=True)
class _Event:
    resource_version: int
    resource: str  # "pods", "namespaces" or "resourceslices"
    type: str  # ADDED, MODIFIED, DELETED
    object: JsonObject


class _Watch:
    """One open watch stream, as seen by the mutators."""

    def __init__(self) -> None:
        self.pending_error: JsonObject | None = None
        self.pending_lines: list[bytes] = []
        self.bookmark_requested = False
        self.closed = False
        self.abort = False  # end without the terminating chunk (a dropped connection)


class FakeApiServer(NodeWrites):
    """See the module docstring. ``start()`` binds 127.0.0.1 on a free port unless told otherwise."""

    def __init__(
        self,
        node_name: str = "sim-node",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        bookmark_interval_s: float | None = 30.0,
        history: int = DEFAULT_HISTORY,
        token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.node_name = node_name
        self.host = host
        self.port = port
        self.bookmark_interval_s = bookmark_interval_s
        self._history_limit = history
        self._cond = threading.Condition()
        self._rv = 1
        self._oldest_rv = 1  # the oldest resourceVersion a watch can resume from; older ones get 410
        self._pods: dict[tuple[str, str], JsonObject] = {}
        self._namespaces: dict[str, JsonObject] = {}
        self._slices: dict[str, JsonObject] = {}
        self._configmaps: dict[tuple[str, str], JsonObject] = {}
        self.resource_versions: tuple[str, ...] = ("v1",)  # resource.k8s.io versions served (DRA)
        self._events: list[_Event] = []
        self._watches: set[_Watch] = set()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._outage: str | None = None
        self._delay_s = 0.0
        self._gone_as_http = False
        self._gone_storm = False
        self._throttle_retry_after: float | None = None
        self.too_large_retry_after_s = 1.0  # kube-apiserver's resourceVersionTooHighRetrySeconds
        self._restart_timer: threading.Timer | None = None
        self._malformed_lists = 0
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        # (verb, resource, query) of every request, and the fuller records of ``log``
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.log: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_LIMIT)
        self.list_reads: Counter[str] = Counter()  # "cache" | "consistent"
        self.token = token
        self.ssl_context = ssl_context
        self.authorizations: list[str] = []  # each request's Authorization header ("" when absent)
        self.access = AccessRules()  # RBAC of the simulated identity: 403s and SelfSubjectAccessReview answers
        self._failures: list[int] = []  # statuses the next requests get (fail_next)
        self._init_writes()

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        if self._server is not None:
            return self
        self._stopping.clear()
        server = _QuietServer((self.host, self.port), _handler_class(self))
        server.daemon_threads = True
        if self.ssl_context is not None:
            server.socket = self.ssl_context.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-apiserver", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._restart_timer is not None:
            self._restart_timer.cancel()
        self._close_listener()
        self._end_watches(abort=True)
        self._drop_connections()

    def _drop_connections(self) -> None:
        """Cut every open client connection, including idle keep-alive ones."""
        with self._cond:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def _close_listener(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path) -> Path:
        """A kubeconfig pointing at this server with its bearer token (a dummy one when none is required)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yaml.safe_dump({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "simulated", "cluster": {"server": self.url}}],
            "users": [{"name": "simulated", "user": {"token": self.token or "simulated-token"}}],
            "contexts": [{"name": "simulated", "context": {"cluster": "simulated", "user": "simulated"}}],
            "current-context": "simulated",
        }, sort_keys=False), encoding="utf-8")
        return target

    # -- failure injection ------------------------------------------------------------------

    def set_outage(self, mode: str | None) -> None:
        """``"refuse"``: close the port (connection refused); ``"503"``/``"500"``: answer that; None: heal.

        Every outage ends every open watch abruptly, as a crashed or restarting server would.
        """
        if mode is not None and mode not in OUTAGES:
            raise ValueError(f"unknown outage mode {mode!r}")
        self._outage = mode
        if mode is not None:
            self._end_watches(abort=True)
        if mode == "refuse":
            self._close_listener()
            self._drop_connections()
        elif self._server is None and not self._stopping.is_set():
            self.start()  # same port: the address is reusable

    def fail_next(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` requests (reads and writes alike) with ``status``."""
        with self._cond:
            self._failures.extend([status] * count)

    def set_delay(self, seconds: float) -> None:
        """Wait this long before answering any request (a slow or overloaded server)."""
        self._delay_s = seconds

    def set_throttle(self, retry_after_s: float | None) -> None:
        """Answer every new request 429 with ``Retry-After: retry_after_s`` (None: stop).

        What API Priority and Fairness does when a flow's queues are full; open watches go on.
        kube-apiserver sends whole seconds; a fraction is sent as given, for time-scaled tests.
        """
        self._throttle_retry_after = retry_after_s

    def set_gone_storm(self, on: bool) -> None:
        """Answer every watch that resumes from a resourceVersion with 410 Gone (and expire now).

        An API server stuck like this is the worst case for a fleet: each 410 invites a relist.
        """
        self._gone_storm = on
        if on:
            self.expire_history(as_http=self._gone_as_http)

    def restart(self, *, down_s: float = 0.0, reset_resource_versions: bool = False) -> None:
        """Go down as a crashed API server does (every connection cut, the port closed), and come
        back on the same port after ``down_s`` (in the background; 0: at once).

        ``reset_resource_versions``: the store comes back with versions starting over, as after an
        etcd restore. Objects keep their content and get new, lower versions; a client that resumes
        or relists from a version it held gets 504 "Too large resource version".
        """
        self.set_outage("refuse")
        if reset_resource_versions:
            with self._cond:
                self._rv = 1
                self._events.clear()
                for obj in [*self._namespaces.values(), *self._pods.values()]:
                    self._rv += 1
                    obj["metadata"]["resourceVersion"] = str(self._rv)
                self._oldest_rv = self._rv
        if down_s <= 0:
            self.set_outage(None)
            return
        timer = threading.Timer(down_s, self.set_outage, args=(None,))
        timer.daemon = True
        self._restart_timer = timer
        timer.start()

    def expire_history(self, *, as_http: bool = False) -> None:
        """Forget every resourceVersion up to now: resuming from one gets 410 Gone.

        Open watches receive an ERROR event with code 410 and end (``as_http`` False), or simply
        end so that the client's next watch request gets an HTTP 410 (``as_http`` True).
        """
        with self._cond:
            self._gone_as_http = as_http
            self._rv += 1
            self._oldest_rv = self._rv  # every version handed out so far is now too old
            self._events.clear()
            for watch in self._watches:
                if as_http:
                    watch.closed = True
                else:
                    watch.pending_error = status_object(410, "Expired", f"{TOO_OLD}: expired by the test")
            self._cond.notify_all()

    def malform_next_lists(self, count: int = 1) -> None:
        """The next ``count`` list answers carry a body that is not JSON."""
        with self._cond:
            self._malformed_lists = count

    def inject_malformed_watch_line(self) -> None:
        """Every open watch stream receives one line that is not JSON."""
        with self._cond:
            for watch in self._watches:
                watch.pending_lines.append(b'{"type": "MODIFIED", "object": {not json\n')
            self._cond.notify_all()

    def send_bookmarks(self) -> None:
        """Every open watch that asked for bookmarks gets one now."""
        with self._cond:
            for watch in self._watches:
                watch.bookmark_requested = True
            self._cond.notify_all()

    def end_watches(self) -> None:
        """End every open watch stream normally, as the server does when a watch's timeoutSeconds
        runs out: the client resumes with a new watch request (which ``set_delay`` then slows)."""
        self._end_watches(abort=False)

    def cut_watches(self) -> None:
        """Cut every open watch stream mid-way (no terminating chunk), as a dropped connection does."""
        self._end_watches(abort=True)

    def _end_watches(self, *, abort: bool) -> None:
        with self._cond:
            for watch in self._watches:
                watch.closed = True
                watch.abort = abort
            self._cond.notify_all()

    # -- objects ----------------------------------------------------------------------------

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> JsonObject:
        obj: JsonObject = {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": stable_uid("namespace", name),
                         "labels": {"kubernetes.io/metadata.name": name, **(labels or {})},
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"finalizers": ["kubernetes"]},
            "status": {"phase": "Active"},
        }
        with self._cond:
            event = "MODIFIED" if name in self._namespaces else "ADDED"
            self._namespaces[name] = obj
            self._record("namespaces", event, obj)
        return copy.deepcopy(obj)

    def set_namespace_labels(self, name: str, labels: Mapping[str, str]) -> None:
        with self._cond:
            obj = self._namespaces[name]
            obj["metadata"]["labels"] = {"kubernetes.io/metadata.name": name, **labels}
            self._record("namespaces", "MODIFIED", obj)

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        labels: Mapping[str, str] | None = None,
        containers: Sequence[tuple[str, str]] = (("main", ""),),
        init_containers: Sequence[tuple[str, str]] = (),
        node_name: str | None = None,
        phase: str = "Running",
        limits: Mapping[str, str] | None = None,
        owner_kind: str | None = None,
    ) -> JsonObject:
        """Create (or replace) a pod. ``containers``: ``(name, containerID)``, e.g.
        ``("trainer", "containerd://<64 hex>")``; an empty ID means "not started yet". ``limits``: each
        container's resource limits (``{"nvidia.com/gpu": "1"}``); ``owner_kind``: the kind of the pod's
        controller (ReplicaSet, Job, DaemonSet...), None for an unmanaged pod."""
        def statuses(items: Sequence[tuple[str, str]]) -> list[JsonObject]:
            return [{"name": cname, "ready": bool(cid), "restartCount": 0, "image": "registry.example/app:1",
                     "imageID": "", "started": bool(cid),
                     **({"containerID": cid} if cid else {}),
                     "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}} if cid else
                     {"waiting": {"reason": "ContainerCreating"}}}
                    for cname, cid in items]

        owners = [{"apiVersion": "batch/v1" if owner_kind == "Job" else "apps/v1", "kind": owner_kind,
                   "name": f"{name}-owner", "uid": stable_uid("owner", namespace, name), "controller": True}] \
            if owner_kind else []
        obj: JsonObject = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "uid": uid or stable_uid("pod", namespace, name),
                         "labels": dict(labels or {}), "creationTimestamp": "2024-01-01T00:00:00Z",
                         **({"ownerReferences": owners} if owners else {})},
            "spec": {"nodeName": node_name if node_name is not None else self.node_name,
                     "containers": [{"name": cname, "image": "registry.example/app:1",
                                     **({"resources": {"limits": dict(limits)}} if limits else {})}
                                    for cname, _ in containers],
                     **({"initContainers": [{"name": cname, "image": "registry.example/app:1",
                                             "restartPolicy": "Always"} for cname, _ in init_containers]}
                        if init_containers else {})},
            "status": {"phase": phase, "containerStatuses": statuses(containers),
                       **({"initContainerStatuses": statuses(init_containers)} if init_containers else {})},
        }
        with self._cond:
            event = "MODIFIED" if (namespace, name) in self._pods else "ADDED"
            self._pods[(namespace, name)] = obj
            self._record("pods", event, obj)
        return copy.deepcopy(obj)

    def delete_pod(self, namespace: str, name: str) -> None:
        with self._cond:
            obj = self._pods.pop((namespace, name), None)
            if obj is not None:
                self._record("pods", "DELETED", obj)

    def add_resource_slice(self, name: str, driver: str, pool: str,
                           devices: Sequence[tuple[str, Mapping[str, str | int]]], *,
                           node_name: str | None = None, generation: int = 1) -> JsonObject:
        """Create (or replace) a ResourceSlice (see ``resource_slice``) on this server's node by default."""
        obj = resource_slice(name, driver, pool, devices, node_name=node_name if node_name is not None
                             else self.node_name, generation=generation)
        with self._cond:
            event = "MODIFIED" if name in self._slices else "ADDED"
            self._slices[name] = obj
            self._record("resourceslices", event, obj)
        return copy.deepcopy(obj)

    def set_configmap(self, namespace: str, name: str, data: Mapping[str, str] | None) -> None:
        """Create or replace a ConfigMap with ``data``; None deletes it (a GET then answers 404)."""
        with self._cond:
            if data is None:
                self._configmaps.pop((namespace, name), None)
                return
            self._rv += 1
            self._configmaps[(namespace, name)] = {
                "kind": "ConfigMap", "apiVersion": "v1",
                "metadata": {"name": name, "namespace": namespace, "uid": stable_uid("configmap", namespace, name),
                             "resourceVersion": str(self._rv), "creationTimestamp": "2024-01-01T00:00:00Z"},
                "data": dict(data)}

    def configmap(self, namespace: str, name: str) -> JsonObject | None:
        with self._cond:
            found = self._configmaps.get((namespace, name))
            return copy.deepcopy(found) if found is not None else None

    @property
    def pods(self) -> dict[tuple[str, str], JsonObject]:
        """The pods by (namespace, name), live (read them, change them through add_pod and delete_pod)."""
        return self._pods

    def pod_names(self) -> list[tuple[str, str]]:
        with self._cond:
            return sorted(self._pods)

    @property
    def resource_version(self) -> int:
        return self._rv

    def open_watches(self) -> int:
        with self._cond:
            return len(self._watches)

    def request_count(self, verb: str, resource: str) -> int:
        return sum(1 for v, r, _ in list(self.requests) if v == verb and r == resource)

    def records(self, since: float = 0.0, until: float | None = None) -> list[RequestRecord]:
        """Requests that arrived in [since, until) (``time.monotonic()`` values)."""
        return [record for record in list(self.log)
                if record.at >= since and (until is None or record.at < until)]

    def _record(self, resource: str, event_type: str, obj: JsonObject) -> None:
        """Bump the resourceVersion, stamp the object, log the event and wake watchers."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        self._events.append(_Event(self._rv, resource, event_type, copy.deepcopy(obj)))
        if len(self._events) > self._history_limit:
            dropped = len(self._events) - self._history_limit
            self._oldest_rv = self._events[dropped].resource_version - 1
            del self._events[:dropped]
        self._cond.notify_all()

    # -- request handling (called from handler threads) ---------------------------------------

    def _objects(self, resource: str, selector: Mapping[str, str], api_version: str = "v1",
                 labels: str = "") -> list[JsonObject]:
        stores: dict[str, dict[Any, JsonObject]] = {"pods": self._pods, "namespaces": self._namespaces,
                                                    "resourceslices": self._slices}
        items = list(stores[resource].values())
        return [served(item, api_version) for item in items
                if _matches(item, selector) and label_selector_matches(item, labels)]

    def _pause(self) -> bool:
        """Apply the injected delay; False when the server stops meanwhile."""
        if self._delay_s:
            return not self._stopping.wait(self._delay_s)
        return True

    def handle_list(self, handler: BaseHTTPRequestHandler, resource: str,
                    selector: Mapping[str, str], query: Mapping[str, str], api_version: str = "v1") -> int:
        version = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        if match and (match != "NotOlderThan" or not version):
            message = f"resourceVersionMatch {match!r} with resourceVersion {version!r} is not supported"
            return _send(handler, 400, json.dumps(status_object(400, "BadRequest", message)).encode())
        with self._cond:
            if version not in ("", "0") and (not version.isdigit() or int(version) > self._rv):
                return _too_large(handler, version, self._rv, self.too_large_retry_after_s)
            self.list_reads["consistent" if version == "" else "cache"] += 1
            if self._malformed_lists > 0:
                self._malformed_lists -= 1
                return _send(handler, 200, b'{"kind": "PodList", "items": [ {broken')
            body = {
                "kind": KINDS[resource] + "List",
                "apiVersion": f"{RESOURCE_GROUP}/{api_version}" if resource == "resourceslices" else "v1",
                "metadata": {"resourceVersion": str(self._rv)},
                "items": self._objects(resource, selector, api_version, query.get("labelSelector", "")),
            }
        return _send(handler, 200, json.dumps(body).encode())

    def handle_watch(self, handler: BaseHTTPRequestHandler, resource: str, selector: Mapping[str, str],
                     query: Mapping[str, str], record: RequestRecord | None = None, *, api_version: str = "v1") -> int:
        since_text = query.get("resourceVersion", "")
        bookmarks = query.get("allowWatchBookmarks", "").lower() in ("true", "1")
        timeout_s = float(query["timeoutSeconds"]) if query.get("timeoutSeconds") else None
        kind = KINDS[resource]
        watch = _Watch()
        with self._cond:
            if since_text in ("", "0"):
                since = self._rv
                initial = [_event_line("ADDED", item) for item in self._objects(resource, selector, api_version)]
            else:
                since = int(since_text) if since_text.isdigit() else -1
                initial = []
                if since > self._rv:
                    return _too_large(handler, since_text, self._rv, self.too_large_retry_after_s)
                if since < self._oldest_rv or self._gone_storm:
                    if self._gone_as_http:
                        return _send(handler, 410, json.dumps(
                            status_object(410, "Expired", f"{TOO_OLD}: {since_text} ({self._oldest_rv})")).encode())
                    watch.pending_error = status_object(410, "Expired",
                                                  f"{TOO_OLD}: {since_text} ({self._oldest_rv})")
            self._watches.add(watch)
        try:
            _start_chunked(handler)
            if record is not None:
                record.status = 200  # the watch is established (its record is complete when it ends)
            for line in initial:
                _write_chunk(handler, line)
            self._stream(handler, watch, resource=resource, selector=selector, since=since,
                         bookmarks=bookmarks, timeout_s=timeout_s, kind=kind, api_version=api_version)
        except OSError:
            return -1  # the client went away
        finally:
            with self._cond:
                self._watches.discard(watch)
        return 200

    def _stream(self, handler: BaseHTTPRequestHandler, watch: _Watch, *, resource: str,
                selector: Mapping[str, str], since: int, bookmarks: bool, timeout_s: float | None,
                kind: str, api_version: str = "v1") -> None:
        """Serve ``watch`` until it closes. Each batch of lines is gathered under the lock and written
        outside it, so a slow client never holds up the mutators; the ending is written under it."""
        position = _StreamPosition(
            resource=resource, selector=selector, kind=kind, api_version=api_version, since=since,
            bookmarks=bookmarks,
            deadline=time.monotonic() + timeout_s if timeout_s else None,
            next_bookmark=(time.monotonic() + self.bookmark_interval_s
                           if bookmarks and self.bookmark_interval_s else None))
        while True:
            with self._cond:
                lines = self._next_lines(watch, position)
                if lines is None:
                    _end_watch(handler, watch)
                    return
            for line in lines:
                _write_chunk(handler, line)

    def _next_lines(self, watch: _Watch, position: _StreamPosition) -> list[bytes] | None:
        """The next lines ``watch`` owes its client, waiting on the condition until there are some; None
        once it is closed. In the order a real API server would: what the mutators queued (an error ends
        the stream), an expiry when the stream fell behind the history window, new events, the end of
        ``timeoutSeconds``, a bookmark. Called with ``self._cond`` held."""
        while True:
            if watch.closed:
                return None
            queued = _take_queued(watch)
            if queued:
                return queued
            if position.since < self._oldest_rv:  # this stream fell behind the history window
                watch.pending_error = status_object(410, "Expired",
                                                    f"{TOO_OLD}: {position.since} ({self._oldest_rv})")
                continue
            events = self._event_lines_after(position)
            if events is not None:
                if events:
                    return events
                continue
            now = time.monotonic()
            if position.deadline is not None and now >= position.deadline:
                watch.closed = True
                continue
            if self._bookmark_due(watch, position, now):
                return [self._bookmark_line(watch, position, now)]
            self._cond.wait(timeout=position.wait_s(now))

    def _event_lines_after(self, position: _StreamPosition) -> list[bytes] | None:
        """The lines of the events after ``position.since`` that its stream serves (its resource, matching
        its selector), moving the position past every newer event; None when there is none at all. An
        empty list means events of other resources or objects only: nothing to send, but the position moved."""
        start = bisect.bisect_right(self._events, position.since, key=lambda event: event.resource_version)
        if start == len(self._events):
            return None
        fresh = [event for event in self._events[start:] if event.resource == position.resource]
        position.since = self._events[-1].resource_version
        return [_event_line(event.type, served(event.object, position.api_version)) for event in fresh
                if _matches(event.object, position.selector)]

    def _bookmark_due(self, watch: _Watch, position: _StreamPosition, now: float) -> bool:
        """A stream that asked for bookmarks gets one when a test requests it or its interval has passed."""
        return position.bookmarks and (
            watch.bookmark_requested or bool(position.next_bookmark and now >= position.next_bookmark))

    def _bookmark_line(self, watch: _Watch, position: _StreamPosition, now: float) -> bytes:
        """A BOOKMARK at the current resource version, which the stream has then seen: the client may
        resume from it without missing anything."""
        watch.bookmark_requested = False
        if self.bookmark_interval_s:
            position.next_bookmark = now + self.bookmark_interval_s
        position.since = max(position.since, self._rv)
        return _event_line("BOOKMARK", {"kind": position.kind, "apiVersion": "v1",
                                        "metadata": {"resourceVersion": str(self._rv)}})


@dataclass
class _StreamPosition:
    """Where one watch stream stands: what it serves (resource, selector, kind, API version), the newest
    resource version it has passed, and when it ends (``timeoutSeconds``) or next owes a bookmark."""

    resource: str
    selector: Mapping[str, str]
    kind: str
    api_version: str
    since: int
    bookmarks: bool
    deadline: float | None
    next_bookmark: float | None

    def wait_s(self, now: float) -> float | None:
        """How long to wait for a mutator before the deadline or the next bookmark is due (None: until woken)."""
        waits = [t - now for t in (self.deadline, self.next_bookmark) if t is not None]
        return max(0.001, min(waits)) if waits else None


def _take_queued(watch: _Watch) -> list[bytes]:
    """What the mutators queued for ``watch``: a pending error first (it closes the stream, as a real
    API server ends a watch after an ERROR event), else its pending lines; empty when neither."""
    if watch.pending_error is not None:
        lines = [_event_line("ERROR", watch.pending_error)]
        watch.pending_error = None
        watch.closed = True
        return lines
    if not watch.pending_lines:
        return []
    lines, watch.pending_lines = watch.pending_lines, []
    return lines


def _end_watch(handler: BaseHTTPRequestHandler, watch: _Watch) -> None:
    """A closed watch ends with the terminating chunk, an aborted one without it (a dropped connection)."""
    if watch.abort:
        _drop(handler)
    else:
        _end_chunked(handler)


class _QuietServer(ThreadingHTTPServer):
    """Clients that hang up (a stopped exporter, a cut test) are routine here, not tracebacks.

    The listen backlog is a real server's, not socketserver's 5: a fleet reconnecting at once must
    not see SYNs dropped (and a one-second retransmit) because of the fake.
    """

    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def resource_slice(name: str, driver: str, pool: str, devices: Sequence[tuple[str, Mapping[str, str | int]]], *,
                   node_name: str, generation: int = 1) -> JsonObject:
    """A ``resource.k8s.io/v1`` ResourceSlice of ``driver``'s ``pool`` on ``node_name`` publishing
    ``devices``: ``(device name, {attribute: value})``, values typed as the API types them (text:
    string, int: int; ``driverVersion`` is a version)."""
    def typed(key: str, value: str | int) -> JsonObject:
        if isinstance(value, int):
            return {"int": value}
        return {"version": value} if key.endswith("Version") else {"string": value}

    return {
        "apiVersion": f"{RESOURCE_GROUP}/v1", "kind": "ResourceSlice",
        "metadata": {"name": name, "uid": stable_uid("resourceslice", name),
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"driver": driver, "nodeName": node_name,
                 "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
                 "devices": [{"name": device, "attributes": {key: typed(key, value)
                                                             for key, value in attributes.items()}}
                             for device, attributes in devices]},
    }


def served(obj: JsonObject, version: str) -> JsonObject:
    """A copy of ``obj`` as ``version`` serves it: ResourceSlices under v1beta1 keep a device's
    attributes in ``basic``; everything else is stored as served."""
    served = copy.deepcopy(obj)
    if version == "v1" or obj.get("kind") != "ResourceSlice":
        return served
    served["apiVersion"] = f"{RESOURCE_GROUP}/{version}"
    if version == "v1beta1":
        served["spec"]["devices"] = [{"name": device["name"], "basic": {"attributes": device.get("attributes", {})}}
                                     for device in served["spec"].get("devices", [])]
    return served


def _route(path: str, served_versions: Sequence[str]) -> tuple[str | None, str, str]:
    """``(resource, API group, version)`` of a request path; resource None when nothing is served there."""
    core = {"/api/v1/pods": "pods", "/api/v1/namespaces": "namespaces"}.get(path)
    if core is not None:
        return core, "", "v1"
    for version in served_versions:
        if path == f"/apis/{RESOURCE_GROUP}/{version}/resourceslices":
            return "resourceslices", RESOURCE_GROUP, version
    return None, "", ""


def _configmap_key(path: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of ``/api/v1/namespaces/<namespace>/configmaps/<name>``, else None."""
    parts = path.strip("/").split("/")
    if len(parts) == 6 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "configmaps":
        return parts[3], parts[5]
    return None


def _matches(obj: Mapping[str, Any], selector: Mapping[str, str]) -> bool:
    for key, wanted in selector.items():
        if key == "spec.nodeName":
            actual = obj.get("spec", {}).get("nodeName", "")
        elif key == "metadata.name":
            actual = obj["metadata"].get("name", "")
        elif key == "metadata.namespace":
            actual = obj["metadata"].get("namespace", "")
        else:
            return False
        if actual != wanted:
            return False
    return True


def _parse_field_selector(text: str) -> dict[str, str] | None:
    selector: dict[str, str] = {}
    for term in filter(None, text.split(",")):
        key, sep, value = term.partition("=")
        key = key.rstrip("=")
        value = value.lstrip("=")
        if not sep or key not in ("spec.nodeName", "metadata.name", "metadata.namespace"):
            return None
        selector[key] = value
    return selector


def _event_line(event_type: str, obj: JsonObject) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode() + b"\n"


def _answering(handler: BaseHTTPRequestHandler, code: int) -> None:
    """Tell the handler the status before the first byte goes out, so that the request is on record
    before a client that got the answer can look (``FakeApiServer.calls``)."""
    noted = getattr(handler, "answering", None)
    if noted is not None:
        noted(code)


def _send(handler: BaseHTTPRequestHandler, code: int, body: bytes, headers: Mapping[str, str] | None = None) -> int:
    _answering(handler, code)
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(body)
    return code


def _too_large(handler: BaseHTTPRequestHandler, asked: str, current: int, retry_after_s: float) -> int:
    """kube-apiserver's answer to a resourceVersion it has not reached (after waiting for it)."""
    status = status_object(504, "Timeout", f"Timeout: Too large resource version: {asked}, current: {current}")
    status["details"] = {"causes": [{"reason": "ResourceVersionTooLarge",
                                     "message": f"Too large resource version: {asked}, current: {current}"}],
                         "retryAfterSeconds": max(1, round(retry_after_s))}
    return _send(handler, 504, json.dumps(status).encode(), {"Retry-After": f"{retry_after_s:g}"})


def _start_chunked(handler: BaseHTTPRequestHandler) -> None:
    _answering(handler, 200)
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    handler.wfile.flush()


def _write_chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _drop(handler: BaseHTTPRequestHandler) -> None:
    """End a response mid-stream: close the connection without the terminating chunk."""
    handler.close_connection = True
    with contextlib.suppress(OSError):
        handler.connection.shutdown(socket.SHUT_RDWR)


def _end_chunked(handler: BaseHTTPRequestHandler) -> None:
    with contextlib.suppress(OSError):
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()


def _handler_class(api: FakeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        call: tuple[str, str, dict[str, str], str, Any] | None = None  # the request being answered
        noted = False

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``api.requests`` instead."""

        def begin_call(self, method: str, path: str, query: dict[str, str], content_type: str, body: Any) -> None:
            self.call, self.noted = (method, path, query, content_type, body), False

        def answering(self, code: int) -> None:
            """Record the request with its status, once, as its answer starts (see ``_answering``)."""
            if self.call is not None and not self.noted:
                self.noted = True
                api.record_call(Request(*self.call, code, time.time()))

        def end_call(self, status: int) -> None:
            """Record a request that got no answer (the client went away, the server stopped): ``status`` -1."""
            self.answering(status)
            self.call = None

        def setup(self) -> None:
            super().setup()
            with api._cond:
                api._connections.add(self.connection)

        def finish(self) -> None:
            with api._cond:
                api._connections.discard(self.connection)
            with contextlib.suppress(OSError):
                super().finish()

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
            resource, group, api_version = _route(parts.path, api.resource_versions)
            watching = query.get("watch", "").lower() in ("true", "1")
            verb = "watch" if watching else "list"
            configmap = _configmap_key(parts.path)
            if configmap is not None:
                resource, verb = "configmaps", "get"
            elif resource is None:  # nodes, namespaced pods, events, named API groups: the writers' reads
                self._write_side()
                return
            api.requests.append((verb, resource or parts.path, query))
            self.begin_call("GET", parts.path, query, "", None)
            record = RequestRecord(time.monotonic(), verb, resource or parts.path, query,
                                   self.headers.get("User-Agent", ""))
            api.log.append(record)
            try:
                if configmap is not None:
                    record.status = self._answer_configmap(*configmap)
                    return
                record.status = self._answer(resource, watching, query, record, group=group, api_version=api_version)
            except OSError:  # the client went away mid-answer: nothing to send, nothing to report
                record.status = -1
                self.close_connection = True
            finally:
                record.answered_at = time.monotonic()
                self.end_call(record.status)

        def _write_side(self) -> None:
            """A request the list/watch side does not serve: answered by ``NodeWrites.answer_write``."""
            parts = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
            content_type = self.headers.get("Content-Type", "")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            api.requests.append((self.command.lower(), parts.path, query))
            body: Any = None
            try:
                try:
                    body = json.loads(raw) if raw else None
                    self.begin_call(self.command, parts.path, query, content_type, body)
                except json.JSONDecodeError:
                    self.begin_call(self.command, parts.path, query, content_type, None)
                    status = _send(self, 400, json.dumps(status_object(400, "BadRequest", "body is not JSON")).encode())
                else:
                    refused = self._refused()
                    if refused is None:
                        with api._cond:
                            code, answer = api.answer_write(self.command, parts.path, query, content_type, body)
                        status = _send(self, code, json.dumps(answer).encode())
                    else:
                        status = refused
            except OSError:  # the client went away mid-answer
                status = -1
                self.close_connection = True
            self.end_call(status)

        do_PATCH = do_PUT = do_DELETE = _write_side

        def _refused(self) -> int | None:
            """The answer every request gets before its resource is looked at (a wrong token, a pause the
            server stopped in, throttling, an outage), or None when it may go on."""
            authorization = self.headers.get("Authorization", "")
            api.authorizations.append(authorization)
            if api.token is not None and authorization != f"Bearer {api.token}":
                return _send(self, 401, json.dumps(status_object(401, "Unauthorized", "Unauthorized")).encode())
            with api._cond:
                failure = api._failures.pop(0) if api._failures else 0
            if failure:
                return _send(self, failure, json.dumps(status_object(
                    failure, "ServiceUnavailable" if failure == 503 else "InternalError", "injected failure")).encode())
            if not api._pause():
                return -1
            retry_after = api._throttle_retry_after
            if retry_after is not None:
                return _send(self, 429, json.dumps(status_object(429, "TooManyRequests", "Too many requests, please "
                                                           "try again later.")).encode(),
                             {"Retry-After": f"{retry_after:g}"})
            outage = OUTAGES.get(api._outage or "", 0)
            if outage:
                return _send(self, outage, json.dumps(status_object(outage, "ServiceUnavailable" if outage == 503 else
                                                              "InternalError", "the server is currently unable to "
                                                              "handle the request")).encode())
            return None

        def _answer_configmap(self, namespace: str, name: str) -> int:
            refused = self._refused()
            if refused is not None:
                return refused
            if not api.access.allows("get", "configmaps"):
                return _send(self, 403, json.dumps(api.access.forbidden_status("get", "configmaps")).encode())
            found = api.configmap(namespace, name)
            if found is None:
                missing = status_object(404, "NotFound", f'configmaps "{name}" not found')
                return _send(self, 404, json.dumps(missing).encode())
            return _send(self, 200, json.dumps(found).encode())

        def _answer(self, resource: str | None, watching: bool, query: dict[str, str], record: RequestRecord, *,
                    group: str = "", api_version: str = "v1") -> int:
            refused = self._refused()
            if refused is not None:
                return refused
            if resource is None:
                return _send(self, 404, json.dumps(status_object(404, "NotFound", "the server could not find the "
                                                           "requested resource")).encode())
            verb = "watch" if watching else "list"
            if not api.access.allows(verb, resource, group):
                return _send(self, 403, json.dumps(api.access.forbidden_status(verb, resource, group)).encode())
            selector = _parse_field_selector(query.get("fieldSelector", ""))
            if selector is None:
                return _send(self, 400, json.dumps(status_object(400, "BadRequest", "unsupported field selector "
                                                           f"{query.get('fieldSelector')!r}")).encode())
            if watching:
                return api.handle_watch(self, resource, selector, query, record, api_version=api_version)
            return api.handle_list(self, resource, selector, query, api_version)

        def do_POST(self) -> None:
            """A SelfSubjectAccessReview (``api.access`` answers it); any other create is a write."""
            if urlsplit(self.path).path != ACCESS_REVIEW_PATH:
                self._write_side()
                return
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            api.requests.append(("create", urlsplit(self.path).path, {}))
            self.begin_call("POST", ACCESS_REVIEW_PATH, {}, self.headers.get("Content-Type", ""), None)
            if api.token is not None and self.headers.get("Authorization", "") != f"Bearer {api.token}":
                code = _send(self, 401, json.dumps(status_object(401, "Unauthorized", "Unauthorized")).encode())
            else:
                code, answer = api.access.review(body)
                _send(self, code, json.dumps(answer).encode())
            self.end_call(code)

    return Handler

