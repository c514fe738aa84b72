"""The remediator's (and ``report quota``'s) Kubernetes API writes, over the project's one client.

Only what the least-privilege role allows: read and patch nodes (and the node status, for our
condition), list the pods of a node, create Events, create pod evictions
(the drain), create GpuRepairRequests (the hand-off), create/read the
validation Job, and, with ``device_taints``, list ResourceSlices and write DeviceTaintRules. For
``report quota``: list ResourceQuotas and, with ``--apply``, apply them. Every call is one
``request`` of the client the exporter's watches use (``exporter.kube.apiserver``: the kubeconfig
or the pod's service account, the same TLS, token and ``User-Agent`` handling, the kubernetes package
only for a kubeconfig that needs it), and the answer is parsed as plain JSON.

Patches are dictionaries sent as ``application/strategic-merge-patch+json``. Failures come as the
client's one error type and retry policy (``exporter.kube.apiserver.call_with_retries``):

* transient (no connection, timeouts, 429, 500, 502, 503, 504): retried with jittered
  exponential backoff (``exporter.backoff``, honouring ``Retry-After``) up to ``attempts`` times,
  then raised as ``ApiError``;
* 409 Conflict: raised at once as ``ApiConflictError`` (a node changed under us: read it again; an
  Event that already exists: it was recorded before);
* anything else (403 missing RBAC, 404 no such node, 422 invalid): raised at once as ``ApiError``,
  its message the API server's ``Status`` message.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import quote

from exporter.backoff import BackoffPolicy
from exporter.kube.apiserver import (
    TRANSIENT_STATUSES,
    ApiConfigError,
    ApiConflictError,
    ApiError,
    CoreV1ListMethods,
    as_api_error,
    build_lists,
    call_with_retries,
    read_json,
    status_error,
)

__all__ = ["TRANSIENT_STATUSES", "ApiConflictError", "ApiError", "KubeApi", "classify", "load_core_api"]

REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read
FIELD_MANAGER = "gpu-pod-exporter-remediate"
DRA_GROUP = "resource.k8s.io"
REPAIR_GROUP, REPAIR_VERSION, REPAIR_PLURAL = "remediation.gpu-pod-exporter.io", "v1alpha1", "gpurepairrequests"
STRATEGIC_MERGE = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

JsonObject = dict[str, Any]
Query = Sequence[tuple[str, str]]

# The write path's pacing (exporter.backoff): windows of 0.5 s doubling to 20 s, one attempt in each.
WRITE_BACKOFF = BackoffPolicy(initial_s=0.5, max_s=20.0)
WRITE_ATTEMPTS = 5


def load_core_api(kubeconfig: str | None) -> CoreV1ListMethods:
    """The API client for ``kubeconfig``, or the pod's service account when None (``build_lists``; a
    kubeconfig with an exec plugin is the operator's own and may run it).

    Raises ``ApiError`` (status 0) with the reason when neither works.
    """
    try:
        return build_lists(kubeconfig or "", allow_exec=True)
    except (ApiConfigError, OSError, ValueError, TypeError) as exc:
        where = kubeconfig or "in-cluster service account"
        raise ApiError(0, f"cannot configure the Kubernetes client from {where}: {exc}") from None


def _name(value: str) -> str:
    return quote(value, safe="")


class KubeApi:
    """The remediator's calls as plain JSON, each one request of ``core`` (the client) under the retry policy."""

    def __init__(self, core: Any, backoff: BackoffPolicy = WRITE_BACKOFF, stop: threading.Event | None = None, *,
                 attempts: int = WRITE_ATTEMPTS, random_fraction: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.core = core
        self.backoff = backoff
        self.attempts = attempts
        self.stop = stop or threading.Event()
        self._random = random_fraction
        self._clock = clock

    # -- calls -------------------------------------------------------------------------------

    def get_node(self, name: str) -> JsonObject:
        return self._call("read node", "GET", f"/api/v1/nodes/{_name(name)}")

    def list_nodes(self) -> list[JsonObject]:
        return _items(self._call("list nodes", "GET", "/api/v1/nodes"))

    def patch_node(self, name: str, patch: JsonObject) -> JsonObject:
        return self._call("patch node", "PATCH", f"/api/v1/nodes/{_name(name)}", _MANAGED, body=patch,
                          content_type=STRATEGIC_MERGE)

    def patch_node_status(self, name: str, patch: JsonObject) -> JsonObject:
        return self._call("patch node status", "PATCH", f"/api/v1/nodes/{_name(name)}/status", _MANAGED,
                          body=patch, content_type=STRATEGIC_MERGE)

    def list_pods_on_node(self, node: str) -> list[JsonObject]:
        return _items(self._call("list pods", "GET", "/api/v1/pods", [("fieldSelector", f"spec.nodeName={node}")]))

    def evict_pod(self, namespace: str, name: str) -> JsonObject:
        """POST a ``policy/v1`` Eviction, one attempt: 429 (a PodDisruptionBudget would be violated) is paced
        by the caller's drain backoff (``exporter.backoff``), not retried here; 404: the pod is gone."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        path = f"/api/v1/namespaces/{_name(namespace)}/pods/{_name(name)}/eviction"
        try:
            return self._once("POST", path, _MANAGED, body=body, content_type=None)
        except ApiError as error:
            causes = _refusal_causes(error.body)
            if not causes:
                raise
            # kube-apiserver's 429 names the PodDisruptionBudget that refused in the Status' details.causes
            # ("The disruption budget trainer needs 2 healthy pods ..."): kept in the reason, which
            # ``remediate status`` shows, so the operator learns which budget blocks the drain.
            raise status_error(error.status, f"{error.detail} {' '.join(causes)}", error.body,
                               error.retry_after) from None

    def list_resource_slices(self, node: str | None = None) -> list[JsonObject]:
        """The node's ResourceSlices (resource.k8s.io/v1), or every one: which GPUs are published through DRA."""
        selector = [("fieldSelector", f"spec.nodeName={node}")] if node else []
        return _items(self._call("list resource slices", "GET", f"/apis/{DRA_GROUP}/v1/resourceslices", selector))

    def device_taint_rule_version(self, versions: tuple[str, ...]) -> str | None:
        """The first of ``versions`` in which the API server serves DeviceTaintRules (its discovery), or None.

        Kubernetes 1.36 serves them in v1beta2 only with ``--runtime-config`` and the
        ``DRADeviceTaintRules`` feature gate; without them a rule would be refused (or ignored), so the
        caller falls back to the node taint.
        """
        for version in versions:
            try:
                answer = self._call("discover resource.k8s.io", "GET", f"/apis/{DRA_GROUP}/{_name(version)}")
            except ApiError as exc:
                if exc.status == 404:
                    continue
                raise
            if any(item.get("name") == "devicetaintrules" for item in answer.get("resources") or []):
                return version
        return None

    def list_device_taint_rules(self, version: str, label_selector: str) -> list[JsonObject]:
        return _items(self._call("list device taint rules", "GET", _taint_rules(version),
                                 [("labelSelector", label_selector)]))

    def apply_device_taint_rule(self, version: str, body: JsonObject) -> JsonObject:
        """Server-side apply (ours alone: forced), so that writing the same rule again changes nothing."""
        return self._call("apply device taint rule", "PATCH",
                          f"{_taint_rules(version)}/{_name(body['metadata']['name'])}", [*_MANAGED, ("force", "true")],
                          body=body, content_type=APPLY_PATCH)

    def delete_device_taint_rule(self, version: str, name: str) -> None:
        """Delete a rule; one that is gone already (a person deleted it) is no error."""
        try:
            self._call("delete device taint rule", "DELETE", f"{_taint_rules(version)}/{_name(name)}")
        except ApiError as exc:
            if exc.status != 404:
                raise

    def list_resource_quotas(self) -> list[JsonObject]:
        """Every ResourceQuota of the cluster (``report quota`` reads their GPU keys)."""
        return _items(self._call("list resource quotas", "GET", "/api/v1/resourcequotas"))

    def apply_resource_quota(self, body: JsonObject, *, field_manager: str, dry_run: bool) -> JsonObject:
        """Server-side apply of a partial ResourceQuota (``report quota --apply``), forcing ownership of its keys.

        The body goes as JSON under ``application/apply-patch+yaml`` (JSON is YAML).
        ``dry_run``: the API server runs every stage (validation, admission, conflicts) and persists
        nothing (``dryRun=All``), the answer being the object as it would be.
        """
        metadata = body["metadata"]
        query = [("fieldManager", field_manager), ("force", "true"), *([("dryRun", "All")] if dry_run else [])]
        path = f"/api/v1/namespaces/{_name(metadata['namespace'])}/resourcequotas/{_name(metadata['name'])}"
        return self._call("apply resource quota", "PATCH", path, query, body=body, content_type=APPLY_PATCH)

    def create_repair_request(self, body: JsonObject) -> JsonObject:
        """Create a cluster-scoped ``GpuRepairRequest`` (exporter/remediate/repair.py); 409: it exists."""
        return self._call("create repair request", "POST", f"/apis/{REPAIR_GROUP}/{REPAIR_VERSION}/{REPAIR_PLURAL}",
                          _MANAGED, body=body)

    def create_job(self, namespace: str, body: JsonObject) -> JsonObject:
        return self._call("create job", "POST", f"/apis/batch/v1/namespaces/{_name(namespace)}/jobs", _MANAGED,
                          body=body)

    def get_job(self, namespace: str, name: str) -> JsonObject:
        return self._call("read job", "GET", f"/apis/batch/v1/namespaces/{_name(namespace)}/jobs/{_name(name)}")

    def create_event(self, namespace: str, event: JsonObject) -> JsonObject:
        return self._call("create event", "POST", f"/api/v1/namespaces/{_name(namespace)}/events", _MANAGED,
                          body=event)

    # -- one request, and the retry policy ---------------------------------------------------

    def _once(self, method: str, path: str, query: Query = (), *, body: Any = None,
              content_type: str | None = None) -> JsonObject:
        return _object(self._send(method, path, query, body=body, content_type=content_type))

    def _send(self, method: str, path: str, query: Query, *, body: Any, content_type: str | None) -> Any:
        try:
            return self.core.request(method, path, query, body=body, content_type=content_type,
                                     timeout=REQUEST_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - sorted by classify, then by the retry policy
            raise classify(exc) from None

    def _call(self, what: str, method: str, path: str, query: Query = (), *, body: Any = None,
              content_type: str | None = None) -> JsonObject:
        response = call_with_retries(
            what, lambda: self._send(method, path, query, body=body, content_type=content_type), self.backoff,
            attempts=self.attempts, stop=self.stop, random_fraction=self._random, clock=self._clock)
        return _object(response)  # an answer that is not JSON is not retried


def _object(response: Any) -> JsonObject:
    answer = read_json(response)
    if not isinstance(answer, dict):
        raise ApiError(0, "the API server answered something that is not a JSON object")
    return answer


_MANAGED: Query = (("fieldManager", FIELD_MANAGER),)


def _taint_rules(version: str) -> str:
    return f"/apis/{DRA_GROUP}/{_name(version)}/devicetaintrules"


def _items(answer: JsonObject) -> list[JsonObject]:
    return list(answer.get("items") or [])


def classify(exc: BaseException) -> ApiError:
    """Any exception of a request -> ``ApiError`` / ``ApiConflictError`` whose message is the API server's
    ``Status`` message when it sent one (what the remediator logs and records)."""
    error = as_api_error(exc)
    detail = error.detail
    if detail == error.reason:
        return error
    return type(error)(error.status, detail, error.body, error.retry_after)


def _refusal_causes(body: bytes) -> list[str]:
    """The messages of a ``Status`` answer's ``details.causes`` (empty when it has none or is not JSON)."""
    try:
        details = json.loads(body or b"{}").get("details") or {}
        return [str(cause["message"]) for cause in details.get("causes") or [] if cause.get("message")]
    except (TypeError, ValueError, AttributeError, KeyError):
        return []
