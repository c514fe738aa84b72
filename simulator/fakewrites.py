"""The writing half of the fake API server (simulator/fakeapiserver.py): Nodes, Events, evictions and
objects of named API groups, with the semantics a real API server enforces on writes.

``FakeApiServer`` plays the read-only list/watch side the exporter uses; the remediator writes, so
its tests need the other half, served by the same server (one port, one token, one request record):

* ``GET /api/v1/nodes`` (``labelSelector`` with ``key=value`` / ``key`` terms), ``GET /api/v1/nodes/<name>``;
* ``PATCH /api/v1/nodes/<name>`` and ``.../status`` in the three patch types (simulator/fakepatch.py). A
  ``metadata.resourceVersion`` in the patch is a precondition: a different current version answers
  409 Conflict, as kube-apiserver does. The main resource ignores ``status`` and the status
  subresource ignores everything else; an invalid taint or annotation answers 422;
* ``GET /api/v1/namespaces/<ns>/pods`` and ``.../events``; ``POST .../pods/<name>/eviction`` (429 while a
  simulated PodDisruptionBudget blocks it, else the pod is deleted, with the watch event a real
  server sends); the pods are the server's own (``add_pod``), so lists and watches see the same ones;
* ``POST /api/v1/namespaces/<ns>/events`` (409 AlreadyExists for a name in use, 422 for an Event
  without ``involvedObject`` or ``reason`` or in another namespace);
* named API groups, schema-less: create (409 when the name exists) and read any resource
  (``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]``), e.g. Jobs and custom resources.

Faults: ``conflict_next_patches`` (someone else changes the node just before the next N patches, so
they conflict), ``block_evictions``; the server's ``fail_next`` answers any request with a status.
"""

from __future__ import annotations

import copy
import hashlib
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.fakepatch import apply_patch, invalid_node

JsonObject = dict[str, Any]
Answer = tuple[int, JsonObject]
CALL_LOG_LIMIT = 200_000  # requests kept in ``calls`` (a long --simulate run must not grow without bound)


@dataclass(frozen=True)
class Request:
    """One request as the server answered it (reads and writes alike)."""

    method: str
    path: str
    query: Mapping[str, str]
    content_type: str
    body: Any
    status: int
    at: float = 0.0  # Unix time the answer was decided

    @property
    def is_write(self) -> bool:
        return self.method in ("POST", "PUT", "PATCH", "DELETE")


def status_object(code: int, reason: str, message: str) -> JsonObject:
    """The ``Status`` body kube-apiserver sends with an error."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def not_found(path: str) -> Answer:
    return 404, status_object(404, "NotFound", f"the server could not find the requested resource ({path})")


def stable_uid(*parts: str) -> str:
    """A UUID-shaped UID derived from names, so scenarios give the same UIDs on every run."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()
    return f"{digest[0:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


