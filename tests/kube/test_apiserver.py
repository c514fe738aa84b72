"""The API server connection: in-cluster service account, kubeconfig shapes, TLS, tokens, errors.

Every test sends real requests to the fake API server (over HTTPS with certificates made on the fly
where TLS matters) and checks what the watch loop would get: the pods, or an error with a status.
The fake stays where a test makes a condition the real server cannot be put in per test: a server
certificate from another CA or for another name, files relative to a kubeconfig, a 410 as an HTTP
status, credential plugins. Real authentication (a ServiceAccount token in cluster mode and its
rotation, a wrong token's 401, a client certificate's mutual TLS) runs against the real API server:
tests/platform/test_apiserver.py.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.kube.apiserver import (
    ApiConfigError,
    ApiError,
    HttpLists,
    build_lists,
    in_cluster_endpoint,
    kubeconfig_endpoint,
)
from simulator.fakeapiserver import FakeApiServer
from tests.web.certs import CertificateAuthority, Issued

NODE = "node-a"
REPO = Path(__file__).resolve().parents[2]


def pod_names(lists: Any) -> list[str]:
    """The pods listed, called as the watch loop calls it (unread response; the older generator's
    CoreV1Api, the fallback for kubernetes < 37, would otherwise deserialise the list itself)."""
    response = lists.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}", _request_timeout=(2, 5),
                                                 _preload_content=False)
    try:
        return sorted(item["metadata"]["name"] for item in json.loads(response.read())["items"])
    finally:
        response.release_conn()


def populate(server: FakeApiServer) -> FakeApiServer:
    server.add_namespace("ml", {"team": "research"})
    server.add_pod("ml", "trainer-0")
    server.add_pod("ml", "elsewhere", node_name="node-b")
    return server


@pytest.fixture(scope="module")
def authority() -> CertificateAuthority:
    return CertificateAuthority("test cluster CA")


@pytest.fixture(scope="module")
def server_pair(authority: CertificateAuthority) -> Issued:
    return authority.issue("kube-apiserver", dns=("localhost", "kubernetes.default.svc"), ips=("127.0.0.1",))


def server_context(server_pair: Issued, tmp_path: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    cert, key = server_pair.write_pair(tmp_path / "server", "apiserver")
    context.load_cert_chain(cert, key)
    return context


@pytest.fixture
def https_api(server_pair: Issued, tmp_path: Path) -> Iterator[FakeApiServer]:
    server = populate(FakeApiServer(NODE, token="first-token", ssl_context=server_context(server_pair, tmp_path)))
    server.start()
    yield server
    server.stop()


def write_kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "ops",
        "clusters": [{"name": "prod", "cluster": cluster}],
        "users": [{"name": "exporter", "user": user}],
        "contexts": [{"name": "ops", "context": {"cluster": "prod", "user": "exporter"}}],
    }), encoding="utf-8")
    return path


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def service_account(directory: Path, token: str, ca_pem: bytes) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "token").write_text(token, encoding="utf-8")
    (directory / "ca.crt").write_bytes(ca_pem)
    return directory


# -- in cluster -------------------------------------------------------------------------------------


def test_in_cluster_outside_a_pod_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(ApiConfigError, match=r"not running in a pod.*--kubeconfig"):
        in_cluster_endpoint({}, tmp_path)


def test_in_cluster_without_a_mounted_token_names_the_file(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    with pytest.raises(ApiConfigError, match=r"sa/token is missing.*automountServiceAccountToken"):
        in_cluster_endpoint(env, tmp_path / "sa")


def test_in_cluster_ipv6_service_host_is_bracketed(authority: CertificateAuthority, tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa", "t", authority.pem)
    endpoint = in_cluster_endpoint({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, account)
    assert endpoint.server == "https://[fd00::1]:443"


# -- kubeconfig -------------------------------------------------------------------------------------


def test_kubeconfig_paths_are_relative_to_its_directory(https_api: FakeApiServer, authority: CertificateAuthority,
                                                          tmp_path: Path) -> None:
    directory = tmp_path / "kube"
    directory.mkdir()
    authority.write(directory / "ca.pem")
    (directory / "token").write_text("first-token", encoding="utf-8")
    config = write_kubeconfig(directory / "config", {"server": https_api.url, "certificate-authority": "ca.pem"},
                              {"tokenFile": "token"})
    assert pod_names(build_lists(str(config))) == ["trainer-0"]
    assert https_api.authorizations[-1] == "Bearer first-token"


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")  # the insecure case is the point
def test_kubeconfig_verifies_the_server_unless_told_not_to(https_api: FakeApiServer, tmp_path: Path) -> None:
    stranger = CertificateAuthority("someone else's CA")
    cluster = {"server": https_api.url, "certificate-authority-data": b64(stranger.pem)}
    with pytest.raises(Exception) as refused:
        pod_names(build_lists(str(write_kubeconfig(tmp_path / "strict", cluster, {"token": "first-token"}))))
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value)

    insecure = {"server": https_api.url, "insecure-skip-tls-verify": True}
    lists = build_lists(str(write_kubeconfig(tmp_path / "insecure", insecure, {"token": "first-token"})))
    assert pod_names(lists) == ["trainer-0"]


def test_tls_server_name_is_checked_instead_of_the_address(https_api: FakeApiServer, authority: CertificateAuthority,
                                                             tmp_path: Path) -> None:
    cluster = {"server": https_api.url, "certificate-authority-data": b64(authority.pem),
               "tls-server-name": "kubernetes.default.svc"}
    assert pod_names(build_lists(str(write_kubeconfig(tmp_path / "named", cluster, {"token": "first-token"})))) \
        == ["trainer-0"]
    cluster["tls-server-name"] = "not-the-apiserver.example"
    with pytest.raises(Exception) as refused:
        pod_names(build_lists(str(write_kubeconfig(tmp_path / "wrong", cluster, {"token": "first-token"}))))
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value) or "hostname" in repr(refused.value).lower()


def test_a_410_sent_as_an_http_status_raises_with_the_status(https_api: FakeApiServer,
                                                             authority: CertificateAuthority, tmp_path: Path) -> None:
    """kube-apiserver sends a watch's 410 inside the stream; a proxy or an aggregated API may answer
    with the HTTP status, which the real server cannot be made to do (a wrong token's real 401:
    tests/platform/test_apiserver.py)."""
    cluster = {"server": https_api.url, "certificate-authority-data": b64(authority.pem)}
    right = build_lists(str(write_kubeconfig(tmp_path / "right", cluster, {"token": "first-token"})))
    https_api.expire_history(as_http=True)
    with pytest.raises(ApiError) as gone:
        right.list_namespace(watch=True, resource_version="1", _request_timeout=(1, 2))
    assert gone.value.status == 410
    assert https_api.requests[-1] == ("watch", "namespaces", {"watch": "true", "resourceVersion": "1"})


@pytest.mark.parametrize(("content", "message"), [
    ("clusters: [\n  - name: a\n    cluster: {server: x\n", r"kubeconfig:\d+: not valid YAML"),
    ("apiVersion: v1\nkind: Config\n", "no 'current-context'"),
    ("current-context: ops\ncontexts: [{name: ops, context: {cluster: prod, user: u}}]\n",
     "no cluster named 'prod'"),
    ("current-context: ops\ncontexts: [{name: ops, context: {cluster: prod}}]\n"
     "clusters: [{name: prod, cluster: {server: 'ftp://x'}}]\n", "'server' must be an http\\(s\\) URL"),
])
def test_a_broken_kubeconfig_is_one_clear_error(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ApiConfigError, match=message) as raised:
        kubeconfig_endpoint(path)
    assert str(path) in str(raised.value)


def test_a_credential_plugin_goes_through_the_kubernetes_package(tmp_path: Path) -> None:
    """``exec`` (cloud IAM plugins) is the kubernetes package's job; the token it yields is sent."""
    plugin = tmp_path / "plugin.py"
    plugin.write_text(textwrap.dedent("""
        import json
        print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                          "status": {"token": "from-plugin"}}))
    """), encoding="utf-8")
    with populate(FakeApiServer(NODE, token="from-plugin")) as server:
        user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                         "args": [str(plugin)], "interactiveMode": "Never"}}
        config = write_kubeconfig(tmp_path / "config", {"server": server.url}, user)
        assert kubeconfig_endpoint(config) is None
        with pytest.raises(ApiConfigError, match=r"user 'exporter' \(exec: python[0-9.]*\) gets credentials by "
                                                 r"running a program; .* --kubeconfig-allow-exec"):
            build_lists(str(config))  # no opt-in: nothing runs
        assert server.authorizations == []
        lists = build_lists(str(config), allow_exec=True)
        assert not isinstance(lists, HttpLists)
        assert pod_names(lists) == ["trainer-0"]
        assert server.authorizations[-1] == "Bearer from-plugin"


