"""How the exporter reaches the API server (``exporter.kube.apiserver``), against the REAL one.

Moved here from tests/kube/test_apiserver.py, where a fake HTTPS server stood in for Kubernetes:
real authentication decides. A ServiceAccount token issued by the server (TokenRequest, as the
kubelet's projected volume gets it) reaches it in cluster mode over TLS; a token the server does not
know gets its 401; a rewritten token file is read before the next request (the kubelet rotates
bound tokens well before they expire); a kubeconfig with an embedded client certificate passes the
server's mutual TLS.

What stays on the fake (tests/kube/test_apiserver.py): TLS conditions made per test (a server
certificate from another CA, a ``tls-server-name``, a kubeconfig's relative paths), a 410 sent as an
HTTP status, credential plugins, kubeconfig lists; the real server has one fixed certificate and
sends its 410s inside watch streams.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.kube.apiserver import ApiError, HttpLists, build_lists, in_cluster_endpoint
from tests.platform.support import bound_pod, delete_namespaces, ensure_namespace

NAMESPACE = "apiserver-reach"
ACCOUNT = "reader"
ROLE = "gpu-pod-exporter-test-reader"
NODE = "apiserver-node"  # no Node object: the one pod bound to it is this test's


def _pod_names(lists: Any) -> list[str]:
    """This node's pods, asked as the watch loop asks (one GET, the body read by the caller)."""
    response = lists.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}", _request_timeout=(5, 30),
                                                 _preload_content=False)
    try:
        return sorted(item["metadata"]["name"] for item in json.loads(response.read())["items"])
    finally:
        response.release_conn()


@pytest.fixture(scope="module")
def reader(admin: Api) -> Iterator[None]:
    """A ServiceAccount that may list and watch pods (the exporter's first right), and a pod to list."""
    ensure_namespace(admin, NAMESPACE)
    admin.apply_create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}})
    admin.apply_create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ROLE},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]})
    admin.apply_create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": NAMESPACE}]})
    bound_pod(admin, NAMESPACE, "trainer-0", NODE)
    try:
        yield
    finally:
        admin.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{ROLE}")
        admin.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{ROLE}")
        delete_namespaces(admin, NODE, NAMESPACE)


def test_in_cluster_reaches_the_real_api_over_tls_and_follows_a_rotated_token(
        cluster: Cluster, reader: None, sa_token: Callable[..., str], tmp_path: Path) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(cluster.ca_file.read_bytes())
    (account / "token").write_text(sa_token(NAMESPACE, ACCOUNT), encoding="utf-8")
    address = urlsplit(cluster.server)
    env = {"KUBERNETES_SERVICE_HOST": str(address.hostname), "KUBERNETES_SERVICE_PORT": str(address.port)}
    lists = HttpLists(in_cluster_endpoint(env, account))
    assert _pod_names(lists) == ["trainer-0"]

    # the file is read before every request: a token the server does not know is refused at once...
    (account / "token").write_text("not-a-token\n", encoding="utf-8")
    with pytest.raises(ApiError) as refused:
        _pod_names(lists)
    assert (refused.value.status, refused.value.reason) == (401, "Unauthorized")
    # ...and a fresh one (the kubelet's rotation) works at once
    (account / "token").write_text(sa_token(NAMESPACE, ACCOUNT) + "\n", encoding="utf-8")
    assert _pod_names(lists) == ["trainer-0"]


def test_a_kubeconfig_with_embedded_client_certificate_passes_mutual_tls(cluster: Cluster, reader: None,
                                                                          tmp_path: Path) -> None:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode("ascii")

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "ops",
        "clusters": [{"name": "c", "cluster": {"server": cluster.server,
                                               "certificate-authority-data": b64(cluster.ca_file)}}],
        "users": [{"name": "admin", "user": {"client-certificate-data": b64(cluster.admin_cert),
                                             "client-key-data": b64(cluster.admin_key)}}],
        "contexts": [{"name": "ops", "context": {"cluster": "c", "user": "admin"}}],
    }), encoding="utf-8")
    assert _pod_names(build_lists(str(kubeconfig))) == ["trainer-0"]


def test_a_wrong_token_raises_with_the_real_status(cluster: Cluster, token_kubeconfig: Callable[[str, Path], Path],
                                                   tmp_path: Path) -> None:
    wrong = build_lists(str(token_kubeconfig("stolen", tmp_path / "kubeconfig")))
    with pytest.raises(ApiError) as unauthorized:
        _pod_names(wrong)
    assert (unauthorized.value.status, unauthorized.value.reason) == (401, "Unauthorized")
