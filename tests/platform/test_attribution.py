"""The exporter process (simulated GPUs, the simulated kubelet socket) against the REAL API server,
with the chart's exporter ServiceAccount token: GPUs are labelled from real Pod and Namespace
objects; label and team changes propagate, a deleted pod loses its labels, a relabelled namespace
moves its pods' team, and after an etcd compaction and an API server restart the watch's resume
gets a real 410 Gone and the exporter relists.

What a kubelet would be (PodResources on a unix socket) stays the fake one: there is no kubelet
here, and kwok's nodes have none.

``test_the_facade_joins_the_kubelet_the_real_objects_and_proc`` runs the attribution in process (moved
from tests/kube/test_attribution.py): the join of the kubelet's allocation, the real objects and /proc.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster, etcd_compact, restart_apiserver
from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube.attribution import AttributionSnapshot, KubernetesAttribution, Workload
from exporter.kube.reflector import WatchTimeouts
from exporter.snapshot import GpuProcess
from simulator import dra_devices
from simulator.fakeapiserver import resource_slice
from simulator.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod
from tests.attribution_modes import MODE_IDS, MODES
from tests.deploy.chart_support import CHART_DIR
from tests.kube.helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIGS, write_cgroup
from tests.platform.support import bound_pod, chart_exporter_kubeconfig, delete_namespaces, ensure_namespace, poll
from tests.support.exporter_process import ExporterProcess, running_exporter
from tests.support.kube_cluster import scenario_gpus

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
    with chart_exporter_kubeconfig(admin, helm, sa_token, token_kubeconfig, tmp_path_factory.mktemp("attr"),
                                   release=RELEASE, namespace=NAMESPACE, chart_dir=CHART_DIR) as path:
        yield path


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
    # the very object the fake API server serves (tests/simulator, --simulate dra-mixed), created for real
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
            # the pod and its claim come from the kubelet and the slice, the team from the namespace's
            # watch: waited for together (red in CI when the claim was read a moment before the
            # namespace's labels)
            found = [labels for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_UTIL")
                     if labels["UUID"] == GPUS[3].uuid and labels.get("pod") == "llm-0" and "team" in labels]
            return found[0] if found else None

        labels = poll("GPU 3 attributed to llm-0 through its claim, with its namespace's team", llm)
        assert [labels[name] for name in DRA_LABELS] == ["llm-gpu", "ml-dra", dra_devices.DRIVER, NODE, "gpu-3"]
        assert labels["team"] == "llm"
        assert exporter.samples("gpu_pod_exporter_dra_resourceslices_up") == [({}, 1.0)]
        assert "pod" not in util_labels(exporter, 2)  # published, not claimed


def _bound(admin: Api, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = admin.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod if pod["spec"].get("nodeName") else None


JOIN_NODE = "join-node"  # no Node object: the test plays its kubelet (status, PodResources) and its /proc
JOIN_SERIAL = itertools.count()
TRAINER_CID, EVAL_CID, NB_CID = "1" * 64, "2" * 64, "3" * 64


@pytest.mark.parametrize("process_attribution", MODES, ids=MODE_IDS)
def test_the_facade_joins_the_kubelet_the_real_objects_and_proc(cluster: Cluster, admin: Api,
                                                                process_attribution: bool) -> None:
    """In process (``KubernetesAttribution``), moved from tests/kube/test_attribution.py: the pods'
    UIDs, labels, container IDs and their namespaces' teams are the real server's objects (UIDs it
    assigned, statuses written through the status subresource as a kubelet writes them), joined with
    the fake kubelet's allocation and, with process attribution on, with /proc cgroup paths that
    carry those real UIDs."""
    serial = next(JOIN_SERIAL)
    ml, lab = f"join-ml-{serial}", f"join-lab-{serial}"
    ensure_namespace(admin, ml, {"team": "research"})
    ensure_namespace(admin, lab)
    trainer = bound_pod(admin, ml, "trainer-0", JOIN_NODE, labels={"app": "trainer", "team": "vision"},
                        containers={"trainer": "containerd://" + TRAINER_CID})
    evaluation = bound_pod(admin, ml, "eval-0", JOIN_NODE, labels={"app": "eval"},
                           containers={"eval": "containerd://" + EVAL_CID})
    notebook = bound_pod(admin, lab, "nb", JOIN_NODE, containers={"jupyter": "containerd://" + NB_CID})
    root = Path(tempfile.mkdtemp(prefix="gpe-join-"))  # short: unix socket paths are limited to 107 bytes
    fake = FakeKubelet(root / "kubelet.sock", [
        FakePod(ml, "trainer-0", (FakeContainer("trainer", (("nvidia.com/gpu", GPU0),)),)),
        FakePod(ml, "eval-0", (FakeContainer("eval", (("nvidia.com/gpu.shared", f"{GPU1}::0"),)),)),
        FakePod(lab, "nb", (FakeContainer("jupyter", (("nvidia.com/gpu.shared", f"{GPU1}::3"),
                                                      ("nvidia.com/mig-3g.40gb", MIG_A))),)),
    ], seed=3).start()
    proc = root / "proc"
    for pid, pod, cid in ((100, trainer, TRAINER_CID), (200, evaluation, EVAL_CID), (300, notebook, NB_CID)):
        write_cgroup(proc, pid, pod["metadata"]["uid"], cid)
    (proc / "400").mkdir()
    (proc / "400" / "cgroup").write_text("0::/system.slice/leftover.service\n")
    config = kubernetes_settings(
            Config(kubernetes=True, node_name=JOIN_NODE, pod_resources_socket=fake.socket_path,
                    pod_resources_interval_ms=20, kubeconfig=str(cluster.kubeconfig), proc_root=str(proc),
                    process_attribution=process_attribution, kubernetes_enable_pod_uid=True,
                    kubernetes_enable_pod_labels=True, kubernetes_pod_label_allowlist_regex=("^app$",)))
    attribution = KubernetesAttribution(config, watch_timeouts=WatchTimeouts(backoff_initial_s=0.2, backoff_max_s=1.0))
    attribution.start()
    try:
        def joined() -> AttributionSnapshot | None:
            snapshot = attribution.snapshot(DEVICES, MIGS)
            held = snapshot.allocation(GPU0)
            ready = held is not None and held.holders[0].workload.pod_uid and snapshot.status.api_up
            return snapshot if ready and snapshot.status.pods_known == 3 else None

        snapshot = poll("the kubelet's allocation joined with the real pods", joined, deadline_s=60)
        held = snapshot.allocation(GPU0)
        assert held is not None and not held.shared
        assert held.holders[0].workload == Workload(ml, "trainer-0", "trainer", pod_uid=trainer["metadata"]["uid"],
                                                    team="vision", pod_labels=(("app", "trainer"),))
        shared = snapshot.allocation(GPU1)
        assert shared is not None and shared.shared
        assert [(h.workload.pod, h.replica_ids, h.workload.team) for h in shared.holders] == [
            ("nb", ("3",), None), ("eval-0", ("0",), "research")]
        mig = snapshot.allocation(GPU2, 3)
        assert mig is not None and mig.holders[0].workload.pod == "nb"

        attribution.update_processes({
            GPU0: [GpuProcess(100, 8 << 30)],
            GPU1: [GpuProcess(200, 2 << 30), GpuProcess(300, 1 << 30), GpuProcess(400, 512 << 20)],
            GPU2: [GpuProcess(300, 3 << 30, gpu_instance_id=3, compute_instance_id=0)],
        })
        snapshot = attribution.snapshot(DEVICES, MIGS)
        memory = {(m.uuid, m.gpu_instance_id, m.workload.pod): m.used_bytes for m in snapshot.container_memory}
        if not process_attribution:  # the default: process lists are not read at all
            assert memory == {} and snapshot.processes == ()
            return
        assert memory == {(GPU0, None, "trainer-0"): 8 << 30, (GPU1, None, "eval-0"): 2 << 30,
                          (GPU1, None, "nb"): 1 << 30, (GPU2, 3, "nb"): 3 << 30}
        assert [(p.pid, p.workload.pod if p.workload else None) for p in snapshot.processes] == [
            (100, "trainer-0"), (200, "eval-0"), (300, "nb"), (400, None), (300, "nb")]
    finally:
        attribution.stop()
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
        delete_namespaces(admin, JOIN_NODE, ml, lab)
