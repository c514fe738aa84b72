"""Pod and namespace metadata from the Kubernetes API: one watch each, never a call per scrape.

PodResources names pods but carries no UID, labels or container IDs; those come from here.
dcgm-exporter first fetched them with a ``GET pod`` per pod per scrape (its 4.8.1), then with
an informer that, without ``NODE_NAME``, watched every pod in the cluster (its #626). This
module keeps exactly two streams open:

* pods on this node: ``GET /api/v1/pods?fieldSelector=spec.nodeName=<node>``;
* namespaces (their labels feed the ``team`` label).

Each is a ``reflector.Reflector`` (list, then watch, resume from bookmarks, relist on 410 from
the API server's watch cache, jittered timeouts, one attempt per backoff window, Retry-After);
both share one ``reflector.WatchGroup`` (the ``kube_api_up`` state, request and relist counters,
one log line per change of state). While the API fails, labels keep flowing from the last known
state, for at most ``stale_after_s``.

Only what attribution needs is kept (``PodMetadata``: namespace, name, UID, labels, container
IDs, phase; ``NamespaceMetadata``: name, labels); a DELETED event or a relist that no longer
contains a pod removes it from every index, so memory follows the pods on the node. Raw JSON
is parsed directly from the unread response: model classes would cost far more memory and CPU
for objects of which we read six fields. The requests go out through ``exporter.kube.apiserver``
(urllib3; the kubernetes package only for kubeconfigs with credential plugins).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from exporter import __version__
from exporter.kube.apiserver import CoreV1Lists, build_lists
from exporter.kube.reflector import (
    ApiCounters,
    ApiState,
    Reflector,
    WatchedResource,
    WatchGroup,
    WatchTimeouts,
    describe_api_error,
)
from exporter.logs import get_logger

# Also importable from here, where they used to live (the doctor reads them).
__all__ = ["ApiState", "CoreV1Lists", "KubernetesMetadata", "MetadataCache", "MetadataView", "NamespaceMetadata",
           "PodMetadata", "WatchTimeouts", "describe_api_error", "namespace_from_json", "pod_from_json",
           "strip_container_id"]

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


class _PodDecoder:
    """Pods on this node -> ``MetadataCache`` (a ``reflector.Decoder``)."""

    def __init__(self, cache: MetadataCache, changed: Callable[[bool], bool]) -> None:
        self._cache = cache
        self._changed = changed

    def replace(self, items: list[Mapping[str, Any]]) -> None:
        self._changed(self._cache.replace_pods([pod_from_json(item) for item in items]))

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        pod = pod_from_json(obj)
        if event_type == "DELETED":
            self._changed(self._cache.delete_pod(pod.namespace, pod.name))
        else:
            self._changed(self._cache.upsert_pod(pod))


class _NamespaceDecoder:
    """Namespaces -> ``MetadataCache`` (a ``reflector.Decoder``)."""

    def __init__(self, cache: MetadataCache, changed: Callable[[bool], bool]) -> None:
        self._cache = cache
        self._changed = changed

    def replace(self, items: list[Mapping[str, Any]]) -> None:
        self._changed(self._cache.replace_namespaces([namespace_from_json(item) for item in items]))

    def apply(self, event_type: str, obj: Mapping[str, Any]) -> None:
        namespace = namespace_from_json(obj)
        if event_type == "DELETED":
            self._changed(self._cache.delete_namespace(namespace.name))
        else:
            self._changed(self._cache.upsert_namespace(namespace))


def user_agent(node_name: str) -> str:
    """``gpu-pod-exporter/<version> node/<node>``: who sends a request, in the API server's audit log."""
    return f"gpu-pod-exporter/{__version__} node/{node_name or 'unknown'}"


class KubernetesMetadata:
    """The pod and namespace reflectors and the cache they fill; see the module docstring.

    ``on_change`` is called (from the watch threads) when the cached content or the logged up/down
    condition changed. ``api_factory`` returns an API transport with ``get(path, query, timeout)``
    (``exporter.kube.apiserver``); by default ``build_lists``: urllib3 with the settings of
    ``kubeconfig`` or, when that is empty, of the in-cluster service account.
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
        random_fraction: Callable[[], float] = random.random,
    ) -> None:
        self.node_name = node_name
        self.cache = MetadataCache()
        self._on_change = on_change
        self._timeouts = timeouts or WatchTimeouts()
        self._api_factory = api_factory or (lambda: build_lists(kubeconfig, allow_exec=allow_exec))
        self.group = WatchGroup(
            node=node_name, description=f"pods on node {node_name or '(all nodes)'} and namespaces",
            timeouts=self._timeouts, on_change=on_change, on_stale=self.cache.clear, monotonic=monotonic,
            wall_clock=wall_clock, random_fraction=random_fraction)
        self._not_configured: ApiState | None = None
        self._started = False
        self.api: Any = None  # the API transport, once started (other watches of this node share it)

    @property
    def state(self) -> ApiState:
        return self._not_configured or self.group.state

    @property
    def synced(self) -> bool:
        return self.group.synced

    @property
    def counters(self) -> ApiCounters:
        return self.group.counters

    @property
    def reflectors(self) -> list[Reflector]:
        return self.group.reflectors

    def view(self) -> MetadataView:
        return self.cache.view()

    def start(self) -> None:
        if self._started:
            return
        try:
            api = self._api_factory()
        except Exception as exc:  # noqa: BLE001 - configuration problems become a visible state
            self._not_configured = ApiState(up=False, error=f"Kubernetes API not configured: {exc}",
                                            error_kind="not-configured")
            LOG.warning("%s; pod UIDs, pod labels, teams and process attribution are unavailable",
                        self._not_configured.error)
            self._on_change()
            return
        self._started = True
        self.api = api
        with contextlib.suppress(AttributeError):
            api.user_agent = user_agent(self.node_name)
        selector = f"spec.nodeName={self.node_name}" if self.node_name else ""
        self.group.add(WatchedResource("pods", "/api/v1/pods", field_selector=selector), api,
                       _PodDecoder(self.cache, self._changed))
        self.group.add(WatchedResource("namespaces", "/api/v1/namespaces"), api,
                       _NamespaceDecoder(self.cache, self._changed))
        self.group.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self.group.stop(timeout_s)

    def _changed(self, changed: bool) -> bool:
        if changed:
            self._on_change()
        return changed
