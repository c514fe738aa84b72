"""Pod and namespace metadata from the Kubernetes API: one watch each, never a call per scrape.

PodResources names pods but carries no UID, labels or container IDs; those come from here.
dcgm-exporter first fetched them with a ``GET pod`` per pod per scrape (its 4.8.1), then with
an informer that, without ``NODE_NAME``, watched every pod in the cluster (its #626). This
module keeps exactly two streams open:

* pods on this node: ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``;
* namespaces (their labels feed the ``team`` label).

Each runs the list-then-watch protocol on its own thread: list (remember the list's
``resourceVersion``), watch from it with ``allowWatchBookmarks`` (bookmarks move the
resourceVersion forward without objects, so a resumed watch rarely lands on an expired
version), resume from the last seen resourceVersion when a watch ends, and relist from scratch
on 410 Gone, whether the server says it as an HTTP 410 or as an ERROR event inside the stream.
Malformed JSON also forces a relist: after a garbled event the cache can no longer be trusted.
Other errors (connection refused, 5xx, timeouts) back off exponentially with jitter (0.5 s
doubling to 30 s) and leave the cache as it was: labels keep flowing from the last known
state. Every request has a connect and read timeout, so a hung server shows up as an error
instead of a silent stall.

Only what attribution needs is kept (``PodMetadata``: namespace, name, UID, labels, container
IDs, phase; ``NamespaceMetadata``: name, labels); a DELETED event or a relist that no longer
contains a pod removes it from every index, so memory follows the pods on the node. Raw JSON
is parsed directly from the unread response: model classes would cost far more memory and CPU
for objects of which we read six fields. The requests go out through ``exporter.kube.apiserver``
(urllib3; the official client only for kubeconfigs with credential plugins).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from exporter.kube.apiserver import CoreV1ListMethods, build_lists, split_request_arguments
from exporter.logs import get_logger
from exporter.supervisor import supervised

LOG = get_logger("kube.api")  # under the exporter's handler and format

CONTAINER_ID_SCHEMES = ("containerd://", "cri-o://", "docker://", "cri-containerd://")


@dataclass(frozen=True)
class PodMetadata:
    """What attribution needs from one pod. ``labels`` and ``containers`` are sorted tuples so
    that equal pods compare equal (an update that changes nothing we keep is no change)."""

    namespace: str
    name: str
    uid: str
    labels: tuple[tuple[str, str], ...] = ()
    containers: tuple[tuple[str, str], ...] = ()  # (container ID without scheme, container name)
    phase: str = ""

    @property
    def label_map(self) -> Mapping[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class NamespaceMetadata:
    name: str
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def label_map(self) -> Mapping[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class MetadataView:
    """An immutable snapshot of the cache, built lazily once per change."""

    version: int = 0
    pods_by_name: Mapping[tuple[str, str], PodMetadata] = field(default_factory=lambda: MappingProxyType({}))
    pods_by_uid: Mapping[str, PodMetadata] = field(default_factory=lambda: MappingProxyType({}))
    containers_by_id: Mapping[str, tuple[PodMetadata, str]] = field(
        default_factory=lambda: MappingProxyType({}))
    namespaces: Mapping[str, NamespaceMetadata] = field(default_factory=lambda: MappingProxyType({}))

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        found = self.namespaces.get(namespace)
        return found.label_map if found is not None else None


@dataclass(frozen=True)
class ApiState:
    """Health of the API side, for self-metrics and /health. Same shape as the kubelet's."""

    up: bool = False
    error: str = "not started"
    error_kind: str = "not-started"
    last_success_wall: float = 0.0
    last_success_monotonic: float | None = None
    down_since_monotonic: float | None = None

    @property
    def condition(self) -> tuple[bool, str]:
        return self.up, self.error_kind


def strip_container_id(raw: str) -> str:
    """``containerd://abc`` -> ``abc`` (the form found in cgroup paths)."""
    for scheme in CONTAINER_ID_SCHEMES:
        if raw.startswith(scheme):
            return raw[len(scheme):]
    _, sep, rest = raw.partition("://")
    return rest if sep else raw