def test_an_auth_provider_or_an_exec_user_in_a_kubeconfig_list_is_refused_without_the_opt_in(tmp_path: Path) -> None:
    plain = write_kubeconfig(tmp_path / "plain", {"server": "https://127.0.0.1:1"}, {"token": "t"})
    provider = write_kubeconfig(tmp_path / "provider", {"server": "https://127.0.0.1:1"},
                                {"auth-provider": {"name": "gcp", "config": {"cmd-path": "/usr/bin/gcloud"}}})
    with pytest.raises(ApiConfigError, match=r"provider: user 'exporter' \(auth-provider: gcp\)"):
        build_lists(str(provider))
    with pytest.raises(ApiConfigError, match=r"provider: user 'exporter' \(auth-provider: gcp\)"):
        build_lists(f"{plain}{os.pathsep}{provider}")


def test_the_usual_path_never_imports_the_kubernetes_package(tmp_path: Path) -> None:
    """The generated client costs ~30 MiB of RSS; a token or certificate kubeconfig must not load it."""
    with populate(FakeApiServer(NODE)) as server:
        config = server.write_kubeconfig(tmp_path / "kubeconfig")
        script = (
            "import sys\n"
            "from exporter.kube.metadata import KubernetesMetadata\n"
            "from exporter.kube.apiserver import build_lists\n"
            "from tests.kube.test_apiserver import pod_names\n"
            f"print(pod_names(build_lists({str(config)!r})))\n"
            "print(sorted(name for name in sys.modules if name.split('.')[0] == 'kubernetes'))\n"
        )
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                                cwd=REPO, timeout=60)
    assert result.stdout.splitlines() == ["['trainer-0']", "[]"]


