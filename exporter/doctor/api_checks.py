"""The Kubernetes API server: reachable, how the exporter authenticates, RBAC, and the node name.

The connection is the exporter's own (``exporter.kube.apiserver.build_lists``: in-cluster service
account or the kubeconfig, same TLS and credentials, the one client's ``request``); the doctor adds
only a POST for ``SelfSubjectAccessReview``, which asks the API server whether *these* credentials may do each
thing the exporter needs. Any authenticated identity may create one (``system:basic-user``), so it
answers even when the exporter's own RBAC is missing, and it names the missing verb precisely
where a failing watch only says 403.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.config import Config
from exporter.doctor.deadline import run_with_deadline
from exporter.doctor.report import Row, degraded, failed, ok, skipped
from exporter.kube.apiserver import ApiError, CoreV1ListMethods, HttpLists, build_lists, read_json
from exporter.kube.metadata import describe_api_error
from exporter.kube.resourceslices import API_GROUP as DRA_GROUP
from exporter.kube.resourceslices import RESOURCE as DRA_RESOURCE

SECTION = "kubernetes api"
ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
# What the exporter's watches do (exporter.kube.metadata): list + watch of pods on its node, of namespaces.
REQUIRED_ACCESS: tuple[tuple[str, str], ...] = (("list", "pods"), ("watch", "pods"),
                                                ("list", "namespaces"), ("watch", "namespaces"))


def required_access(config: Config) -> list[dict[str, str]]:
    """SelfSubjectAccessReview resource attributes for every request this configuration makes."""
    wanted = [{"verb": verb, "resource": resource, "group": ""} for verb, resource in REQUIRED_ACCESS]
    if config.kubernetes_enable_dra:  # this node's ResourceSlices (exporter.kube.resourceslices)
        wanted += [{"verb": verb, "resource": DRA_RESOURCE, "group": DRA_GROUP} for verb in ("list", "watch")]
    if config.configmap_data is not None:  # -m namespace:name: the counters CSV is read from that ConfigMap
        configmap = config.configmap_data
        wanted.append({"verb": "get", "resource": "configmaps", "group": "", "namespace": configmap.namespace,
                       "name": configmap.name})
    return wanted

CONFIG_HINT = ("in a pod: give it a ServiceAccount with automountServiceAccountToken: true (the chart does); "
               "outside the cluster: --kubeconfig (KUBECONFIG)")
UNREACHABLE_HINT = ("the API server cannot be reached from here: check egress NetworkPolicies to the API server and "
                    "KUBERNETES_SERVICE_HOST/_PORT (or the kubeconfig's server)")
AUTH_HINT = ("the API server rejects these credentials: an expired or foreign token (recreate the pod to refresh "
             "its token) or a kubeconfig for another cluster")
RBAC_HINT = ("the exporter's ClusterRole must allow get, list and watch on pods and namespaces, bound to its "
             "ServiceAccount (the chart's rbac.create: true does it)")
CONFIGMAP_RBAC_HINT = ("with -m the exporter reads its counters from that ConfigMap: it needs get on it (the chart "
                       "creates a Role and RoleBinding in the ConfigMap's namespace when -m is in its args or env)")
DRA_RBAC_HINT = ("with --kubernetes-enable-dra the exporter watches this node's ResourceSlices: its ClusterRole needs "
                 "get, list and watch on resourceslices in API group resource.k8s.io (the chart's "
                 "kubernetesDRA.enabled: true grants it)")
NODE_HINT = "set NODE_NAME from the downward API (fieldRef spec.nodeName), as the chart does"


@dataclass(frozen=True)
class _Answer:
    status: int
    body: Any


def _ask(lists: CoreV1ListMethods, timeout_s: float, method: str, path: str, body: Any = None) -> _Answer:
    """One request of the exporter's own API client, one attempt: an answer of any status comes back as
    ``_Answer`` (the rows tell 403 from 404); no answer raises, as a list does."""
    try:
        response = lists.request(method, path, body=body, timeout=(timeout_s, timeout_s))
    except ApiError as exc:
        if not exc.status:
            raise
        return _Answer(exc.status, _json(exc.body))
    try:
        return _Answer(response.status, read_json(response))
    except ApiError:  # not JSON: the rows say "cannot tell"
        return _Answer(response.status, None)


def _json(data: bytes) -> Any:
    try:
        return json.loads(data or b"null")
    except ValueError:
        return None


def describe_auth(lists: Any) -> str:
    if isinstance(lists, HttpLists):
        endpoint = lists.endpoint
        if endpoint.token_file:
            how = f"bearer token from {endpoint.token_file}"
        elif endpoint.token:
            how = "bearer token"
        elif endpoint.client_cert_pem is not None:
            how = "client certificate"
        elif endpoint.basic_auth:
            how = "basic auth"
        else:
            how = "no credentials (anonymous)"
        return f"{endpoint.server} as {endpoint.source}, {how}"
    return "a kubeconfig only the kubernetes package can use (exec plugin, auth provider or proxy)"


def check_api(config: Config, timeout_s: float) -> list[Row]:
    if not config.kubernetes:
        return [skipped(SECTION, "connection", "Kubernetes attribution is off: the API server is not used")]
    built = run_with_deadline(lambda: build_lists(config.kubeconfig), timeout_s, "doctor-api-config")
    if not built.finished or built.error is not None:
        error = str(built.error) if built.error is not None else f"not ready within {timeout_s:g} s"
        return [failed(SECTION, "connection", f"not configured: {error}", CONFIG_HINT)]
    lists = built.value
    assert lists is not None  # finished without an error
    rows = [ok(SECTION, "authentication", describe_auth(lists))]
    node = config.node_name or socket.gethostname()
    listed = run_with_deadline(lambda: _pods_on_node(lists, node, timeout_s), timeout_s + 1.0, "doctor-api-list")
    if not listed.finished:
        rows.append(failed(SECTION, "connection", f"listing pods did not answer within {timeout_s:g} s",
                           UNREACHABLE_HINT))
        return rows
    pods: int | None = None
    if listed.error is not None:
        rows.append(_request_failed("connection", "pods", listed.error))
        if getattr(listed.error, "status", None) != 403:  # unreachable or unauthenticated: nothing more to ask
            rows.append(skipped(SECTION, "access", "not checked: the API server did not accept a request"))
            return rows
    else:
        pods = listed.value
        rows.append(ok(SECTION, "connection", f"reachable: lists {pods} pods on node {node}", pods=pods))
    rows.extend(_access_rows(lists, required_access(config), timeout_s))
    rows.append(_node_row(node, from_node_name=bool(config.node_name), pods=pods, lists=lists, timeout_s=timeout_s))
    return rows


def _pods_on_node(lists: Any, node: str, timeout_s: float) -> int:
    response = lists.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}",
                                                 _request_timeout=(timeout_s, timeout_s))
    body = read_json(response)
    return len(body.get("items") or ()) if isinstance(body, dict) else 0


def _request_failed(check: str, resource: str, error: BaseException) -> Row:
    kind, message = describe_api_error(resource, error)
    status = getattr(error, "status", None)
    if status == 401:
        return failed(SECTION, check, message, AUTH_HINT, status=status)
    if status == 403:
        return failed(SECTION, check, message, RBAC_HINT, status=status)
    if kind in ("unreachable", "timeout"):
        return failed(SECTION, check, message, UNREACHABLE_HINT)
    return failed(SECTION, check, message, "the API server answered with an error; see its message", kind=kind)


def _access_rows(lists: CoreV1ListMethods, wanted: list[dict[str, str]], timeout_s: float) -> list[Row]:
    rows: list[Row] = []
    for attributes in wanted:
        where = f" {attributes['namespace']}/{attributes['name']}" if "name" in attributes else ""
        check = f"access {attributes['verb']} {attributes['resource']}{where}"
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                  "spec": {"resourceAttributes": attributes}}
        answered = run_with_deadline(_call(lists, timeout_s, "POST", ACCESS_REVIEW_PATH, review), timeout_s + 1.0,
                                     "doctor-api-access")
        if not answered.finished:
            rows.append(failed(SECTION, check, f"SelfSubjectAccessReview did not answer within {timeout_s:g} s",
                               UNREACHABLE_HINT))
            return rows
        if answered.error is not None:
            rows.append(_request_failed(check, "selfsubjectaccessreviews", answered.error))
            return rows
        answer = answered.value
        assert answer is not None
        status = answer.body.get("status", {}) if isinstance(answer.body, dict) else {}
        if answer.status >= 300 or not isinstance(status, dict):
            rows.append(degraded(SECTION, check, f"SelfSubjectAccessReview answered HTTP {answer.status}: cannot "
                                 "tell", "see the connection row; the API server may not serve "
                                 "authorization.k8s.io/v1", status=answer.status))
            continue
        if status.get("allowed"):
            rows.append(ok(SECTION, check, f"allowed{_reason(status)}", allowed=True))
        else:
            hints = {"configmaps": CONFIGMAP_RBAC_HINT, DRA_RESOURCE: DRA_RBAC_HINT}
            hint = hints.get(attributes["resource"], RBAC_HINT)
            rows.append(failed(SECTION, check, f"denied{_reason(status)}", hint, allowed=False))
    return rows


def _reason(status: dict[str, Any]) -> str:
    reason = str(status.get("reason") or status.get("evaluationError") or "")
    return f" ({reason})" if reason else ""


def _call(lists: CoreV1ListMethods, timeout_s: float, method: str, path: str, body: Any = None
          ) -> Callable[[], _Answer]:
    return lambda: _ask(lists, timeout_s, method, path, body)


def _node_row(node: str, *, from_node_name: bool, pods: int | None, lists: CoreV1ListMethods, timeout_s: float
              ) -> Row:
    """Whether ``node`` (NODE_NAME, or else the hostname: ``from_node_name`` says which) names this node."""
    data = {"node": node, "from": "NODE_NAME" if from_node_name else "hostname"}
    if not from_node_name:
        unset = (f"NODE_NAME is not set: the pod watch uses this machine's hostname {node!r}, which differs from "
                 "the node name on many clouds")
        if pods:
            return degraded(SECTION, "node", f"{unset}; {pods} pods found there", NODE_HINT, **data)
        return failed(SECTION, "node", f"{unset}; no pod is on a node of that name", NODE_HINT, **data)
    if pods:
        return ok(SECTION, "node", f"node {node} has {pods} pods (NODE_NAME)", **data)
    if pods is None:
        return skipped(SECTION, "node", f"not checked: listing pods on {node} failed", **data)
    answered = run_with_deadline(_call(lists, timeout_s, "GET", f"/api/v1/nodes/{node}"), timeout_s + 1.0,
                                 "doctor-api-node")
    status = answered.value.status if answered.finished and answered.value is not None else 0
    if status == 404:
        return failed(SECTION, "node", f"there is no Node named {node!r}", NODE_HINT, **data)
    if status == 200:
        return degraded(SECTION, "node", f"Node {node} exists but no pod runs on it (not even this exporter's)",
                        "run the doctor inside the exporter pod (kubectl exec ... -- gpu-pod-exporter doctor) or "
                        f"check NODE_NAME; {NODE_HINT}", **data)
    return degraded(SECTION, "node", f"no pod is on node {node!r}, and the Node cannot be read (HTTP {status or '-'})",
                    f"check NODE_NAME; {NODE_HINT}", **data)
