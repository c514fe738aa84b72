"""Helpers shared by the platform tests: polling for a state (never sleeping for time to pass)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devcluster.api import Api, ApiError
from tests.support.polling import wait_for


def poll(what: str, check: Callable[[], Any], deadline_s: float = 120.0) -> Any:
    """The first truthy answer of ``check``; fails the test with ``what`` after a generous deadline
    (``tests.support.polling.wait_for`` at the real cluster's pace)."""
    return wait_for(check, deadline_s, what, interval_s=0.2)


def exists(api: Api, path: str) -> bool:
    """Whether GET ``path`` finds the object (404: no)."""
    try:
        api.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    return True


def ensure_namespace(api: Api, name: str, labels: dict[str, str] | None = None) -> None:
    api.apply_create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": name, "labels": labels or {}}})


def bound_pod(api: Api, namespace: str, name: str, node: str, *, labels: dict[str, str] | None = None,
              containers: dict[str, str] | None = None, sidecars: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod bound to ``node`` and, when container IDs are given, the status its kubelet would write
    (Running, each container with its runtime's ID, ``sidecars`` as native sidecar init containers).

    For a node no kwok node answers for: the test plays the kubelet (``delete_now`` confirms a
    deletion, which nothing else would on such a node). Returns the pod as the server stored it.
    """
    containers = containers or {"main": ""}
    spec: dict[str, Any] = {"nodeName": node, "containers": [
        {"name": container, "image": "registry.invalid/x:1"} for container in containers]}
    if sidecars:
        spec["initContainers"] = [{"name": container, "image": "registry.invalid/x:1", "restartPolicy": "Always"}
                                  for container in sidecars]
    pod: dict[str, Any] = api.create(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec})
    if any(containers.values()):
        def status(container: str, cid: str) -> dict[str, Any]:
            return {"name": container, "image": "registry.invalid/x:1", "imageID": "", "containerID": cid,
                    "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}

        api.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {
            "phase": "Running",
            "containerStatuses": [status(c, cid) for c, cid in containers.items()],
            **({"initContainerStatuses": [status(c, cid) for c, cid in sidecars.items()]} if sidecars else {}),
        }}, "application/merge-patch+json")
    return pod


def delete_now(api: Api, namespace: str, name: str) -> None:
    """Delete a pod as its kubelet confirms a deletion once the containers are gone (grace period 0)."""
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})


def delete_namespaces(api: Api, node: str, *namespaces: str) -> None:
    """Confirm the deletion of every pod bound to ``node`` (no kubelet would), then delete the namespaces."""
    for namespace in namespaces:
        for item in api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            if item["spec"].get("nodeName") == node:
                delete_now(api, namespace, item["metadata"]["name"])
        api.delete(f"/api/v1/namespaces/{namespace}")


@contextmanager
def chart_exporter_kubeconfig(admin: Api, helm: Callable[..., Any], sa_token: Callable[..., str],
                              token_kubeconfig: Callable[[str, Path], Path], directory: Path, *, release: str,
                              namespace: str, chart_dir: Path) -> Iterator[Path]:
    """The chart installed with the helm CLI (DRA on) and a kubeconfig with the token of the ServiceAccount it
    creates for the exporter: the identity the exporter runs with in the cluster. Uninstalled on exit."""
    helm("install", release, str(chart_dir), "-n", namespace, "--create-namespace",
         "--set", "kubernetesDRA.enabled=true")
    try:
        accounts = admin.get(f"/api/v1/namespaces/{namespace}/serviceaccounts"
                             f"?labelSelector=app.kubernetes.io/instance={release}")["items"]
        assert len(accounts) == 1, accounts
        yield token_kubeconfig(sa_token(namespace, accounts[0]["metadata"]["name"]), directory / "kubeconfig")
    finally:
        helm("uninstall", release, "-n", namespace, "--wait", "--timeout", "5m")


def complete_job_pod(admin: Api, namespace: str, job: dict[str, Any], job_pod: dict[str, Any]) -> None:
    """Report the Job's pod Succeeded, as the kubelet does when the diagnostic passes (kwok's nodes run
    nothing), and wait until the real Job controller marks the Job complete."""
    finished = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    admin.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{job_pod['metadata']['name']}/status", {
        "status": {"phase": "Succeeded", "containerStatuses": [{
            "name": "validate", "image": "registry.example/gpu-diag:1", "imageID": "", "ready": False,
            "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                                                        "startedAt": finished, "finishedAt": finished}}}]}},
        "application/strategic-merge-patch+json")
    poll("the Job controller marks the Job complete", lambda: any(
        c["type"] == "Complete" and c["status"] == "True" for c in admin.get(
            f"/apis/batch/v1/namespaces/{namespace}/jobs/{job['metadata']['name']}").get("status", {})
        .get("conditions") or []))
