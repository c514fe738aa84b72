"""The fake API server answers SelfSubjectAccessReview from its RBAC rules, as kube-apiserver does."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from simulator.fakeaccess import ACCESS_REVIEW_PATH
from simulator.fakeapiserver import FakeApiServer


def review(api: FakeApiServer, verb: str, resource: str) -> tuple[int, dict[str, Any]]:
    body = json.dumps({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                       "spec": {"resourceAttributes": {"verb": verb, "resource": resource}}}).encode()
    request = urllib.request.Request(api.url + ACCESS_REVIEW_PATH, data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, json.loads(response.read())


def test_chart_grants_and_a_forbidden_resource() -> None:
    with FakeApiServer() as api:
        status, answer = review(api, "watch", "pods")
        assert status == 201 and answer["status"]["allowed"] is True
        assert review(api, "delete", "pods")[1]["status"]["allowed"] is False
        assert review(api, "list", "secrets")[1]["status"]["allowed"] is False
        api.access.forbid("namespaces")
        assert review(api, "list", "namespaces")[1]["status"]["allowed"] is False
        assert api.request_count("create", ACCESS_REVIEW_PATH) == 4
