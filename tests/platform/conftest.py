"""The platform tier: tests against a real control plane (``scripts/cluster``), one per session.

Fixtures (a stable interface; other areas' platform tests build on them):

* ``cluster`` (session): a running :class:`devcluster.control_plane.Cluster` with the default nodes
  (``devcluster/data/nodes.yaml``). ``cluster.admin()`` is an admin API client,
  ``cluster.kubeconfig`` the admin kubeconfig path, ``cluster.server`` / ``cluster.ca_file`` its
  address and CA.
* ``kubeconfig`` (session): ``cluster.kubeconfig``.
* ``helm`` (session): ``helm(*args, check=True)`` runs the real helm CLI against the cluster
  (isolated HELM_* directories) and returns the CompletedProcess (text).
* ``sa_token`` (session): ``sa_token(namespace, name, expiration_s=3600)`` asks the API server for a
  ServiceAccount token (TokenRequest), as a projected token volume would.
* ``token_kubeconfig`` (session): ``token_kubeconfig(token, path)`` writes a kubeconfig that
  authenticates with that token (never the admin's certificate).

Without Go >= 1.26 the tier is skipped with the reason; under ``CI=true`` it fails instead (CI must
never pass without it). Run it alone with ``.venv/bin/python -m pytest tests/platform``.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from devcluster import build, control_plane
from devcluster.api import Api
from devcluster.control_plane import Cluster

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.platform)


def _require_go() -> None:
    try:
        build.check_go()
    except build.BuildError as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{exc}; CI=true requires the platform tier", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One control plane for the whole session, stopped at its end (even when a test failed)."""
    # The control plane and helm: the monitoring stack's binaries (also in build.BINARIES) are the
    # e2e tests' business, and a machine without Go can still run this tier with these cached.
    missing = [name for name in (*control_plane.COMPONENTS, "helm") if not build.binary_path(name).is_file()]
    if missing:
        _require_go()
    # A short path: the state dir holds unix-socket-free files only, but logs are read by humans.
    state = tmp_path_factory.mktemp("cluster")
    running = control_plane.up(state, log=lambda line: print(f"[cluster] {line}"))
    try:
        yield running
    finally:
        control_plane.down(state)


@pytest.fixture(scope="session")
def kubeconfig(cluster: Cluster) -> Path:
    return cluster.kubeconfig


@pytest.fixture(scope="session")
def admin(cluster: Cluster) -> Api:
    return cluster.admin()


@pytest.fixture(scope="session")
def helm(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., subprocess.CompletedProcess[str]]:
    binary = build.build("helm")
    home = tmp_path_factory.mktemp("helm")
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig), HELM_CACHE_HOME=str(home / "cache"),
               HELM_CONFIG_HOME=str(home / "config"), HELM_DATA_HOME=str(home / "data"))

    def run(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if check and proc.returncode != 0:
            pytest.fail(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


@pytest.fixture(scope="session")
def sa_token(admin: Api) -> Callable[..., str]:
    def token(namespace: str, name: str, expiration_s: int = 3600) -> str:
        answer = admin.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_s}})
        return str(answer["status"]["token"])

    return token


@pytest.fixture(scope="session")
def token_kubeconfig(cluster: Cluster) -> Callable[[str, Path], Path]:
    def write(token: str, path: Path) -> Path:
        config = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": cluster.server,
                                                    "certificate-authority": str(cluster.ca_file)}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "c",
        }
        path.write_text(json.dumps(config), encoding="utf-8")
        return path

    return write