def _labels(metadata: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    labels = metadata.get("labels") or {}
    if not isinstance(labels, dict):
        raise TypeError("metadata.labels is not an object")
    return tuple(sorted((str(key), str(value)) for key, value in labels.items()))


def pod_from_json(obj: Mapping[str, Any]) -> PodMetadata:
    """Keep the fields we need from a Pod object; raises ValueError on a malformed one."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name") or not metadata.get("namespace"):
        raise ValueError("pod without metadata.name / metadata.namespace")
    status = obj.get("status") or {}
    containers: set[tuple[str, str]] = set()
    for key in ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"):
        for item in status.get(key) or ():
            container_id = item.get("containerID") or ""
            if container_id and item.get("name"):
                containers.add((strip_container_id(str(container_id)), str(item["name"])))
    return PodMetadata(namespace=str(metadata["namespace"]), name=str(metadata["name"]),
                       uid=str(metadata.get("uid") or ""), labels=_labels(metadata),
                       containers=tuple(sorted(containers)), phase=str(status.get("phase") or ""))


def namespace_from_json(obj: Mapping[str, Any]) -> NamespaceMetadata:
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict) or not metadata.get("name"):
        raise ValueError("namespace without metadata.name")
    return NamespaceMetadata(name=str(metadata["name"]), labels=_labels(metadata))


class MetadataCache:
    """Pods and namespaces by key, with indexes; thread-safe; versioned on real changes only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], PodMetadata] = {}
        self._pods_by_uid: dict[str, PodMetadata] = {}
        self._containers: dict[str, tuple[PodMetadata, str]] = {}
        self._namespaces: dict[str, NamespaceMetadata] = {}
        self._version = 0
        self._view = MetadataView()

    @property
    def version(self) -> int:
        return self._version

    def tracked_objects(self) -> int:
        """Entries across every index: what a leak would make grow."""
        with self._lock:
            return len(self._pods) + len(self._pods_by_uid) + len(self._containers) + len(self._namespaces)

    def pod_count(self) -> int:
        return len(self._pods)

    def _index_pod(self, pod: PodMetadata) -> None:
        self._pods[(pod.namespace, pod.name)] = pod
        if pod.uid:
            self._pods_by_uid[pod.uid] = pod
        for container_id, name in pod.containers:
            self._containers[container_id] = (pod, name)

    def _unindex_pod(self, pod: PodMetadata) -> None:
        self._pods.pop((pod.namespace, pod.name), None)
        if self._pods_by_uid.get(pod.uid) is pod:
            del self._pods_by_uid[pod.uid]
        for container_id, _ in pod.containers:
            if self._containers.get(container_id, (None, ""))[0] is pod:
                del self._containers[container_id]

    def upsert_pod(self, pod: PodMetadata) -> bool:
        with self._lock:
            old = self._pods.get((pod.namespace, pod.name))
            if old == pod:
                return False
            if old is not None:
                self._unindex_pod(old)
            self._index_pod(pod)
            self._version += 1
            return True

    def delete_pod(self, namespace: str, name: str) -> bool:
        with self._lock:
            old = self._pods.get((namespace, name))
            if old is None:
                return False
            self._unindex_pod(old)
            self._version += 1
            return True

    def replace_pods(self, pods: list[PodMetadata]) -> bool:
        with self._lock:
            wanted = {(pod.namespace, pod.name): pod for pod in pods}
            if wanted == self._pods:
                return False
            self._pods, self._pods_by_uid, self._containers = {}, {}, {}
            for pod in wanted.values():
                self._index_pod(pod)
            self._version += 1
            return True

    def upsert_namespace(self, namespace: NamespaceMetadata) -> bool:
        with self._lock:
            if self._namespaces.get(namespace.name) == namespace:
                return False
            self._namespaces[namespace.name] = namespace
            self._version += 1
            return True

    def delete_namespace(self, name: str) -> bool:
        with self._lock:
            if self._namespaces.pop(name, None) is None:
                return False
            self._version += 1
            return True

    def replace_namespaces(self, namespaces: list[NamespaceMetadata]) -> bool:
        with self._lock:
            wanted = {namespace.name: namespace for namespace in namespaces}
            if wanted == self._namespaces:
                return False
            self._namespaces = wanted
            self._version += 1
            return True

    def clear(self) -> bool:
        """Forget everything (metadata too old to trust)."""
        with self._lock:
            if not self._pods and not self._namespaces:
                return False
            self._pods, self._pods_by_uid, self._containers, self._namespaces = {}, {}, {}, {}
            self._version += 1
            return True

    def view(self) -> MetadataView:
        """The current content as an immutable value (rebuilt only after a change)."""
        with self._lock:
            if self._view.version != self._version:
                self._view = MetadataView(
                    version=self._version,
                    pods_by_name=MappingProxyType(dict(self._pods)),
                    pods_by_uid=MappingProxyType(dict(self._pods_by_uid)),
                    containers_by_id=MappingProxyType(dict(self._containers)),
                    namespaces=MappingProxyType(dict(self._namespaces)),
                )
            return self._view


