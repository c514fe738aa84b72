"""The exporter process (simulated GPUs, the simulated kubelet socket) against the REAL API server,
with the chart's exporter ServiceAccount token: GPUs are labelled from real Pod and Namespace
objects; label and team changes propagate, a deleted pod loses its labels, a relabelled namespace
moves its pods' team, and after an etcd compaction and an API server restart the watch's resume
gets a real 410 Gone and the exporter relists.

What a kubelet would be (PodResources on a unix socket) stays the fake one: there is no kubelet
here, and kwok's nodes have none.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster, etcd_compact, restart_apiserver
from exporter.simulate import dra_devices
from exporter.simulate.fakeapiserver import resource_slice
from exporter.simulate.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod
from tests.deploy.chart_support import CHART_DIR
from tests.e2e.exporter_process import ExporterProcess, running_exporter
from tests.e2e.kube_cluster import scenario_gpus
from tests.platform.support import ensure_namespace, poll

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "attribution-node.yaml"
GPUS = scenario_gpus(SCENARIO)
NODE = "gpu-operator"
NAMESPACE = "gpu-monitoring-attr"
RELEASE = "attr"


@pytest.fixture(scope="module")
def exporter_kubeconfig(admin: Api, helm: Callable[..., Any], sa_token: Callable[..., str],
                        token_kubeconfig: Callable[[str, Path], Path],
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig with the token of the ServiceAccount the chart creates for the exporter."""
    helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--create-namespace",
         "--set", "kubernetesDRA.enabled=true")
    accounts = admin.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts"
                         f"?labelSelector=app.kubernetes.io/instance={RELEASE}")["items"]
    assert len(accounts) == 1, accounts
    account = accounts[0]["metadata"]["name"]
    path = token_kubeconfig(sa_token(NAMESPACE, account), tmp_path_factory.mktemp("attr") / "kubeconfig")
    try:
        yield path
    finally:
        helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    root = Path(tempfile.mkdtemp(prefix="gpe-plat-"))  # short: unix socket paths are limited to 107 bytes
    fake = FakeKubelet(root / "kubelet.sock").start()
    try:
        yield fake
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def make_pod(admin: Api, kubelet: FakeKubelet, namespace: str, name: str, gpu: int,
             labels: dict[str, str] | None = None) -> None:
    """A pod on the GPU node as the API server (real object, kwok runs it) and the kubelet see it."""
    admin.create(f"/api/v1/namespaces/{namespace}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "registry.invalid/train:1"}]}})
    kubelet.add_pod(FakePod(namespace, name, (FakeContainer("main", (("nvidia.com/gpu", GPUS[gpu].uuid),)),)))


def allocations(exporter: ExporterProcess) -> dict[str, dict[str, str]]:
    """GPU UUID -> its workload labels, from DCGM_EXP_GPU_ALLOCATION_INFO."""
    return {labels["UUID"]: {k: v for k, v in labels.items() if k in ("namespace", "pod", "container", "team")}
            for labels, _ in exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO")}


def util_labels(exporter: ExporterProcess, gpu: int) -> dict[str, str]:
    found = [labels for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_UTIL") if labels["UUID"] == GPUS[gpu].uuid]
    assert len(found) == 1, found
    return found[0]


def relists(exporter: ExporterProcess, reason: str) -> float:
    return sum(v for labels, v in exporter.samples("gpu_pod_exporter_kube_api_relists_total")
               if labels.get("reason") == reason)


def test_gpus_are_labelled_from_real_pods_and_namespaces(cluster: Cluster, admin: Api, kubelet: FakeKubelet,
                                                         exporter_kubeconfig: Path) -> None:
    ensure_namespace(admin, "ml-attr", {"team": "research"})
    make_pod(admin, kubelet, "ml-attr", "trainer-0", 0, {"app": "trainer"})
    make_pod(admin, kubelet, "ml-attr", "tuner-0", 1, {"team": "vision"})
    args = ["--simulate", str(SCENARIO), "-c", "200", "-k", "--pod-resources-kubelet-socket", str(kubelet.socket_path),
            "--kubeconfig", str(exporter_kubeconfig), "--node-name", NODE, "--pod-resources-interval", "1000"]
    with running_exporter(args) as exporter:
        exporter.wait_healthy(deadline_s=60)
        uuid0, uuid1 = GPUS[0].uuid, GPUS[1].uuid

        def teams() -> dict[str, str]:
            return {uuid: labels.get("team", "") for uuid, labels in allocations(exporter).items()}

        poll("both pods attributed with teams", lambda: teams() == {uuid0: "research", uuid1: "vision"})
        assert allocations(exporter)[uuid0] == {"namespace": "ml-attr", "pod": "trainer-0", "container": "main",
                                                "team": "research"}
        assert util_labels(exporter, 0)["pod"] == "trainer-0"

        # a pod's own team label wins over its namespace's (pod:team, then namespace:team)
        admin.request("PATCH", "/api/v1/namespaces/ml-attr/pods/trainer-0",
                      {"metadata": {"labels": {"team": "nlp"}}}, "application/strategic-merge-patch+json")
        poll("trainer's pod label team=nlp", lambda: teams().get(uuid0) == "nlp")

        # relabelling the namespace moves the team of its pods without one of their own
        admin.request("PATCH", "/api/v1/namespaces/ml-attr/pods/trainer-0",
                      {"metadata": {"labels": {"team": None}}}, "application/strategic-merge-patch+json")
        admin.request("PATCH", "/api/v1/namespaces/ml-attr", {"metadata": {"labels": {"team": "platform"}}},
                      "application/merge-patch+json")
        poll("namespace team=platform moved trainer-0", lambda: teams() == {uuid0: "platform", uuid1: "vision"})

        # an etcd compaction, then an API server restart: the watch resumes from a compacted
        # resourceVersion, the real API server answers 410 Gone, and the exporter relists.
        expired_before = relists(exporter, "expired")
        make_pod(admin, kubelet, "ml-attr", "late-0", 2)
        etcd_compact(cluster)
        # a write after the compaction, so the restarted server's watch cache starts past every
        # revision the exporter has seen
        admin.create("/api/v1/namespaces/default/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "after-compaction-"}})
        restart_apiserver(cluster)
        poll("a relist after 410 Gone", lambda: relists(exporter, "expired") > expired_before, deadline_s=180)
        poll("late-0 attributed after the relist", lambda: allocations(exporter).get(GPUS[2].uuid, {}).get("pod")
             == "late-0", deadline_s=120)

        # a deleted pod loses its labels (the kubelet stops listing it; the API object is gone)
        admin.delete("/api/v1/namespaces/ml-attr/pods/tuner-0")
        kubelet.remove_pod("ml-attr", "tuner-0")
        poll("tuner-0's GPU unlabelled", lambda: uuid1 not in allocations(exporter)
             and "pod" not in util_labels(exporter, 1))


DRA_LABELS = ("dra_claim_name", "dra_claim_namespace", "dra_driver_name", "dra_pool_name", "dra_device_name")


def test_dra_claims_resolve_through_real_resource_slices(admin: Api, kubelet: FakeKubelet,
                                                         exporter_kubeconfig: Path) -> None:
    """Real DeviceClass, ResourceSlice (the fake API server's own NVIDIA-driver shape) and
    ResourceClaim objects; the real scheduler allocates the claim's device and binds the pod; the
    kubelet (fake) names the allocated device; the exporter resolves it through the real slice."""
    group = "/apis/resource.k8s.io/v1"
    admin.apply_create(f"{group}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": dra_devices.DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{dra_devices.DRIVER}'"}}]}})
    # the very object the fake API server serves (tests/simulate, --simulate dra-mixed), created for real
    published = resource_slice(f"{NODE}-gpus", dra_devices.DRIVER, NODE,
                               [dra_devices.gpu_device(i, GPUS[i].uuid) for i in (2, 3)], node_name=NODE)
    created = admin.create(f"{group}/resourceslices", published)
    assert created["spec"]["devices"] == published["spec"]["devices"]  # nothing dropped or rewritten
    ensure_namespace(admin, "ml-dra", {"team": "llm"})
    admin.create(f"{group}/namespaces/ml-dra/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "llm-gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": dra_devices.DRIVER, "allocationMode": "ExactCount", "count": 1,
            "selectors": [{"cel": {"expression": f"device.attributes['{dra_devices.DRIVER}'].uuid == "
                                                 f"'{GPUS[3].uuid}'"}}]}}]}}})
    admin.create("/api/v1/namespaces/ml-dra/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "llm-0"},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "llm-gpu"}],
                 "containers": [{"name": "main", "image": "registry.invalid/llm:1",
                                 "resources": {"claims": [{"name": "gpu"}]}}]}})
    pod = poll("llm-0 scheduled with its claim allocated", lambda: _bound(admin, "ml-dra", "llm-0"))
    assert pod["spec"]["nodeName"] == NODE
    claim = admin.get(f"{group}/namespaces/ml-dra/resourceclaims/llm-gpu")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"], result["device"]) == (dra_devices.DRIVER, NODE, "gpu-3")

    kubelet.add_pod(FakePod("ml-dra", "llm-0", (FakeContainer("main", claims=(FakeClaim("ml-dra", "llm-gpu", (
        FakeClaimDevice(result["driver"], result["pool"], result["device"]),)),)),)))
    args = ["--simulate", str(SCENARIO), "-c", "200", "-k", "--pod-resources-kubelet-socket", str(kubelet.socket_path),
            "--kubeconfig", str(exporter_kubeconfig), "--node-name", NODE, "--pod-resources-interval", "1000",
            "--kubernetes-enable-dra"]
    with running_exporter(args) as exporter:
        exporter.wait_healthy(deadline_s=60)

        def llm() -> dict[str, str] | None:
            found = [labels for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_UTIL")
                     if labels["UUID"] == GPUS[3].uuid and labels.get("pod") == "llm-0"]
            return found[0] if found else None

        labels = poll("GPU 3 attributed to llm-0 through its claim", llm)
        assert [labels[name] for name in DRA_LABELS] == ["llm-gpu", "ml-dra", dra_devices.DRIVER, NODE, "gpu-3"]
        assert labels["team"] == "llm"
        assert exporter.samples("gpu_pod_exporter_dra_resourceslices_up") == [({}, 1.0)]
        assert "pod" not in util_labels(exporter, 2)  # published, not claimed


def _bound(admin: Api, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = admin.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod if pod["spec"].get("nodeName") else None
