"""RBAC for the fake API server: what the simulated identity may do, and SelfSubjectAccessReview answers.

The simulated identity is the exporter's service account with the chart's ClusterRole (get, list
and watch on pods and namespaces; with ``kubernetesDRA.enabled`` also on ``resourceslices`` of API
group ``resource.k8s.io``, which ``grant`` adds). Resources of another group than the core one are
keyed ``<resource>.<group>`` (``resourceslices.resource.k8s.io``), as kubectl writes them. A
scenario or a test can take a resource away (``forbid``): list and watch requests for it then get
the 403 a real API server sends, and a ``SelfSubjectAccessReview`` (``POST
/apis/authorization.k8s.io/v1/selfsubjectaccessreviews``, which ``gpu-pod-exporter doctor`` sends)
answers ``allowed: false`` for it, as kube-apiserver does.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from typing import Any

ACCESS_REVIEW_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
SERVICE_ACCOUNT = "system:serviceaccount:gpu-monitoring:gpu-pod-exporter"
CHART_GRANTS: Mapping[str, frozenset[str]] = {  # core-group resource -> verbs (deploy/helm .../clusterrole.yaml)
    "pods": frozenset({"get", "list", "watch"}),
    "namespaces": frozenset({"get", "list", "watch"}),
}
DRA_GRANTS: Mapping[str, frozenset[str]] = {  # what the chart adds with kubernetesDRA.enabled
    "resourceslices.resource.k8s.io": frozenset({"get", "list", "watch"}),
}


def qualified(resource: str, group: str = "") -> str:
    """``pods`` for the core group, ``resourceslices.resource.k8s.io`` for another."""
    return f"{resource}.{group}" if group else resource


class AccessRules:
    """Thread-safe grants of the simulated identity, keyed by ``qualified`` resource names."""

    def __init__(self, grants: Mapping[str, Iterable[str]] = CHART_GRANTS) -> None:
        self._lock = threading.Lock()
        self._grants = {resource: frozenset(verbs) for resource, verbs in grants.items()}

    def forbid(self, resource: str, group: str = "") -> None:
        """Take every verb on ``resource`` away (a ClusterRole that lacks it)."""
        with self._lock:
            self._grants.pop(qualified(resource, group), None)

    def grant(self, grants: Mapping[str, Iterable[str]]) -> None:
        """Add grants (``qualified`` names -> verbs), e.g. ``DRA_GRANTS``."""
        with self._lock:
            for resource, verbs in grants.items():
                self._grants[resource] = self._grants.get(resource, frozenset()) | frozenset(verbs)

    def allows(self, verb: str, resource: str, group: str = "") -> bool:
        with self._lock:
            return verb in self._grants.get(qualified(resource, group), frozenset())

    def forbidden_status(self, verb: str, resource: str, group: str = "") -> dict[str, Any]:
        """The Status body kube-apiserver sends with a 403."""
        message = (f'{qualified(resource, group)} is forbidden: User "{SERVICE_ACCOUNT}" cannot {verb} resource '
                   f'"{resource}" in API group "{group}" at the cluster scope')
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
                "reason": "Forbidden", "details": {"kind": resource}, "code": 403}

    def review(self, body: bytes) -> tuple[int, dict[str, Any]]:
        """Answer a SelfSubjectAccessReview: (HTTP status, response object)."""
        try:
            request = json.loads(body or b"{}")
            attributes = request["spec"]["resourceAttributes"]
            verb = str(attributes["verb"])
            resource = str(attributes["resource"])
            group = str(attributes.get("group") or "")
        except (ValueError, KeyError, TypeError):
            return 400, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": "SelfSubjectAccessReview needs spec.resourceAttributes.verb and .resource",
                         "reason": "BadRequest", "code": 400}
        allowed = self.allows(verb, resource, group)
        status: dict[str, Any] = {"allowed": allowed}
        if allowed:
            status["reason"] = 'RBAC: allowed by ClusterRoleBinding "gpu-pod-exporter"'
        return 201, {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                     "metadata": {"creationTimestamp": None},
                     "spec": {"resourceAttributes": attributes}, "status": status}
