"""A fake Kubernetes API server for the tools that write: nodes, pods and Events, every request recorded.

``fakeapiserver`` plays the read-only list/watch side the exporter uses. The remediator writes,
so its tests need the other half, with the semantics a real API server enforces on writes:

* ``GET /api/v1/nodes`` (``labelSelector`` with ``key=value`` / ``key`` terms), ``GET /api/v1/nodes/<name>``;
* ``PATCH /api/v1/nodes/<name>`` and ``.../status`` in the three patch types
  (``application/strategic-merge-patch+json``, ``merge-patch+json``, ``json-patch+json``).
  Strategic merge replaces lists, except ``status.conditions``, merged by ``type`` as the Node
  schema declares; ``null`` deletes a key. A ``metadata.resourceVersion`` in the patch is a
  precondition: a different current version answers 409 Conflict, as kube-apiserver does. The
  main resource ignores ``status`` and the status subresource ignores everything else;
* ``GET /api/v1/pods`` (``fieldSelector=spec.nodeName=<node>``) and ``/api/v1/namespaces/<ns>/pods``;
* ``POST /api/v1/namespaces/<ns>/events`` (409 AlreadyExists for a name in use, 422 for an Event
  without ``involvedObject`` or ``reason`` or in another namespace), ``GET`` of events.

Every request is kept in ``requests`` (method, path, query, content type, parsed body, status), so
a test can assert exactly which writes happened. Faults: ``fail_next`` (answer N requests with a
status, e.g. 503), ``conflict_next_patches`` (someone else changes the node just before the next
N patches, so they conflict), ``token`` (401 without ``Authorization: Bearer <token>``).
"""

from __future__ import annotations

import copy
import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from simulator.fakeapiserver import stable_uid

JsonObject = dict[str, Any]
STRATEGIC = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# Lists that strategic merge merges by a key instead of replacing (subset of the Node schema).
MERGE_KEYS = {("status", "conditions"): "type", ("status", "addresses"): "type"}


@dataclass(frozen=True)
class Request:
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


