"""The control plane that scripts/cluster starts is a real one: authentication, RBAC, the
service-account machinery, the scheduler and kwok's nodes and pods all answer as a cluster does."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from devcluster import nodes
from devcluster.api import Api, ApiError
from devcluster.control_plane import DATA, Cluster
from tests.platform.support import exists, poll

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cluster"


def test_every_default_node_is_registered_and_ready(admin: Api) -> None:
    expected = {n["metadata"]["name"] for n in nodes.load(DATA / "nodes.yaml")}
    items = admin.get("/api/v1/nodes")["items"]
    ready = {n["metadata"]["name"] for n in items
             if any(c["type"] == "Ready" and c["status"] == "True" for c in (n["status"].get("conditions") or []))}
    assert ready == expected
    gke = next(n for n in items if n["metadata"]["name"] == "gke-gpu")
    assert gke["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gke["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]


def test_an_unauthenticated_or_unknown_caller_is_refused(cluster: Cluster) -> None:
    anonymous = Api(cluster.server, cluster.ca_file)
    with pytest.raises(ApiError) as denied:
        anonymous.get("/api/v1/namespaces/kube-system/secrets")
    assert denied.value.status == 403  # system:anonymous, authorised by RBAC: nothing
    with pytest.raises(ApiError) as unknown:
        anonymous.as_token("not-a-token").get("/api/v1/nodes")
    assert unknown.value.status == 401


def test_a_pod_is_scheduled_run_by_kwok_and_deleted(admin: Api, sa_token: Callable[..., str]) -> None:
    admin.apply_create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "smoke"}})
    poll("ServiceAccount smoke/default", lambda: exists(admin, "/api/v1/namespaces/smoke/serviceaccounts/default"))
    admin.create("/api/v1/namespaces/smoke/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": "cpu-1"},
                 "containers": [{"name": "c", "image": "registry.invalid/none:1"}]}})
    pod = poll("pod p Running", lambda: _running(admin, "/api/v1/namespaces/smoke/pods/p"))
    assert pod["spec"]["nodeName"] == "cpu-1"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    token = sa_token("smoke", "default")
    with pytest.raises(ApiError) as denied:
        admin.as_token(token).get("/api/v1/namespaces/smoke/pods")
    assert denied.value.status == 403  # a fresh ServiceAccount has no rights
    assert "system:serviceaccount:smoke:default" in str(denied.value)
    admin.delete("/api/v1/namespaces/smoke/pods/p")
    poll("pod p gone", lambda: not exists(admin, "/api/v1/namespaces/smoke/pods/p"))


def _running(api: Api, path: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = api.get(path)
    return pod if pod.get("status", {}).get("phase") == "Running" else None


def test_scripts_cluster_up_prints_the_kubeconfig_last_and_down_stops_exactly_what_it_started(
        cluster: Cluster, tmp_path: Path) -> None:
    """A second cluster from the command line, with a nodes file: the session's cluster is untouched."""
    nodes_file = tmp_path / "nodes.yaml"
    nodes_file.write_text("nodes:\n  - name: only-gpu\n    labels: {nvidia.com/gpu.present: true}\n", encoding="utf-8")
    state = tmp_path / "state"
    up = subprocess.run([str(SCRIPT), "up", "--nodes", str(nodes_file), "--state-dir", str(state)],
                        capture_output=True, text=True, timeout=600, check=False)
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip().splitlines()[-1])
    assert kubeconfig == state / "admin.kubeconfig" and kubeconfig.is_file()
    second = Cluster.load(state).admin()
    assert [n["metadata"]["name"] for n in second.get("/api/v1/nodes")["items"]] == ["only-gpu"]
    pids = {p.name.removesuffix(".pid"): int(p.read_text().split()[0]) for p in (state / "pids").glob("*.pid")}
    assert set(pids) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

    (state / "pids" / "kwok.pid").unlink()  # a lost pidfile: kwok is still found by its arguments
    down = subprocess.run([str(SCRIPT), "down", "--state-dir", str(state)], capture_output=True, text=True,
                          timeout=300, check=False)
    assert down.returncode == 0, down.stderr
    assert f"kwok (pid {pids['kwok']}, no pidfile)" in down.stderr
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids.values())
    assert not list((state / "pids").glob("*.pid"))
    assert cluster.admin().ok("/readyz")  # the session's cluster still runs
    again = subprocess.run([str(SCRIPT), "down", "--state-dir", str(state)], capture_output=True, text=True,
                           timeout=60, check=False)
    assert again.returncode == 0 and "nothing was running" in again.stderr


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except OSError:
        return True