@dataclass(frozen=True)
class WatchTimeouts:
    """Timeouts and backoff of the API streams (seconds). Tests shrink them."""

    connect_s: float = 5.0
    list_read_s: float = 30.0
    watch_s: int = 300  # server-side timeoutSeconds of one watch request
    watch_read_slack_s: float = 30.0  # read timeout = watch_s + slack: a silent hung stream errors out
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    stale_after_s: float = 300.0  # API unreachable this long: forget metadata


class _Gone(Exception):  # noqa: N818 - named after the HTTP status it stands for
    """The resourceVersion is too old: relist."""


class _Malformed(Exception):  # noqa: N818
    """The server sent something that is not the JSON we expect: relist after a pause."""


class _StreamBroken(Exception):  # noqa: N818
    """An established watch stream was cut (API server restart, load-balancer idle timeout).

    Routine on real clusters: resumed at once, and only reported if resuming fails as well.
    """


Lister = Callable[..., Any]  # a kubernetes CoreV1Api list_* method


class _ListWatch:
    """List, then watch, one resource type forever; applies everything to the cache."""

    def __init__(self, *, resource: str, lister: Lister, kwargs: Mapping[str, Any],
                 apply_list: Callable[[list[Mapping[str, Any]]], bool],
                 apply_event: Callable[[str, Mapping[str, Any]], bool],
                 owner: KubernetesMetadata, timeouts: WatchTimeouts) -> None:
        self.resource = resource
        self._lister = lister
        self._kwargs = dict(kwargs)
        self._apply_list = apply_list
        self._apply_event = apply_event
        self._owner = owner
        self._timeouts = timeouts
        self._stop = threading.Event()
        self._relist = threading.Event()
        self._response: Any = None
        self._delivered = False  # the current watch stream delivered at least one event
        self._thread = supervised(self._run, name=f"kube-watch-{resource}", stop=self._stop)
        self.synced = False  # at least one list succeeded
        self.lists = 0
        self.watches = 0

    def start(self) -> None:
        self._thread.start()

    def request_relist(self) -> None:
        """Start over with a list at the next attempt (the cache was cleared behind our back)."""
        self._relist.set()

    def stop(self) -> None:
        self._stop.set()
        response = self._response
        if response is not None:
            _abort_response(response)

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        resource_version: str | None = None
        failures = 0
        broken = 0
        while not self._stop.is_set():
            if self._relist.is_set():
                self._relist.clear()
                resource_version = None
            try:
                if resource_version is None:
                    resource_version = self._list()
                resource_version = self._watch(resource_version)
                failures = broken = 0
            except _Gone:
                LOG.info("%s watch: resourceVersion expired (410 Gone); relisting", self.resource)
                resource_version = None
            except _StreamBroken as exc:
                if self._stop.is_set():
                    return  # stop() cut the stream
                if self._delivered:  # the stream was healthy before the cut: a routine cut, not a failure
                    failures = broken = 0
                broken += 1
                if broken == 1:
                    LOG.debug("%s watch stream cut (%s); resuming", self.resource, exc)
                    continue
                failures += 1
                self._owner.report_failure(self.resource, exc.__cause__ or exc)
                self._backoff(failures)
            except Exception as exc:  # noqa: BLE001 - any failure of the stream is reported and retried
                if self._stop.is_set():
                    return
                if isinstance(exc, _Malformed):
                    resource_version = None
                failures += 1
                self._owner.report_failure(self.resource, exc)
                self._backoff(failures)

    def _backoff(self, failures: int) -> None:
        delay = min(self._timeouts.backoff_max_s, self._timeouts.backoff_initial_s * 2 ** (failures - 1))
        self._stop.wait(delay * (0.5 + 0.5 * random.random()))  # noqa: S311 - jitter, not security

    def _list(self) -> str:
        response = self._lister(**self._kwargs, _preload_content=False,
                                _request_timeout=(self._timeouts.connect_s, self._timeouts.list_read_s))
        self._response = response
        try:
            body = json.loads(response.data)
        except ValueError as exc:
            raise _Malformed(f"{self.resource} list answer is not JSON: {exc}") from None
        finally:
            self._response = None
            response.release_conn()
        if not isinstance(body, dict) or not isinstance(body.get("items"), list):
            raise _Malformed(f"{self.resource} list answer has no items")
        resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        try:
            self._apply_list(body["items"])
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise _Malformed(f"{self.resource} list holds a malformed object: {exc}") from None
        self.lists += 1
        self.synced = True
        self._owner.report_success(self.resource)
        return resource_version

    def _watch(self, resource_version: str) -> str:
        """Stream events until the server ends the watch; returns the resourceVersion to resume."""
        self.watches += 1
        self._delivered = False
        try:
            response = self._lister(
                **self._kwargs, watch=True, allow_watch_bookmarks=True, resource_version=resource_version,
                timeout_seconds=self._timeouts.watch_s, _preload_content=False,
                _request_timeout=(self._timeouts.connect_s,
                                  self._timeouts.watch_s + self._timeouts.watch_read_slack_s))
        except Exception as exc:
            if getattr(exc, "status", None) == 410:
                raise _Gone from None
            raise
        self._response = response
        try:
            self._owner.report_success(self.resource)
            lines = _lines(response)
            while not self._stop.is_set():
                try:
                    line = next(lines)
                except StopIteration:
                    break
                except (_Gone, _Malformed):
                    raise
                except Exception as exc:
                    raise _StreamBroken(f"{type(exc).__name__}: {exc}") from exc
                resource_version = self._handle(line, resource_version)
                self._delivered = True
        finally:
            self._response = None
            _abort_response(response)
        return resource_version

    def _handle(self, line: bytes, resource_version: str) -> str:
        try:
            event = json.loads(line)
            event_type = event["type"]
            obj = event["object"]
        except (ValueError, TypeError, KeyError) as exc:
            raise _Malformed(f"{self.resource} watch sent a malformed event: {exc}") from None
        if event_type == "ERROR":
            code = obj.get("code") if isinstance(obj, dict) else None
            if code == 410:
                raise _Gone
            message = obj.get("message", "") if isinstance(obj, dict) else str(obj)
            raise RuntimeError(f"{self.resource} watch error {code}: {message}")
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        new_version = str((metadata or {}).get("resourceVersion") or resource_version)
        if event_type == "BOOKMARK":
            self._owner.report_success(self.resource)
            return new_version
        try:
            self._apply_event(event_type, obj)
        except (ValueError, TypeError, AttributeError, KeyError) as exc:
            raise _Malformed(f"{self.resource} watch sent a malformed object: {exc}") from None
        self._owner.report_success(self.resource)
        return new_version


