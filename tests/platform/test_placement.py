"""The chart installed by the real helm CLI, with DEFAULT values, on nodes shaped like each provider's
GPU nodes: the DaemonSet controller and the scheduler put exactly one exporter pod on every GPU node
and none on CPU-only or control-plane nodes. helm upgrade, rollback and uninstall leave nothing
behind, and a values file written for dcgm-exporter's chart places the same pods.

The table the test prints (node shape -> exporter pods) is the one in docs/testing.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from devcluster.api import Api
from tests.deploy.chart_support import CHART_DIR
from tests.platform.support import poll
from upstream.matrix import releases

NAMESPACE = "gpu-monitoring"
RELEASE = "gpu-pod-exporter"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"

#: Every node of devcluster/data/nodes.yaml and whether it has a GPU.
GPU_NODES = {"gpu-operator", "nfd-vendor", "nfd-default", "gke-gpu", "aks-gpu", "aks-gpu-legacy",
             "eks-karpenter-gpu", "gpu-tainted"}
OTHER_NODES = {"cpu-1", "cpu-2", "control-plane"}

Helm = Callable[..., Any]


def placement(admin: Api) -> dict[str, int]:
    """Exporter pods per node (0 for a node with none)."""
    table = dict.fromkeys(GPU_NODES | OTHER_NODES, 0)
    pods = admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={INSTANCE}")["items"]
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            continue
        node = pod["spec"].get("nodeName", "<unscheduled>")
        table[node] = table.get(node, 0) + 1
    return table


def settled_daemonset(admin: Api) -> dict[str, Any] | None:
    """The exporter DaemonSet once its controller has acted on the current spec and every pod it
    wants is scheduled, running and ready (kwok plays the kubelet), else None."""
    items = admin.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets?labelSelector={INSTANCE}")["items"]
    if len(items) != 1:
        return None
    ds = items[0]
    status = ds.get("status", {})
    if status.get("observedGeneration") != ds["metadata"]["generation"]:
        return None
    want = status.get("desiredNumberScheduled")
    done = (status.get("currentNumberScheduled") == want and status.get("numberReady") == want
            and status.get("updatedNumberScheduled", 0) == want)
    pods = admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={INSTANCE}")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    if done and len(pods) == want and all(p.get("status", {}).get("phase") == "Running" for p in live):
        return dict(ds)
    return None


def print_table(title: str, table: dict[str, int]) -> None:
    print(f"\n{title}\n| node | GPU node | exporter pods |\n|---|---|---|")
    for node in sorted(table, key=lambda n: (n not in GPU_NODES, n)):
        print(f"| {node} | {'yes' if node in GPU_NODES else 'no'} | {table[node]} |")


def assert_one_per_gpu_node(table: dict[str, int]) -> None:
    assert {n: c for n, c in table.items() if c} == dict.fromkeys(GPU_NODES, 1), table


def leftovers(admin: Api) -> list[str]:
    """Every object the release could have created that still exists (namespaced and cluster-wide)."""
    found = []
    for path in (f"/api/v1/namespaces/{NAMESPACE}/{kind}" for kind in
                 ("pods", "services", "configmaps", "secrets", "serviceaccounts")):
        found += [f"{path}/{o['metadata']['name']}" for o in admin.get(f"{path}?labelSelector={INSTANCE}")["items"]]
    for group, kinds in (("apps/v1", ("daemonsets", "deployments")),
                         ("rbac.authorization.k8s.io/v1", ("roles", "rolebindings")),
                         ("networking.k8s.io/v1", ("networkpolicies",))):
        for kind in kinds:
            path = f"/apis/{group}/namespaces/{NAMESPACE}/{kind}"
            found += [f"{path}/{o['metadata']['name']}" for o in admin.get(f"{path}?labelSelector={INSTANCE}")["items"]]
    for kind in ("clusterroles", "clusterrolebindings"):
        path = f"/apis/rbac.authorization.k8s.io/v1/{kind}"
        found += [f"{path}/{o['metadata']['name']}" for o in admin.get(f"{path}?labelSelector={INSTANCE}")["items"]]
    # helm's own release records
    found += [f"secret/{o['metadata']['name']}" for o in
              admin.get(f"/api/v1/namespaces/{NAMESPACE}/secrets?labelSelector=owner%3Dhelm")["items"]]
    return found


@pytest.fixture
def uninstalled(admin: Api, helm: Helm) -> Iterator[None]:
    """Each test starts and ends with no release (and waits until its pods are gone)."""
    yield
    helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", "--wait", "--timeout", "5m")
    poll("nothing of the release left", lambda: not leftovers(admin), deadline_s=180)


def test_default_values_place_one_exporter_per_gpu_node(admin: Api, helm: Helm, uninstalled: None) -> None:
    out = helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace")
    ds = poll("the exporter DaemonSet settled", lambda: settled_daemonset(admin), deadline_s=240)
    table = placement(admin)
    print_table("Placement with default values (helm install, real scheduler, kwok nodes):", table)
    assert_one_per_gpu_node(table)
    assert ds["status"]["desiredNumberScheduled"] == len(GPU_NODES)
    assert "No GPU node" not in out.stdout  # this cluster has GPU nodes: no warning

    # upgrade (a pod-template change rolls every pod), rollback to it, uninstall: same placement, then nothing.
    helm("upgrade", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--set", "podAnnotations.rolled=yes")
    poll("the upgraded DaemonSet settled", lambda: settled_daemonset(admin), deadline_s=240)
    assert_one_per_gpu_node(placement(admin))
    pods = admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={INSTANCE}")["items"]
    assert all(p["metadata"].get("annotations", {}).get("rolled") == "yes" for p in pods)

    helm("rollback", RELEASE, "1", "-n", NAMESPACE)
    poll("the rolled-back DaemonSet settled", lambda: settled_daemonset(admin), deadline_s=240)
    assert_one_per_gpu_node(placement(admin))
    pods = admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={INSTANCE}")["items"]
    assert not any("rolled" in p["metadata"].get("annotations", {}) for p in pods)
    history = helm("history", RELEASE, "-n", NAMESPACE, "-o", "json")
    assert '"revision":3' in history.stdout.replace(" ", "")

    helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
    poll("nothing of the release left after uninstall", lambda: not leftovers(admin), deadline_s=180)


UPSTREAM_VALUES = [f"dcgm-exporter-{record['release']}-values.yaml" for record in releases()]


@pytest.mark.parametrize("values", [*UPSTREAM_VALUES, "dcgm-exporter-customised-values.yaml"])
def test_a_dcgm_exporter_values_file_installs_unchanged_and_places_the_same_pods(
        admin: Api, helm: Helm, uninstalled: None, values: str) -> None:
    """Every release's chart values as released (the corpus, upstream/dcgm-exporter/), unchanged, through the
    helm CLI's own schema validation onto the real API server; the exporter pods land where ours do, run this
    image (never dcgm-exporter's, nor its digest) and match that release's node label."""
    out = helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace",
               "-f", str(CHART_DIR / "ci" / values))
    poll("the exporter DaemonSet settled", lambda: settled_daemonset(admin), deadline_s=240)
    table = placement(admin)
    print_table(f"Placement with {values}:", table)
    assert_one_per_gpu_node(table)
    ds = admin.get(f"/apis/apps/v1/namespaces/{NAMESPACE}/daemonsets")["items"][0]
    [container] = ds["spec"]["template"]["spec"]["containers"]
    assert "dcgm-exporter" not in container["image"] and "@" not in container["image"]
    if values in UPSTREAM_VALUES:
        version = values.split("-")[3]  # dcgm-exporter-<dcgm>-<exporter>-values.yaml
        env = {item["name"]: item.get("value") for item in container["env"]}
        assert env["GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT"] == version
        assert f"dcgm-exporter {version} behaviour" in out.stdout  # NOTES, as helm printed them


def test_a_cluster_without_any_gpu_label_gets_one_notes_line_with_the_value_to_set(helm: Helm) -> None:
    """The install notes look at the cluster's nodes (helm's lookup): with labels no node carries,
    the one warning says so and names the value; with the defaults on this cluster, no warning."""
    absent = helm("install", "notes-check", str(CHART_DIR), "-n", "gpu-monitoring-notes", "--create-namespace",
                  "--dry-run=server", "--set-json",
                  'gpuNodeAffinity.labels=[{"key":"example.com/gpu","operator":"Exists"}]')
    warning = [line for line in absent.stdout.splitlines() if "No GPU node found" in line]
    assert len(warning) == 1, absent.stdout
    assert "--set gpuNodeAffinity.key=<label>" in absent.stdout
    present = helm("install", "notes-check", str(CHART_DIR), "-n", "gpu-monitoring-notes", "--create-namespace",
                   "--dry-run=server")
    assert "No GPU node found" not in present.stdout


def test_the_old_default_affinity_placed_pods_on_gpu_operator_nodes_only(admin: Api, helm: Helm,
                                                                        uninstalled: None) -> None:
    """The "before" column of docs/testing.md's placement table: the affinity the chart had by
    default before issue 26 (``nvidia.com/gpu.present=true`` alone, the nvidia.com/gpu taint
    tolerated) leaves every GPU node that the GPU Operator did not label without an exporter."""
    helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace", "--set-json",
         'gpuNodeAffinity.labels=[{"key":"nvidia.com/gpu.present","values":["true"]}]')
    poll("the exporter DaemonSet settled", lambda: settled_daemonset(admin), deadline_s=240)
    table = placement(admin)
    print_table("Placement with the old default affinity (nvidia.com/gpu.present=true only):", table)
    assert {n: c for n, c in table.items() if c} == {"gpu-operator": 1, "gpu-tainted": 1}, table