class NodeWrites:
    """Mixed into ``FakeApiServer``: the objects only writers touch and how writes change them. The
    server provides the lock (``_cond``), the resourceVersion counter, the pods and their events."""

    _cond: threading.Condition
    _rv: int
    _pods: dict[tuple[str, str], JsonObject]

    def _init_writes(self) -> None:
        self.nodes: dict[str, JsonObject] = {}
        self.events: dict[tuple[str, str], JsonObject] = {}
        self.objects: dict[tuple[tuple[str, str, str], str], JsonObject] = {}  # ((group, ns, plural), name)
        self.calls: deque[Request] = deque(maxlen=CALL_LOG_LIMIT)  # every request with its answer's status
        self._conflicts = 0
        self._blocked: dict[tuple[str, str], int] = {}
        self._budgets: dict[tuple[str, str], str] = {}  # pod -> the PodDisruptionBudget its 429 names

    def _record(self, resource: str, event_type: str, obj: JsonObject) -> None:
        raise NotImplementedError  # the server's: stamps the object and sends the watch event

    def record_call(self, call: Request) -> None:
        with self._cond:
            self.calls.append(call)

    def _stamp(self, obj: JsonObject) -> JsonObject:
        """A new resourceVersion for an object no watch serves (nodes, events, named-group objects)."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        return obj

    # -- objects -------------------------------------------------------------------------------

    def add_node(self, name: str, *, gpus: int = 8, labels: Mapping[str, str] | None = None,
                 taints: Sequence[Mapping[str, str]] = (), unschedulable: bool = False) -> JsonObject:
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110", **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        obj: JsonObject = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": stable_uid("node", name),
                         "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
                         "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"podCIDR": "10.0.0.0/24", **({"taints": [dict(t) for t in taints]} if taints else {}),
                     **({"unschedulable": True} if unschedulable else {})},
            "status": {"capacity": dict(resources), "allocatable": dict(resources),
                       "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                       "message": "kubelet is posting ready status",
                                       "lastHeartbeatTime": "2024-01-01T00:00:00Z",
                                       "lastTransitionTime": "2024-01-01T00:00:00Z"}]},
        }
        with self._cond:
            self.nodes[name] = self._stamp(obj)
            return copy.deepcopy(obj)

    def touch_node(self, name: str, label: str = "touched-by") -> None:
        """Someone else changes the node (a label), as the kubelet or an administrator would."""
        with self._cond:
            node = self.nodes[name]
            node["metadata"].setdefault("labels", {})[label] = str(len(self.calls))
            self._stamp(node)

    def node(self, name: str) -> JsonObject:
        with self._cond:
            return copy.deepcopy(self.nodes[name])

    def event_list(self) -> list[JsonObject]:
        with self._cond:
            return [copy.deepcopy(event) for event in self.events.values()]

    def writes(self, method: str | None = None, path_prefix: str = "") -> list[Request]:
        """The write requests so far (optionally of one method, under a path)."""
        with self._cond:
            return [r for r in self.calls if r.is_write and (method is None or r.method == method)
                    and r.path.startswith(path_prefix)]

    def objects_of(self, plural: str) -> list[JsonObject]:
        """The objects created under a named API group's ``plural`` (Jobs, GpuRepairRequests...)."""
        with self._cond:
            return [copy.deepcopy(obj) for ((_, _, kind), _), obj in self.objects.items() if kind == plural]

    def set_object_status(self, plural: str, name: str, status: JsonObject) -> None:
        """What a controller would write: e.g. a Job's ``status.succeeded``."""
        with self._cond:
            for (collection, object_name), obj in self.objects.items():
                if collection[2] == plural and object_name == name:
                    obj["status"] = copy.deepcopy(status)
                    self._stamp(obj)

    # -- faults -------------------------------------------------------------------------------

    def block_evictions(self, namespace: str, name: str, count: int, *, budget: str = "") -> None:
        """The next ``count`` evictions of the pod answer 429, as a PodDisruptionBudget at its limit does; with
        ``budget``, the Status names it in ``details.causes`` as kube-apiserver's eviction subresource does."""
        with self._cond:
            self._blocked[(namespace, name)] = self._blocked.get((namespace, name), 0) + count
            if budget:
                self._budgets[(namespace, name)] = budget

    def conflict_next_patches(self, count: int) -> None:
        with self._cond:
            self._conflicts += count

    # -- request handling (the server calls it with its lock held) ------------------------------

    def answer_write(self, method: str, path: str, query: Mapping[str, str], content_type: str, body: Any) -> Answer:
        """The answer to a request the list/watch side does not serve: (status, JSON object)."""
        parts = [part for part in path.split("/") if part]
        if parts[:1] == ["apis"]:
            return self._apis(method, path, parts[1:], body)
        if parts[:2] != ["api", "v1"]:
            return not_found(path)
        route = parts[2:]
        routes: dict[tuple[str, int], Callable[[], Answer]] = {
            ("GET", 1): lambda: self._list(route[0], query, None),
            ("GET", 2): lambda: self._get_node(route[1]) if route[0] == "nodes" else not_found(path),
            ("GET", 3): lambda: self._list(route[2], query, route[1]) if route[0] == "namespaces" else not_found(path),
            ("PATCH", 2): lambda: self._patch_node(route[1], content_type, body, status=False)
            if route[0] == "nodes" else not_found(path),
            ("PATCH", 3): lambda: self._patch_node(route[1], content_type, body, status=True)
            if route[0] == "nodes" and route[2] == "status" else not_found(path),
            ("POST", 3): lambda: self._create_event(route[1], body)
            if route[0] == "namespaces" and route[2] == "events" else not_found(path),
            ("POST", 5): lambda: self._evict(route[1], route[3], body)
            if route[0] == "namespaces" and route[2] == "pods" and route[4] == "eviction" else not_found(path),
        }
        handler = routes.get((method, len(route)))
        return handler() if handler else not_found(path)

    def _list(self, resource: str, query: Mapping[str, str], namespace: str | None) -> Answer:
        sources: dict[str, Mapping[Any, JsonObject]] = {"nodes": self.nodes, "pods": self._pods,
                                                        "events": self.events}
        source = sources.get(resource)
        if source is None or (resource == "nodes" and namespace is not None):
            return not_found(resource)
        items = [obj for obj in source.values()
                 if namespace is None or obj["metadata"].get("namespace") == namespace]
        field = query.get("fieldSelector", "")
        if field:
            key, _, value = field.partition("=")
            if key != "spec.nodeName" or resource != "pods":
                return 400, status_object(400, "BadRequest", f"unsupported field selector {field!r}")
            items = [obj for obj in items if obj["spec"].get("nodeName") == value.lstrip("=")]
        items = [obj for obj in items if label_selector_matches(obj, query.get("labelSelector", ""))]
        kind = {"nodes": "NodeList", "pods": "PodList", "events": "EventList"}[resource]
        return 200, {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": str(self._rv)},
                     "items": copy.deepcopy(items)}

    def _get_node(self, name: str) -> Answer:
        node = self.nodes.get(name)
        if node is None:
            return 404, status_object(404, "NotFound", f'nodes "{name}" not found')
        return 200, copy.deepcopy(node)

    def _patch_node(self, name: str, content_type: str, body: Any, *, status: bool) -> Answer:
        node = self.nodes.get(name)
        if node is None:
            return 404, status_object(404, "NotFound", f'nodes "{name}" not found')
        if self._conflicts:
            self._conflicts -= 1
            self.touch_node(name)
        try:
            patched = apply_patch(node, content_type.split(";", maxsplit=1)[0].strip(), body)
        except ValueError as exc:
            code = 400 if "unsupported" in str(exc) else 422
            return code, status_object(code, "BadRequest" if code == 400 else "Invalid", str(exc))
        wanted = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != node["metadata"]["resourceVersion"]:
            return 409, status_object(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object '
                                                       "has been modified; please apply your changes to the latest "
                                                       "version and try again")
        result = copy.deepcopy(node)
        if status:
            result["status"] = patched.get("status", {})
        else:
            result["metadata"] = patched.get("metadata", {})
            result["spec"] = patched.get("spec", {})
        result["metadata"]["name"] = name
        result["metadata"]["uid"] = node["metadata"]["uid"]
        problem = invalid_node(result)
        if problem:
            return 422, status_object(422, "Invalid", problem)
        if result != node:
            self.nodes[name] = self._stamp(result)
        return 200, copy.deepcopy(self.nodes[name])

    def _apis(self, method: str, path: str, parts: list[str], body: Any) -> Answer:
        if len(parts) < 3:
            return not_found(path)
        rest = parts[2:]
        namespace = rest[1] if rest[0] == "namespaces" and len(rest) >= 3 else ""
        rest = rest[2:] if namespace else rest
        collection = (parts[0], namespace, rest[0])
        if method == "POST" and len(rest) == 1:
            if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
                return 422, status_object(422, "Invalid", "metadata.name is required")
            name = body["metadata"]["name"]
            if (collection, name) in self.objects:
                return 409, status_object(409, "AlreadyExists", f'{rest[0]} "{name}" already exists')
            obj = copy.deepcopy(body)
            obj["metadata"].update({"uid": stable_uid(*collection, name), **({"namespace": namespace} if namespace
                                                                              else {})})
            self.objects[(collection, name)] = self._stamp(obj)
            return 201, copy.deepcopy(obj)
        if method == "GET" and len(rest) == 2:
            found = self.objects.get((collection, rest[1]))
            return (200, copy.deepcopy(found)) if found else not_found(path)
        return not_found(path)

    def _evict(self, namespace: str, name: str, body: Any) -> Answer:
        """policy/v1 Eviction: 429 while a (simulated) PodDisruptionBudget blocks it, else the pod is deleted."""
        if not isinstance(body, dict) or body.get("kind") != "Eviction" or \
                (body.get("metadata") or {}).get("name") != name:
            return 400, status_object(400, "BadRequest", "expected a policy/v1 Eviction naming the pod")
        if (namespace, name) not in self._pods:
            return 404, status_object(404, "NotFound", f'pods "{name}" not found')
        if self._blocked.get((namespace, name)):
            self._blocked[(namespace, name)] -= 1
            refusal = status_object(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                                            "disruption budget.")
            if (namespace, name) in self._budgets:  # pkg/registry/core/pod/storage/eviction.go: the cause
                refusal["details"] = {"causes": [{"type": "DisruptionBudget", "message": (
                    f"The disruption budget {self._budgets[(namespace, name)]} needs 1 healthy pods and has 1 "
                    "currently")}]}
            return 429, refusal
        self._record("pods", "DELETED", self._pods.pop((namespace, name)))
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _create_event(self, namespace: str, body: Any) -> Answer:
        if not isinstance(body, dict):
            return 400, status_object(400, "BadRequest", "body is not an object")
        name = (body.get("metadata") or {}).get("name", "")
        if not name or (body.get("metadata") or {}).get("namespace", namespace) != namespace:
            return 422, status_object(422, "Invalid", "metadata.name is required and metadata.namespace must match")
        if not body.get("reason") or not isinstance(body.get("involvedObject"), dict):
            return 422, status_object(422, "Invalid", "involvedObject and reason are required")
        involved = body["involvedObject"]
        if involved.get("namespace", namespace if involved.get("kind") != "Node" else "default") != namespace:
            return 422, status_object(422, "Invalid", "involvedObject.namespace does not match the event namespace")
        if (namespace, name) in self.events:
            return 409, status_object(409, "AlreadyExists", f'events "{name}" already exists')
        event = copy.deepcopy(body)
        event["metadata"].update({"namespace": namespace, "uid": stable_uid("event", namespace, name)})
        self.events[(namespace, name)] = self._stamp(event)
        return 201, copy.deepcopy(event)


def label_selector_matches(obj: Mapping[str, Any], selector: str) -> bool:
    """Whether ``obj``'s labels satisfy a ``labelSelector`` of ``key=value`` / ``key==value`` / ``key`` terms."""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, sep, value = term.partition("=")
        if key not in labels or (sep and labels[key] != value.lstrip("=")):
            return False
    return True