def _lines(response: Any) -> Iterator[bytes]:
    """Newline-delimited events from a streaming urllib3 response."""
    buffer = b""
    for chunk in response.stream(amt=None, decode_content=False):
        buffer += chunk
        while True:
            newline = buffer.find(b"\n")
            if newline < 0:
                break
            line, buffer = buffer[:newline], buffer[newline + 1:]
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _abort_response(response: Any) -> None:
    """Close a (possibly blocked) streaming response from any thread."""
    shutdown = getattr(response, "shutdown", None)
    try:
        if callable(shutdown):
            shutdown()
        response.close()
        response.release_conn()
    except Exception:  # noqa: BLE001, S110 - best effort while tearing a stream down
        pass


class KubernetesMetadata:
    """The two watches and the cache they fill; see the module docstring.

    ``on_change`` is called (from the watch threads) when the cached content or the up/error
    condition changed. ``api_factory`` returns an object with CoreV1Api's ``list_pod_for_all_namespaces``
    and ``list_namespace`` (a ``kubernetes.client.CoreV1Api`` will do); by default
    ``exporter.kube.apiserver.build_lists``: urllib3 with the settings of ``kubeconfig`` or, when that is
    empty, of the in-cluster service account.
    """

    def __init__(
        self,
        node_name: str,
        on_change: Callable[[], None] = lambda: None,
        *,
        kubeconfig: str = "",
        allow_exec: bool = False,
        timeouts: WatchTimeouts | None = None,
        api_factory: Callable[[], Any] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.node_name = node_name
        self.cache = MetadataCache()
        self._on_change = on_change
        self._kubeconfig = kubeconfig
        self._timeouts = timeouts or WatchTimeouts()
        self._api_factory = api_factory or (lambda: build_lists(kubeconfig, allow_exec=allow_exec))
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._state = ApiState()
        self._state_lock = threading.Lock()
        self._loops: list[_ListWatch] = []
        self._errors: dict[str, str] = {}

    @property
    def state(self) -> ApiState:
        return self._state

    @property
    def synced(self) -> bool:
        return bool(self._loops) and all(loop.synced for loop in self._loops)

    def view(self) -> MetadataView:
        return self.cache.view()

    def start(self) -> None:
        if self._loops:
            return
        try:
            api = self._api_factory()
        except Exception as exc:  # noqa: BLE001 - configuration problems become a visible state
            self._state = ApiState(up=False, error=f"Kubernetes API not configured: {exc}",
                                   error_kind="not-configured")
            LOG.warning("%s; pod UIDs, pod labels, teams and process attribution are unavailable",
                        self._state.error)
            self._on_change()
            return
        pod_selector = {"field_selector": f"spec.nodeName={self.node_name}"} if self.node_name else {}
        self._loops = [
            _ListWatch(resource="pods", lister=api.list_pod_for_all_namespaces, kwargs=pod_selector,
                       apply_list=self._apply_pod_list, apply_event=self._apply_pod_event,
                       owner=self, timeouts=self._timeouts),
            _ListWatch(resource="namespaces", lister=api.list_namespace, kwargs={},
                       apply_list=self._apply_namespace_list, apply_event=self._apply_namespace_event,
                       owner=self, timeouts=self._timeouts),
        ]
        for loop in self._loops:
            loop.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        for loop in self._loops:
            loop.stop()
        for loop in self._loops:
            loop.join(timeout_s)
        self._loops = []

    # -- cache updates ----------------------------------------------------------------------

    def _changed(self, changed: bool) -> bool:
        if changed:
            self._on_change()
        return changed

    def _apply_pod_list(self, items: list[Mapping[str, Any]]) -> bool:
        return self._changed(self.cache.replace_pods([pod_from_json(item) for item in items]))

    def _apply_pod_event(self, event_type: str, obj: Mapping[str, Any]) -> bool:
        pod = pod_from_json(obj)
        if event_type == "DELETED":
            return self._changed(self.cache.delete_pod(pod.namespace, pod.name))
        return self._changed(self.cache.upsert_pod(pod))

    def _apply_namespace_list(self, items: list[Mapping[str, Any]]) -> bool:
        return self._changed(self.cache.replace_namespaces([namespace_from_json(item) for item in items]))

    def _apply_namespace_event(self, event_type: str, obj: Mapping[str, Any]) -> bool:
        namespace = namespace_from_json(obj)
        if event_type == "DELETED":
            return self._changed(self.cache.delete_namespace(namespace.name))
        return self._changed(self.cache.upsert_namespace(namespace))

    # -- state --------------------------------------------------------------------------------

    def report_success(self, resource: str) -> None:
        with self._state_lock:
            self._errors.pop(resource, None)
            previous = self._state
            if self._errors:
                return
            state = ApiState(up=True, error="", error_kind="", last_success_wall=self._wall_clock(),
                             last_success_monotonic=self._monotonic())
            self._state = state
        if previous.condition != state.condition:
            LOG.info("Kubernetes API up: watching pods on node %s and namespaces",
                     self.node_name or "(all nodes)")
            self._on_change()

    def report_failure(self, resource: str, exc: BaseException) -> None:
        kind, message = describe_api_error(resource, exc)
        with self._state_lock:
            previous = self._state
            same_episode = not previous.up and previous.error_kind == kind
            self._errors[resource] = message
            now = self._monotonic()
            down_since = previous.down_since_monotonic if not previous.up and previous.down_since_monotonic \
                is not None else now
            state = ApiState(up=False, error=previous.error if same_episode else message, error_kind=kind,
                             last_success_wall=previous.last_success_wall,
                             last_success_monotonic=previous.last_success_monotonic,
                             down_since_monotonic=down_since)
            self._state = state
            expired = now - down_since > self._timeouts.stale_after_s
        if not same_episode:
            LOG.warning("%s", message)
        dropped = expired and self.cache.clear()
        if dropped:
            for loop in self._loops:
                loop.request_relist()
            LOG.warning("Kubernetes API unreachable for %.0f s: dropping pod and namespace metadata",
                        now - down_since)
        if not same_episode or dropped:
            self._on_change()


def describe_api_error(resource: str, exc: BaseException) -> tuple[str, str]:
    """A stable kind (for change detection) and one readable line."""
    status = getattr(exc, "status", None)
    if isinstance(exc, _Malformed):
        return "malformed", f"Kubernetes API sent malformed data: {exc}"
    if isinstance(status, int) and status:
        reason = getattr(exc, "reason", "") or ""
        hint = ""
        if status in (401, 403):
            hint = " (check the service account's RBAC: list/watch pods and namespaces)"
        return f"http-{status}", f"Kubernetes API answered {status} {reason} to {resource} list/watch{hint}"
    name = type(exc).__name__
    text = str(exc)
    if "timed out" in text.lower() or "timeout" in name.lower():
        return "timeout", f"Kubernetes API timed out on {resource} list/watch: {name}"
    lowered = text.lower()
    if any(word in lowered for word in ("refused", "reset by peer", "connection aborted", "no route")) \
            or "NewConnectionError" in name or "MaxRetryError" in name:
        return "unreachable", f"Kubernetes API unreachable ({resource}): {text[:200]}"
    return name, f"Kubernetes API {resource} list/watch failed: {name}: {text[:200]}"


def build_core_v1_api(kubeconfig: str) -> Any:
    """The two CoreV1 list calls through the kubernetes package, for a kubeconfig only it can use.

    ``exporter.kube.apiserver.build_lists`` sends everything else itself; this path is for user entries
    with an ``exec`` credential plugin or an ``auth-provider``, or a cluster behind ``proxy-url``
    (the ~30 MiB client import happens only then).

    Uses a private ``Configuration``, so nothing global in the kubernetes package changes.
    urllib3's own retries are disabled: the watch loop has its own backoff and state reporting.
    """
    from kubernetes import client, config  # noqa: PLC0415 - heavy import, only in Kubernetes mode

    configuration = client.Configuration()
    config.load_kube_config(config_file=kubeconfig,  # type: ignore[no-untyped-call]
                            client_configuration=configuration, persist_config=False)
    configuration.retries = False
    api_client = client.ApiClient(configuration)
    if not hasattr(api_client, "param_serialize"):
        # An older kubernetes release (the older generator): its CoreV1Api is light and returns the unread
        # urllib3 response for _preload_content=False, raising ApiException with .status.
        return client.CoreV1Api(api_client)
    return CoreV1Lists(api_client)


class CoreV1Lists(CoreV1ListMethods):
    """``list_pod_for_all_namespaces`` and ``list_namespace`` as CoreV1Api has them, without CoreV1Api.

    Why: importing the generated ``kubernetes.client.api.core_v1_api`` module builds the pydantic
    validators of all ~250 model classes its signatures mention, about 22 MiB of resident memory
    (a fifth of the exporter's footprint with ``-k``; measured by ``python -m bench``), for two GET
    endpoints whose JSON this module parses itself. The requests go through the same
    ``ApiClient`` (configuration, authentication, TLS, URL building, timeouts) exactly as the
    generated methods send them with ``_preload_content=False``: the urllib3 response comes back
    unread, and a non-2xx answer raises ``ApiException`` (with ``status``, e.g. 410).
    """

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client

    def _get(self, path: str, kwargs: dict[str, Any]) -> Any:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415 - loaded with the client

        timeout, query = split_request_arguments(kwargs)
        request = self.api_client.param_serialize("GET", path, query_params=query,
                                                  header_params={"Accept": "application/json"},
                                                  auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response