class FakeNodeApiServer:
    """See the module docstring. Thread-safe; ``start()`` binds 127.0.0.1 on a free port."""

    def __init__(self, *, token: str | None = None, host: str = "127.0.0.1") -> None:
        self.token = token
        self.host = host
        self.port = 0
        self._lock = threading.RLock()
        self._rv = itertools.count(100)
        self.nodes: dict[str, JsonObject] = {}
        self.pods: dict[tuple[str, str], JsonObject] = {}
        self.events: dict[tuple[str, str], JsonObject] = {}
        self.requests: list[Request] = []
        self._failures: list[int] = []
        self._conflicts = 0
        self._blocked: dict[tuple[str, str], int] = {}
        self._budgets: dict[tuple[str, str], str] = {}  # pod -> the PodDisruptionBudget its 429 names
        self.objects: dict[tuple[tuple[str, str, str], str], JsonObject] = {}  # ((group, ns, plural), name)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> FakeNodeApiServer:
        server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        server.daemon_threads = True
        self._server = server
        self.port = int(server.server_address[1])
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-node-api", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def __enter__(self) -> FakeNodeApiServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def write_kubeconfig(self, path: str | Path) -> Path:
        target = Path(path)
        target.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token or "fake-token"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }, sort_keys=False), encoding="utf-8")
        return target

    # -- objects -------------------------------------------------------------------------------

    def _stamp(self, obj: JsonObject) -> JsonObject:
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        return obj

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
        with self._lock:
            self.nodes[name] = self._stamp(obj)
            return copy.deepcopy(obj)

    def add_pod(self, namespace: str, name: str, node: str, *, uid: str | None = None,
                gpu_resource: str = "nvidia.com/gpu", gpus: int = 1, owner_kind: str | None = None,
                labels: Mapping[str, str] | None = None) -> JsonObject:
        """``owner_kind``: the kind of the pod's controller (ReplicaSet, Job, DaemonSet...); None: unmanaged."""
        limits = {gpu_resource: str(gpus)} if gpus else {}
        owners = [{"apiVersion": "apps/v1" if owner_kind != "Job" else "batch/v1", "kind": owner_kind,
                   "name": f"{name}-owner", "uid": stable_uid("owner", namespace, name), "controller": True}] \
            if owner_kind else []
        obj: JsonObject = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid or stable_uid("pod", namespace, name),
                         "creationTimestamp": "2024-01-01T00:00:00Z",
                         **({"ownerReferences": owners} if owners else {}),
                         **({"labels": dict(labels)} if labels else {})},
            "spec": {"nodeName": node, "containers": [{"name": "main", "image": "registry.example/app:1",
                                                       "resources": {"limits": limits}}]},
            "status": {"phase": "Running"},
        }
        with self._lock:
            self.pods[(namespace, name)] = self._stamp(obj)
            return copy.deepcopy(obj)

    def touch_node(self, name: str, label: str = "touched-by") -> None:
        """Someone else changes the node (a label), as the kubelet or an administrator would."""
        with self._lock:
            node = self.nodes[name]
            node["metadata"].setdefault("labels", {})[label] = str(len(self.requests))
            self._stamp(node)

    def node(self, name: str) -> JsonObject:
        with self._lock:
            return copy.deepcopy(self.nodes[name])

    def event_list(self) -> list[JsonObject]:
        with self._lock:
            return [copy.deepcopy(event) for event in self.events.values()]

    def writes(self, method: str | None = None, path_prefix: str = "") -> list[Request]:
        """The write requests so far (optionally of one method, under a path)."""
        with self._lock:
            return [r for r in self.requests if r.is_write and (method is None or r.method == method)
                    and r.path.startswith(path_prefix)]

    # -- faults -------------------------------------------------------------------------------

    def fail_next(self, count: int, status: int = 503) -> None:
        with self._lock:
            self._failures.extend([status] * count)

    def block_evictions(self, namespace: str, name: str, count: int, *, budget: str = "") -> None:
        """The next ``count`` evictions of the pod answer 429, as a PodDisruptionBudget at its limit does; with
        ``budget``, the Status names it in ``details.causes`` as kube-apiserver's eviction subresource does."""
        with self._lock:
            self._blocked[(namespace, name)] = self._blocked.get((namespace, name), 0) + count
            if budget:
                self._budgets[(namespace, name)] = budget

    def conflict_next_patches(self, count: int) -> None:
        with self._lock:
            self._conflicts += count

    # -- request handling ------------------------------------------------------------------------

    def handle(self, call: Request, authorization: str) -> tuple[int, JsonObject]:
        """Answer one request (``call.status`` is ignored) and record it with the status given."""
        with self._lock:
            status, answer = self._answer(call, authorization)
            self.requests.append(Request(call.method, call.path, dict(call.query), call.content_type, call.body,
                                         status, time.time()))
            return status, answer

    def _answer(self, call: Request, authorization: str) -> tuple[int, JsonObject]:
        method, path, query, content_type, body = call.method, call.path, call.query, call.content_type, call.body
        if self.token is not None and authorization != f"Bearer {self.token}":
            return 401, _status(401, "Unauthorized", "Unauthorized")
        if self._failures:
            code = self._failures.pop(0)
            return code, _status(code, "ServiceUnavailable" if code == 503 else "InternalError", "injected failure")
        parts = [part for part in path.split("/") if part]
        if parts[:1] == ["apis"]:
            return self._apis(method, path, parts[1:], body)
        if parts[:2] != ["api", "v1"]:
            return 404, _status(404, "NotFound", f"no such path {path}")
        route = parts[2:]
        routes: dict[tuple[str, int], Callable[[], tuple[int, JsonObject]]] = {
            ("GET", 1): lambda: self._list(route[0], query, None),
            ("GET", 2): lambda: self._get_node(route[1]) if route[0] == "nodes" else _not_found(path),
            ("GET", 3): lambda: self._list(route[2], query, route[1]) if route[0] == "namespaces" else _not_found(path),
            ("PATCH", 2): lambda: self._patch_node(route[1], content_type, body, status=False)
            if route[0] == "nodes" else _not_found(path),
            ("PATCH", 3): lambda: self._patch_node(route[1], content_type, body, status=True)
            if route[0] == "nodes" and route[2] == "status" else _not_found(path),
            ("POST", 3): lambda: self._create_event(route[1], body)
            if route[0] == "namespaces" and route[2] == "events" else _not_found(path),
            ("POST", 5): lambda: self._evict(route[1], route[3], body)
            if route[0] == "namespaces" and route[2] == "pods" and route[4] == "eviction" else _not_found(path),
        }
        handler = routes.get((method, len(route)))
        return handler() if handler else _not_found(path)

    def _list(self, resource: str, query: Mapping[str, str], namespace: str | None) -> tuple[int, JsonObject]:
        sources: dict[str, Mapping[Any, JsonObject]] = {"nodes": self.nodes, "pods": self.pods,
                                                        "events": self.events}
        source = sources.get(resource)
        if source is None or (resource == "nodes" and namespace is not None):
            return _not_found(resource)
        items = [obj for obj in source.values()
                 if namespace is None or obj["metadata"].get("namespace") == namespace]
        field = query.get("fieldSelector", "")
        if field:
            key, _, value = field.partition("=")
            if key != "spec.nodeName" or resource != "pods":
                return 400, _status(400, "BadRequest", f"unsupported field selector {field!r}")
            items = [obj for obj in items if obj["spec"].get("nodeName") == value.lstrip("=")]
        for term in filter(None, query.get("labelSelector", "").split(",")):
            key, sep, value = term.partition("=")
            items = [obj for obj in items if key in (obj["metadata"].get("labels") or {})
                     and (not sep or obj["metadata"]["labels"][key] == value.lstrip("="))]
        kind = {"nodes": "NodeList", "pods": "PodList", "events": "EventList"}[resource]
        return 200, {"apiVersion": "v1", "kind": kind, "metadata": {"resourceVersion": str(next(self._rv))},
                     "items": copy.deepcopy(items)}

    def _get_node(self, name: str) -> tuple[int, JsonObject]:
        node = self.nodes.get(name)
        if node is None:
            return 404, _status(404, "NotFound", f'nodes "{name}" not found')
        return 200, copy.deepcopy(node)

    def _patch_node(self, name: str, content_type: str, body: Any, *, status: bool) -> tuple[int, JsonObject]:
        node = self.nodes.get(name)
        if node is None:
            return 404, _status(404, "NotFound", f'nodes "{name}" not found')
        if self._conflicts:
            self._conflicts -= 1
            self.touch_node(name)
        try:
            patched = apply_patch(node, content_type.split(";", maxsplit=1)[0].strip(), body)
        except ValueError as exc:
            code = 400 if "unsupported" in str(exc) else 422
            return code, _status(code, "BadRequest" if code == 400 else "Invalid", str(exc))
        wanted = (body.get("metadata") or {}).get("resourceVersion") if isinstance(body, dict) else None
        if wanted and wanted != node["metadata"]["resourceVersion"]:
            return 409, _status(409, "Conflict", f'Operation cannot be fulfilled on nodes "{name}": the object has '
                                                 "been modified; please apply your changes to the latest version "
                                                 "and try again")
        result = copy.deepcopy(node)
        if status:
            result["status"] = patched.get("status", {})
        else:
            result["metadata"] = patched.get("metadata", {})
            result["spec"] = patched.get("spec", {})
        result["metadata"]["name"] = name
        result["metadata"]["uid"] = node["metadata"]["uid"]
        problem = _invalid_node(result)
        if problem:
            return 422, _status(422, "Invalid", problem)
        if result != node:
            self.nodes[name] = self._stamp(result)
        return 200, copy.deepcopy(self.nodes[name])

    def _apis(self, method: str, path: str, parts: list[str], body: Any) -> tuple[int, JsonObject]:
        """Named API groups, schema-less: create (409 when the name exists) and read any resource
        (``/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]``), e.g. Jobs and custom resources."""
        if len(parts) < 3:
            return _not_found(path)
        rest = parts[2:]
        namespace = rest[1] if rest[0] == "namespaces" and len(rest) >= 3 else ""
        rest = rest[2:] if namespace else rest
        collection = (parts[0], namespace, rest[0])
        if method == "POST" and len(rest) == 1:
            if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
                return 422, _status(422, "Invalid", "metadata.name is required")
            name = body["metadata"]["name"]
            if (collection, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{rest[0]} "{name}" already exists')
            obj = copy.deepcopy(body)
            obj["metadata"].update({"uid": stable_uid(*collection, name), **({"namespace": namespace} if namespace
                                                                              else {})})
            self.objects[(collection, name)] = self._stamp(obj)
            return 201, copy.deepcopy(obj)
        if method == "GET" and len(rest) == 2:
            found = self.objects.get((collection, rest[1]))
            return (200, copy.deepcopy(found)) if found else _not_found(path)
        return _not_found(path)

    def objects_of(self, plural: str) -> list[JsonObject]:
        """The objects created under a named API group's ``plural`` (Jobs, GpuRepairRequests...)."""
        with self._lock:
            return [copy.deepcopy(obj) for ((_, _, kind), _), obj in self.objects.items() if kind == plural]

    def set_object_status(self, plural: str, name: str, status: JsonObject) -> None:
        """What a controller would write: e.g. a Job's ``status.succeeded``."""
        with self._lock:
            for (collection, object_name), obj in self.objects.items():
                if collection[2] == plural and object_name == name:
                    obj["status"] = copy.deepcopy(status)
                    self._stamp(obj)

    def _evict(self, namespace: str, name: str, body: Any) -> tuple[int, JsonObject]:
        """policy/v1 Eviction: 429 while a (simulated) PodDisruptionBudget blocks it, else the pod is deleted."""
        if not isinstance(body, dict) or body.get("kind") != "Eviction" or \
                (body.get("metadata") or {}).get("name") != name:
            return 400, _status(400, "BadRequest", "expected a policy/v1 Eviction naming the pod")
        if (namespace, name) not in self.pods:
            return 404, _status(404, "NotFound", f'pods "{name}" not found')
        if self._blocked.get((namespace, name)):
            self._blocked[(namespace, name)] -= 1
            refusal = _status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's "
                                                      "disruption budget.")
            if (namespace, name) in self._budgets:  # pkg/registry/core/pod/storage/eviction.go: the cause
                refusal["details"] = {"causes": [{"type": "DisruptionBudget", "message": (
                    f"The disruption budget {self._budgets[(namespace, name)]} needs 1 healthy pods and has 1 "
                    "currently")}]}
            return 429, refusal
        del self.pods[(namespace, name)]
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _create_event(self, namespace: str, body: Any) -> tuple[int, JsonObject]:
        if not isinstance(body, dict):
            return 400, _status(400, "BadRequest", "body is not an object")
        name = (body.get("metadata") or {}).get("name", "")
        if not name or (body.get("metadata") or {}).get("namespace", namespace) != namespace:
            return 422, _status(422, "Invalid", "metadata.name is required and metadata.namespace must match")
        if not body.get("reason") or not isinstance(body.get("involvedObject"), dict):
            return 422, _status(422, "Invalid", "involvedObject and reason are required")
        involved = body["involvedObject"]
        if involved.get("namespace", namespace if involved.get("kind") != "Node" else "default") != namespace:
            return 422, _status(422, "Invalid", "involvedObject.namespace does not match the event namespace")
        if (namespace, name) in self.events:
            return 409, _status(409, "AlreadyExists", f'events "{name}" already exists')
        event = copy.deepcopy(body)
        event["metadata"].update({"namespace": namespace, "uid": stable_uid("event", namespace, name)})
        self.events[(namespace, name)] = self._stamp(event)
        return 201, copy.deepcopy(event)


