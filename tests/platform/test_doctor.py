"""``gpu-pod-exporter doctor`` against the real API server, with the chart's exporter identity:
real RBAC denials are reported, each with the chart value that fixes it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.api import Api
from simulator.fakekubelet import FakeKubelet
from tests.deploy.chart_support import CHART_DIR
from tests.doctor.conftest import clean_environment
from tests.doctor.support import doctor

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "attribution-node.yaml"
NAMESPACE = "gpu-monitoring-doc"
RELEASE = "doc"
NODE = "gpu-operator"
SECTION = "kubernetes api"


@pytest.fixture(scope="module")
def identities(admin: Api, helm: Callable[..., Any], sa_token: Callable[..., str],
               token_kubeconfig: Callable[[str, Path], Path],
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Kubeconfigs of the chart's exporter ServiceAccount (default values: no DRA grant) and of a
    ServiceAccount with no role at all (as with rbac.create=false and nothing bound)."""
    helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace")
    accounts = admin.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
                         f"?labelSelector=app.kubernetes.io/instance={RELEASE}")["items"]
    chart_account = accounts[0]["metadata"]["name"]
    admin.create(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "unbound"}})
    directory = tmp_path_factory.mktemp("doctor")
    try:
        yield {"chart": token_kubeconfig(sa_token(NAMESPACE, chart_account), directory / "chart"),
               "unbound": token_kubeconfig(sa_token(NAMESPACE, "unbound"), directory / "unbound")}
    finally:
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
        admin.delete(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/unbound")


@pytest.fixture
def kubelet_socket() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="gpe-doc-"))
    fake = FakeKubelet(root / "kubelet.sock").start()
    try:
        yield fake.socket_path
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def run_doctor(monkeypatch: pytest.MonkeyPatch, kubeconfig: Path, socket: Path, *extra: str) -> Any:
    clean_environment(monkeypatch)
    return doctor("--simulate", str(SCENARIO), "-k", "--kubeconfig", str(kubeconfig), "--node-name", NODE,
                  "--pod-resources-kubelet-socket", str(socket), "--json", "--timeout", "10",
                  "--address", "127.0.0.1:0", *extra)


def test_the_chart_identity_passes_and_a_dra_denial_names_kubernetes_dra_enabled(
        identities: dict[str, Path], kubelet_socket: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, identities["chart"], kubelet_socket, "--kubernetes-enable-dra")
    for verb in ("list", "watch"):
        assert run.row(SECTION, f"access {verb} pods")["verdict"] == "ok"
        assert run.row(SECTION, f"access {verb} namespaces")["verdict"] == "ok"
    denied = run.row(SECTION, "access watch resourceslices")
    assert denied["verdict"] == "failed", denied
    assert "kubernetesDRA.enabled" in denied["hint"]


def test_an_identity_without_roles_is_told_rbac_create(identities: dict[str, Path], kubelet_socket: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = run_doctor(monkeypatch, identities["unbound"], kubelet_socket)
    for verb in ("list", "watch"):
        for resource in ("pods", "namespaces"):
            row = run.row(SECTION, f"access {verb} {resource}")
            assert row["verdict"] == "failed", row
            assert "rbac.create" in row["hint"]
    assert run.code != 0