def test_wrapped_base64_and_a_home_relative_path_are_read_as_kubectl_reads_them(
        https_api: FakeApiServer, authority: CertificateAuthority, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    wrapped = "\n".join(textwrap.wrap(b64(authority.pem), 64))  # as a YAML block scalar would carry it
    monkeypatch.setenv("HOME", str(tmp_path))
    write_kubeconfig(tmp_path / "config", {"server": https_api.url, "certificate-authority-data": wrapped},
                     {"token": "first-token"})
    assert pod_names(build_lists("~/config")) == ["trainer-0"]


def test_a_kubeconfig_list_is_merged_by_the_kubernetes_package(tmp_path: Path) -> None:
    """KUBECONFIG=a:b (cluster in one file, context and user in the other) works as with kubectl."""
    with populate(FakeApiServer(NODE, token="merged")) as server:
        clusters = tmp_path / "clusters"
        clusters.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config",
                                            "clusters": [{"name": "prod", "cluster": {"server": server.url}}]}))
        mine = tmp_path / "mine"
        mine.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "ops",
            "users": [{"name": "exporter", "user": {"token": "merged"}}],
            "contexts": [{"name": "ops", "context": {"cluster": "prod", "user": "exporter"}}]}))
        lists = build_lists(f"{clusters}:{mine}")
        assert pod_names(lists) == ["trainer-0"]
        assert server.authorizations[-1] == "Bearer merged"


def test_secrets_stay_out_of_the_endpoint_repr(tmp_path: Path) -> None:
    user = {"token": "s3cret-token", "username": "admin", "password": "hunter2"}
    endpoint = kubeconfig_endpoint(write_kubeconfig(tmp_path / "config", {"server": "https://10.0.0.1"}, user))
    assert endpoint is not None and endpoint.authorization() == "Bearer s3cret-token"
    assert "s3cret" not in repr(endpoint) and "hunter2" not in repr(endpoint)