def _invalid_node(node: Mapping[str, Any]) -> str:
    seen: set[tuple[str, str]] = set()
    for taint in node.get("spec", {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "PreferNoSchedule", "NoExecute") or not taint.get("key"):
            return f"spec.taints: invalid taint {taint}"
        value = str(taint.get("value", ""))
        if len(value) > 63 or not all(ch.isalnum() or ch in "-_." for ch in value):
            return f"spec.taints: invalid value {value!r}"
        pair = (taint["key"], taint["effect"])
        if pair in seen:
            return f"spec.taints: duplicate taint {pair}"
        seen.add(pair)
    for key, value in (node.get("metadata", {}).get("annotations") or {}).items():
        if not isinstance(value, str):
            return f"metadata.annotations.{key}: must be a string"
    return ""


# ---------------------------------------------------------------------------------------------
# Patches


def apply_patch(obj: JsonObject, content_type: str, patch: Any) -> JsonObject:
    """``obj`` with ``patch`` applied (a new object); ValueError for a bad or unsupported patch."""
    if content_type == STRATEGIC:
        if not isinstance(patch, dict):
            raise ValueError("a strategic merge patch must be an object")
        merged: JsonObject = _strategic(copy.deepcopy(obj), patch, ())
        return merged
    if content_type == MERGE:
        if not isinstance(patch, dict):
            raise ValueError("a merge patch must be an object")
        result: JsonObject = _merge(copy.deepcopy(obj), patch)
        return result
    if content_type == JSON_PATCH:
        if not isinstance(patch, list):
            raise ValueError("a JSON patch must be a list of operations")
        return _json_patch(copy.deepcopy(obj), patch)
    raise ValueError(f"unsupported patch content type {content_type!r}")


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def _strategic(target: Any, patch: Any, path: tuple[str, ...]) -> Any:
    if not isinstance(patch, dict):
        if isinstance(patch, list) and path in MERGE_KEYS and isinstance(target, list):
            key = MERGE_KEYS[path]
            merged = [dict(item) for item in target]
            for item in patch:
                existing = next((m for m in merged if m.get(key) == item.get(key)), None)
                if existing is None:
                    merged.append(copy.deepcopy(item))
                else:
                    existing.update(copy.deepcopy(item))
            return merged
        return copy.deepcopy(patch)
    if any(key.startswith("$") for key in patch):
        raise ValueError("unsupported strategic merge directive")
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _strategic(result.get(key), value, (*path, key))
    return result


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _json_patch(obj: JsonObject, operations: list[Any]) -> JsonObject:
    for operation in operations:
        if not isinstance(operation, dict) or operation.get("op") not in ("add", "remove", "replace", "test"):
            raise ValueError(f"unsupported JSON patch operation {operation!r}")
        *parents, last = _pointer(str(operation.get("path", "")))
        container: Any = obj
        for part in parents:
            container = container[int(part)] if isinstance(container, list) else container.setdefault(part, {})
        op = operation["op"]
        if op == "test":
            actual = container[int(last)] if isinstance(container, list) else container.get(last)
            if actual != operation.get("value"):
                raise ValueError(f"test failed at {operation['path']}")
        elif op == "remove":
            if isinstance(container, list):
                container.pop(int(last))
            elif last in container:
                del container[last]
            else:
                raise ValueError(f"nothing to remove at {operation['path']}")
        elif isinstance(container, list):
            index = len(container) if last == "-" else int(last)
            if op == "add":
                container.insert(index, copy.deepcopy(operation.get("value")))
            else:
                container[index] = copy.deepcopy(operation.get("value"))
        else:
            container[last] = copy.deepcopy(operation.get("value"))
    return obj


def _status(code: int, reason: str, message: str) -> JsonObject:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


def _not_found(path: str) -> tuple[int, JsonObject]:
    return 404, _status(404, "NotFound", f"the server could not find the requested resource ({path})")


def _handler(api: FakeNodeApiServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: tests read ``api.requests``."""

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except json.JSONDecodeError:
                status, answer = 400, _status(400, "BadRequest", "body is not JSON")
            else:
                call = Request(self.command, parts.path, query, self.headers.get("Content-Type", ""), body, 0)
                status, answer = api.handle(call, self.headers.get("Authorization", ""))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

    return Handler
