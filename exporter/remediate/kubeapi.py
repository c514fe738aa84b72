"""The remediator's Kubernetes API access, through the official ``kubernetes`` client.

Only what the least-privilege role allows: read and patch nodes (and the node status, for our
condition), list the pods of a node, create Events, create pod evictions
(the drain), create GpuRepairRequests (the hand-off), create/read the
validation Job, and, with ``device_taints``, list ResourceSlices and write DeviceTaintRules. For
``report quota``: list ResourceQuotas and, with ``--apply``, apply them. Every call goes through ``CoreV1Api`` with
``_preload_content=False`` and the answer is parsed as plain JSON, so the code behaves the same
on the client's old (<= 30) and new (pydantic) generations and never fails on a field the model
does not know.

Patches are dictionaries, which both client generations send as
``application/strategic-merge-patch+json``. Failures are sorted so that the caller can act:

* transient (no connection, timeouts, 429, 500, 502, 503, 504): retried here with jittered
  exponential backoff (``exporter.backoff``, honouring ``Retry-After``) up to ``attempts`` times,
  then raised as ``ApiError``;
* 409 Conflict: raised at once as ``ApiConflictError`` (a node changed under us: read it again; an
  Event that already exists: it was recorded before);
* anything else (403 missing RBAC, 404 no such node, 422 invalid): raised at once as ``ApiError``.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import time
from collections.abc import Callable
from typing import Any

from exporter.backoff import Backoff, BackoffPolicy
from exporter.logs import get_logger

log = get_logger("remediate.kubeapi")

TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read
FIELD_MANAGER = "gpu-pod-exporter-remediate"
DRA_GROUP = "resource.k8s.io"
REPAIR_GROUP, REPAIR_VERSION, REPAIR_PLURAL = "remediation.gpu-pod-exporter.io", "v1alpha1", "gpurepairrequests"

JsonObject = dict[str, Any]


class ApiError(Exception):
    """A call failed; ``status`` is the HTTP status (0: no answer)."""

    def __init__(self, status: int, message: str, retry_after_s: float | None = None) -> None:
        super().__init__(f"({status}) {message}" if status else message)
        self.status = status
        self.message = message
        self.retry_after_s = retry_after_s  # the server's Retry-After (429, 503), seconds


class ApiConflictError(ApiError):
    """409: the object changed since it was read, or (for a create) it exists already."""


# The write path's pacing (exporter.backoff): windows of 0.5 s doubling to 20 s, one attempt in each.
WRITE_BACKOFF = BackoffPolicy(initial_s=0.5, max_s=20.0)
WRITE_ATTEMPTS = 5


def load_core_api(kubeconfig: str | None) -> Any:
    """A ``CoreV1Api`` for ``kubeconfig``, or the pod's service account when None.

    Raises ``ApiError`` (status 0) with the reason when neither works.
    """
    from kubernetes import client, config  # noqa: PLC0415 - the exporter never imports the client
    from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415

    try:
        if kubeconfig:
            api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        else:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            api_client = client.ApiClient(configuration)
    except (ConfigException, OSError, ValueError, TypeError) as exc:
        where = kubeconfig or "in-cluster service account"
        raise ApiError(0, f"cannot configure the Kubernetes client from {where}: {exc}") from None
    return client.CoreV1Api(api_client)


class KubeApi:
    """Plain-JSON wrappers over ``CoreV1Api`` with the retry policy above."""

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
        return self._call("read node", lambda: self.core.read_node(name, **_options()))

    def list_nodes(self) -> list[JsonObject]:
        answer = self._call("list nodes", lambda: self.core.list_node(**_options()))
        return list(answer.get("items") or [])

    def patch_node(self, name: str, patch: JsonObject) -> JsonObject:
        return self._call("patch node", lambda: self.core.patch_node(
            name, patch, field_manager=FIELD_MANAGER, **_options()))

    def patch_node_status(self, name: str, patch: JsonObject) -> JsonObject:
        return self._call("patch node status", lambda: self.core.patch_node_status(
            name, patch, field_manager=FIELD_MANAGER, **_options()))

    def list_pods_on_node(self, node: str) -> list[JsonObject]:
        answer = self._call("list pods", lambda: self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={node}", **_options()))
        return list(answer.get("items") or [])

    def evict_pod(self, namespace: str, name: str) -> JsonObject:
        """POST a ``policy/v1`` Eviction, one attempt: 429 (a PodDisruptionBudget would be violated) is paced
        by the caller's drain backoff (``exporter.backoff``), not retried here; 404: the pod is gone."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            response = self.core.create_namespaced_pod_eviction(name, namespace, body, field_manager=FIELD_MANAGER,
                                                                **_options())
        except Exception as exc:  # noqa: BLE001 - sorted by classify
            raise classify(exc) from None
        return _json(response)

    def list_resource_slices(self, node: str | None = None) -> list[JsonObject]:
        """The node's ResourceSlices (resource.k8s.io/v1), or every one: which GPUs are published through DRA."""
        selector = {"field_selector": f"spec.nodeName={node}"} if node else {}
        answer = self._call("list resource slices", lambda: self._custom().list_cluster_custom_object(
            DRA_GROUP, "v1", "resourceslices", **selector, **_options()))
        return list(answer.get("items") or [])

    def device_taint_rule_version(self, versions: tuple[str, ...]) -> str | None:
        """The first of ``versions`` in which the API server serves DeviceTaintRules (its discovery), or None.

        Kubernetes 1.36 serves them in v1beta2 only with ``--runtime-config`` and the
        ``DRADeviceTaintRules`` feature gate; without them a rule would be refused (or ignored), so the
        caller falls back to the node taint.
        """
        def discover(version: str) -> Callable[[], Any]:
            return lambda: self._custom().get_api_resources(DRA_GROUP, version, **_options())

        for version in versions:
            try:
                answer = self._call("discover resource.k8s.io", discover(version))
            except ApiError as exc:
                if exc.status == 404:
                    continue
                raise
            if any(item.get("name") == "devicetaintrules" for item in answer.get("resources") or []):
                return version
        return None

    def list_device_taint_rules(self, version: str, label_selector: str) -> list[JsonObject]:
        answer = self._call("list device taint rules", lambda: self._custom().list_cluster_custom_object(
            DRA_GROUP, version, "devicetaintrules", label_selector=label_selector, **_options()))
        return list(answer.get("items") or [])

    def apply_device_taint_rule(self, version: str, body: JsonObject) -> JsonObject:
        """Server-side apply (ours alone: forced), so that writing the same rule again changes nothing."""
        return self._call("apply device taint rule", lambda: self._custom().patch_cluster_custom_object(
            DRA_GROUP, version, "devicetaintrules", body["metadata"]["name"], body, field_manager=FIELD_MANAGER,
            force=True, _content_type="application/apply-patch+yaml", **_options()))

    def delete_device_taint_rule(self, version: str, name: str) -> None:
        """Delete a rule; one that is gone already (a person deleted it) is no error."""
        try:
            self._call("delete device taint rule", lambda: self._custom().delete_cluster_custom_object(
                DRA_GROUP, version, "devicetaintrules", name, **_options()))
        except ApiError as exc:
            if exc.status != 404:
                raise

    def list_resource_quotas(self) -> list[JsonObject]:
        """Every ResourceQuota of the cluster (``report quota`` reads their GPU keys)."""
        answer = self._call("list resource quotas", lambda: self.core.list_resource_quota_for_all_namespaces(
            **_options()))
        return list(answer.get("items") or [])

    def apply_resource_quota(self, body: JsonObject, *, field_manager: str, dry_run: bool) -> JsonObject:
        """Server-side apply of a partial ResourceQuota (``report quota --apply``), forcing ownership of its keys.

        The body stays a dict: both client generations serialize it as JSON for
        ``application/apply-patch+yaml`` (kubernetes 30.1.0, the floor, names that content type in its
        rest.py; the pydantic generation accepts only a dict or a model as the body).

        ``dry_run``: the API server runs every stage (validation, admission, conflicts) and persists
        nothing (``dryRun=All``), the answer being the object as it would be.
        """
        metadata = body["metadata"]
        extra: dict[str, Any] = {"dry_run": "All"} if dry_run else {}
        return self._call("apply resource quota", lambda: self.core.patch_namespaced_resource_quota(
            metadata["name"], metadata["namespace"], body, field_manager=field_manager, force=True,
            _content_type="application/apply-patch+yaml", **extra, **_options()))

    def create_repair_request(self, body: JsonObject) -> JsonObject:
        """Create a cluster-scoped ``GpuRepairRequest`` (exporter/remediate/repair.py); 409: it exists."""
        return self._call("create repair request", lambda: self._custom().create_cluster_custom_object(
            REPAIR_GROUP, REPAIR_VERSION, REPAIR_PLURAL, body, field_manager=FIELD_MANAGER, **_options()))

    def create_job(self, namespace: str, body: JsonObject) -> JsonObject:
        return self._call("create job", lambda: self._batch().create_namespaced_job(
            namespace, body, field_manager=FIELD_MANAGER, **_options()))

    def get_job(self, namespace: str, name: str) -> JsonObject:
        return self._call("read job", lambda: self._batch().read_namespaced_job(name, namespace, **_options()))

    def _custom(self) -> Any:
        from kubernetes import client  # noqa: PLC0415 - the exporter never imports the client
        return client.CustomObjectsApi(self.core.api_client)

    def _batch(self) -> Any:
        from kubernetes import client  # noqa: PLC0415
        return client.BatchV1Api(self.core.api_client)

    def create_event(self, namespace: str, event: JsonObject) -> JsonObject:
        return self._call("create event", lambda: self.core.create_namespaced_event(
            namespace, event, field_manager=FIELD_MANAGER, **_options()))

    # -- retry policy ------------------------------------------------------------------------

    def _call(self, what: str, request: Callable[[], Any]) -> JsonObject:
        attempt = 0
        backoff = Backoff(self.backoff, self._random)
        while True:
            try:
                response = request()
            except Exception as exc:  # noqa: BLE001 - sorted right below; nothing else escapes
                error = classify(exc)
            else:
                return _json(response)  # an answer that is not JSON is not retried
            if isinstance(error, ApiConflictError) or error.status not in TRANSIENT_STATUSES | {0}:
                raise error
            attempt += 1
            if attempt >= self.attempts:
                raise ApiError(error.status, f"{what}: giving up after {attempt} attempts: {error.message}")
            delay = backoff.failed(self._clock(), error.retry_after_s)
            log.debug("retrying", extra={"fields": {"call": what, "attempt": attempt, "delay_s": round(delay, 2),
                                                     "error": str(error)}})
            if self.stop.wait(delay):
                raise ApiError(error.status, f"{what}: stopped while retrying: {error.message}")

    def evict_pod_explained(self, namespace: str, name: str) -> JsonObject:
        """``evict_pod``, with the refusal's causes in the error: kube-apiserver's 429 carries, in the Status
        ``details.causes`` (type ``DisruptionBudget``), the PodDisruptionBudget that refused ("The disruption
        budget trainer needs 2 healthy pods and has 2 currently"), which ``remediate status`` shows by name."""
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            response = self.core.create_namespaced_pod_eviction(name, namespace, body, field_manager=FIELD_MANAGER,
                                                                **_options())
        except Exception as exc:  # noqa: BLE001 - sorted by classify
            error = classify(exc)
            causes: list[str] = []
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                details = json.loads(getattr(exc, "body", None) or "{}").get("details") or {}
                causes = [str(c.get("message")) for c in details.get("causes") or [] if c.get("message")]
            if causes:
                error = type(error)(error.status, f"{error.message} {' '.join(causes)}", error.retry_after_s)
            raise error from None
        return _json(response)


