"""The identities the chart creates, asked of the real API server (SelfSubjectAccessReview with each
ServiceAccount's own token, never admin): every call the exporter, the remediator and ``doctor``
make is allowed, and what they do not need is forbidden. The test prints the matrix (it is in
docs/testing.md).

``doctor`` runs inside the exporter's pod (``kubectl exec ... -- gpu-pod-exporter doctor``), so it
has the exporter's identity; the calls it adds are the reviews themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devcluster.api import Api, ApiError
from simulator.fakeaccess import DRA_GRANTS, AccessRules
from simulator.fakeaccess import SERVICE_ACCOUNT as FAKE_ACCOUNT
from tests.deploy.chart_support import CHART_DIR
from tests.platform.support import poll

NAMESPACE = "gpu-monitoring-rbac"
RELEASE = "rbac"

# (verb, resource, group, namespace, subresource) -> allowed?; "" namespace = cluster-wide.
Access = tuple[str, str, str, str, str]

EXPORTER: dict[Access, bool] = {
    # the pod watch (this node's pods, by field selector: RBAC sees list/watch of pods) and namespaces
    ("list", "pods", "", "", ""): True,
    ("watch", "pods", "", "", ""): True,
    ("list", "namespaces", "", "", ""): True,
    ("watch", "namespaces", "", "", ""): True,
    # kubernetesDRA.enabled: this node's ResourceSlices
    ("list", "resourceslices", "resource.k8s.io", "", ""): True,
    ("watch", "resourceslices", "resource.k8s.io", "", ""): True,
    # doctor's own call (always allowed to any authenticated identity)
    ("create", "selfsubjectaccessreviews", "authorization.k8s.io", "", ""): True,
    # not needed
    ("list", "secrets", "", "", ""): False,
    ("get", "secrets", "", NAMESPACE, ""): False,
    ("patch", "pods", "", "default", ""): False,
    ("delete", "pods", "", "default", ""): False,
    ("create", "pods", "", "default", "exec"): False,
    ("create", "pods", "", "default", "eviction"): False,
    ("watch", "nodes", "", "", ""): False,
    ("list", "nodes", "", "", ""): False,
    ("patch", "nodes", "", "", ""): False,
    ("list", "configmaps", "", "", ""): False,
    ("list", "resourceclaims", "resource.k8s.io", "", ""): False,
    ("create", "serviceaccounts", "", NAMESPACE, "token"): False,
    ("create", "clusterrolebindings", "rbac.authorization.k8s.io", "", ""): False,
    ("list", "daemonsets", "apps", "", ""): False,
}

REMEDIATOR: dict[Access, bool] = {
    ("get", "nodes", "", "", ""): True,
    ("list", "nodes", "", "", ""): True,
    ("patch", "nodes", "", "", ""): True,  # taint, annotation, opt-in cordon
    ("patch", "nodes", "", "", "status"): True,  # the UnhealthyGPU condition
    ("list", "pods", "", "", ""): True,  # the pods of a node (Events on them)
    ("create", "events", "", "default", ""): True,
    # not needed
    ("delete", "nodes", "", "", ""): False,
    ("update", "nodes", "", "", ""): False,
    ("delete", "pods", "", "default", ""): False,
    ("create", "pods", "", "default", "eviction"): False,
    ("patch", "pods", "", "default", ""): False,
    ("list", "secrets", "", "", ""): False,
    ("get", "secrets", "", NAMESPACE, ""): False,
    ("list", "configmaps", "", "", ""): False,
    ("create", "clusterrolebindings", "rbac.authorization.k8s.io", "", ""): False,
    # per-GPU quarantine is opt-in (remediation.deviceTaints.enabled): no DRA rights by default
    ("create", "devicetaintrules", "resource.k8s.io", "", ""): False,
    ("list", "resourceslices", "resource.k8s.io", "", ""): False,
}


def review(api: Api, access: Access) -> bool:
    verb, resource, group, namespace, subresource = access
    attributes = {"verb": verb, "resource": resource, "group": group}
    if namespace:
        attributes["namespace"] = namespace
    if subresource:
        attributes["subresource"] = subresource
    answer = api.create("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes}})
    return bool(answer["status"].get("allowed"))


def describe(access: Access) -> str:
    verb, resource, group, namespace, subresource = access
    target = f"{group + '/' if group else ''}{resource}{'/' + subresource if subresource else ''}"
    return f"{verb} {target} ({'namespace ' + namespace if namespace else 'cluster-wide'})"


@pytest.fixture(scope="module")
def release(admin: Api, helm: Callable[..., Any]) -> Iterator[dict[str, str]]:
    """The chart with remediation and DRA on (every identity and rule it can create)."""
    helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace",
         "-f", str(CHART_DIR / "ci" / "remediation-values.yaml"), "--set", "kubernetesDRA.enabled=true")
    accounts = {sa["metadata"]["name"] for sa in admin.get(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts?labelSelector=app.kubernetes.io/instance={RELEASE}")["items"]}
    exporter = next(n for n in accounts if not n.endswith("remediate"))
    remediator = next(n for n in accounts if n.endswith("remediate"))
    try:
        yield {"exporter": exporter, "remediator": remediator}
    finally:
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
        poll("release pods gone", lambda: not admin.get(
            f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io/instance={RELEASE}")["items"],
            deadline_s=180)


def test_each_identity_may_make_exactly_the_calls_it_needs(admin: Api, release: dict[str, str],
                                                             sa_token: Callable[..., str]) -> None:
    rows = []
    wrong = []
    for identity, matrix in (("exporter (and doctor)", EXPORTER), ("remediator", REMEDIATOR)):
        account = release["exporter" if identity.startswith("exporter") else "remediator"]
        api = admin.as_token(sa_token(NAMESPACE, account))
        for access, expected in matrix.items():
            allowed = review(api, access)
            rows.append(f"| {identity} `{account}` | {describe(access)} | {'allowed' if allowed else 'forbidden'} |")
            if allowed != expected:
                wrong.append(f"{identity}: {describe(access)} is {'allowed' if allowed else 'forbidden'}")
    print("\nRBAC matrix (SelfSubjectAccessReview, each ServiceAccount's own token):\n"
          "| identity | call | API server says |\n|---|---|---|\n" + "\n".join(rows))
    assert not wrong, wrong


def test_the_exporter_token_makes_its_real_calls_and_no_others(admin: Api, release: dict[str, str],
                                                                sa_token: Callable[..., str]) -> None:
    api = admin.as_token(sa_token(NAMESPACE, release["exporter"]))
    pods = api.get("/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-operator")
    assert all(p["spec"]["nodeName"] == "gpu-operator" for p in pods["items"])
    assert api.get("/api/v1/namespaces?limit=1")["kind"] == "NamespaceList"
    assert api.get("/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dgpu-operator")["kind"] \
        == "ResourceSliceList"
    for path in ("/api/v1/secrets", f"/api/v1/namespaces/{NAMESPACE}/secrets", "/api/v1/nodes"):
        with pytest.raises(ApiError) as denied:
            api.get(path)
        assert denied.value.status == 403, path


def test_the_fake_api_servers_rbac_answers_as_the_real_one(admin: Api, release: dict[str, str],
                                                           sa_token: Callable[..., str]) -> None:
    """simulator/fakeaccess.py (the --simulate API server's RBAC, doctor's tests) says what the
    real API server says for the chart's exporter identity (DRA on): the same allowed/forbidden per
    call, and the same 403 Status for a forbidden list."""
    fake = AccessRules()
    fake.grant(DRA_GRANTS)
    api = admin.as_token(sa_token(NAMESPACE, release["exporter"]))
    differ = []
    for access in EXPORTER:
        verb, resource, group, namespace, subresource = access
        if resource == "selfsubjectaccessreviews" or namespace or subresource:
            continue  # the fake models cluster-scoped grants of resources only; SSAR it always serves
        if fake.allows(verb, resource, group) != review(api, access):
            differ.append(describe(access))
    assert not differ, differ
    account = f"system:serviceaccount:{NAMESPACE}:{release['exporter']}"
    for resource, group, path in (("secrets", "", "/api/v1/secrets"),
                                  ("nodes", "", "/api/v1/nodes")):
        with pytest.raises(ApiError) as denied:
            api.get(path)
        expected = fake.forbidden_status("list", resource, group)
        expected["message"] = expected["message"].replace(FAKE_ACCOUNT, account)
        assert denied.value.body == expected