def _options() -> dict[str, Any]:
    return {"_preload_content": False, "_request_timeout": REQUEST_TIMEOUT}


def _json(response: Any) -> JsonObject:
    data = getattr(response, "data", response)
    if isinstance(data, bytes | bytearray):
        try:
            decoded = json.loads(data or b"{}")
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ApiError(0, f"the API server answered something that is not JSON: {exc}") from None
    else:
        decoded = data
    if not isinstance(decoded, dict):
        raise ApiError(0, "the API server answered something that is not a JSON object")
    return decoded


def classify(exc: BaseException) -> ApiError:
    """Any exception from the client -> ``ApiError`` / ``ApiConflictError`` with a readable message."""
    if isinstance(exc, ApiError):
        return exc
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        message = getattr(exc, "reason", "") or ""
        body = getattr(exc, "body", None)
        if body:
            with contextlib.suppress(TypeError, ValueError, AttributeError):
                message = json.loads(body).get("message") or message
        return (ApiConflictError if status == 409 else ApiError)(status, str(message) or type(exc).__name__,
                                                                 _retry_after(getattr(exc, "headers", None)))
    return ApiError(0, f"{type(exc).__name__}: {exc}")


def _retry_after(headers: Any) -> float | None:
    """Seconds of a ``Retry-After: N`` header (the API server sends whole seconds), else None."""
    value = headers.get("Retry-After") if headers is not None and hasattr(headers, "get") else None
    try:
        seconds = float(value) if value is not None else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and 0 <= seconds < float("inf") else None
