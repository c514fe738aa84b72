"""Pod attribution read from a REAL kubelet's PodResources server (issue 40).

Two real kubelet nodes join the session's control plane for this module (``devcluster.kubelets``):
``kubelet-0`` advertises NVIDIA's mixed strategy (whole GPUs by UUID beside ``nvidia.com/mig-1g.10gb``
devices), ``kubelet-1`` time-slicing replicas ``<uuid>::<n>`` and later GKE's ``nvidia<minor>``; each
runs Kubernetes' fake CRI (containers exit as their command declares) and our device plugin. Pods
are created in the API server and scheduled by the real scheduler; the kubelet admits them, calls
the device plugin's Allocate, and its PodResources server answers what its device manager
assigned. The exporter reads that socket as a user runs it: a process with the chart's
ServiceAccount token (the chart installed with the helm CLI), the simulator standing in for NVML
only.

Each case records the attribution the exporter served (pod, namespace, container, device IDs);
``-s`` prints the table (docs/testing.md, "Real kubelet").
"""

from __future__ import annotations

import os
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from devcluster import kubelets
from devcluster.api import Api, ApiError
from devcluster.control_plane import Cluster
from devcluster.kubelets import Gpu, KubeletNode
from exporter.kube.podresources import api_pb2, api_pb2_grpc
from exporter.kube.podresources.listing import gpu_resource_filter, listing_from_response
from simulator.fakekubelet import RATE_LIMIT_MESSAGE
from tests.deploy.chart_support import CHART_DIR
from tests.doctor.conftest import clean_environment
from tests.doctor.support import doctor
from tests.platform.support import chart_exporter_kubeconfig, ensure_namespace, poll
from tests.support.exporter_process import ExporterProcess, running_exporter
from tests.support.kube_cluster import scenario_gpus

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "attribution-node.yaml"
GPUS = scenario_gpus(SCENARIO)
NAMESPACE = "gpu-monitoring-kubelet"
RELEASE = "realkubelet"
WORKLOADS = "ml-real"
TABLE: list[tuple[str, str, str, str, str]] = []  # case, pod, namespace, container, device IDs


def record_difference(what: str, real: str) -> None:
    """What the real kubelet answered where our fakes had a reading of their own (docs/testing.md)."""
    print(f"[real kubelet] {what}: {real}")


@pytest.fixture(scope="module")
def nodes(cluster: Cluster) -> Iterator[list[KubeletNode]]:
    """Two real kubelet nodes on the session's cluster, removed (processes, Node objects, their
    pods) at the module's end."""
    missing = kubelets.missing_prerequisites()
    if missing:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"real kubelet nodes need {missing}; CI=true requires them", pytrace=False)
        pytest.skip(f"real kubelet nodes need {missing}")
    try:
        added = kubelets.start(cluster, 2, modes=("mixed", "time-slicing"),
                               gpus=[Gpu(g.uuid, g.minor) for g in GPUS], dra=True,
                               log=lambda line: print(f"[kubelets] {line}"))
    except Exception as exc:  # a machine that cannot run them (not root, no unshare) fails, never skips
        pytest.fail(f"real kubelet nodes did not start: {exc}", pytrace=False)
    try:
        yield added
    finally:
        kubelets.remove(cluster)
        if TABLE:
            print("\n| case | pod | namespace | container | device IDs |\n|---|---|---|---|---|")
            for row in TABLE:
                print("| " + " | ".join(row) + " |")


@pytest.fixture(scope="module")
def exporter_kubeconfig(admin: Api, helm: Callable[..., Any], sa_token: Callable[..., str],
                        token_kubeconfig: Callable[[str, Path], Path],
                        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The chart installed with the helm CLI; a kubeconfig with its exporter ServiceAccount's token."""
    ensure_namespace(admin, WORKLOADS, {"team": "research"})
    with chart_exporter_kubeconfig(admin, helm, sa_token, token_kubeconfig, tmp_path_factory.mktemp("realkubelet"),
                                   release=RELEASE, namespace=NAMESPACE, chart_dir=CHART_DIR) as path:
        yield path


def pod_manifest(name: str, node: KubeletNode, resources: dict[str, int], *, command: list[str] | None = None,
                 containers: tuple[str, ...] = ("main",), restart: str = "Always") -> dict[str, Any]:
    """A pod for a real kubelet node: scheduled there by the real scheduler (node selector and the
    nodes' taint), no service-account token (nothing reads it; the kubelet would mount a tmpfs)."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node.name},
                     "tolerations": [kubelets.toleration()], "automountServiceAccountToken": False,
                     "restartPolicy": restart, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": c, "image": "registry.invalid/cuda:12", "command": command or ["sleep"],
                                     "resources": {"limits": {k: str(v) for k, v in resources.items()}}}
                                    for c in containers]}}


def create(admin: Api, manifest: dict[str, Any]) -> None:
    admin.create(f"/api/v1/namespaces/{WORKLOADS}/pods", manifest)


def phase(admin: Api, name: str) -> str:
    try:
        return str((admin.get(f"/api/v1/namespaces/{WORKLOADS}/pods/{name}").get("status") or {}).get("phase", ""))
    except ApiError as exc:
        if exc.status == 404:
            return "Gone"
        raise


def wait_phase(admin: Api, name: str, wanted: str) -> None:
    poll(f"pod {name} {wanted} (the real kubelet's status)", lambda: phase(admin, name) == wanted, 120)


def delete(admin: Api, name: str) -> None:
    admin.request("DELETE", f"/api/v1/namespaces/{WORKLOADS}/pods/{name}")


def rpc(node: KubeletNode, call: Callable[[api_pb2_grpc.PodResourcesListerStub], Any]) -> Any:
    """One call on a new channel; asked again while the kubelet's rate limit rejects it (the burst
    test empties the node-wide bucket)."""
    end = time.monotonic() + 30
    while True:
        with grpc.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
            try:
                return call(api_pb2_grpc.PodResourcesListerStub(channel))
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > end:
                    raise
        time.sleep(0.1)


def listed(node: KubeletNode) -> dict[tuple[str, str], dict[str, tuple[str, ...]]]:
    """(namespace, pod) -> container -> device IDs, as the exporter reduces the kubelet's List."""
    response = rpc(node, lambda s: s.List(api_pb2.ListPodResourcesRequest(), timeout=10))
    listing = listing_from_response(response, gpu_resource_filter())
    return {(p.namespace, p.name): {c.name: tuple(d.device_id for d in c.devices) for c in p.containers}
            for p in listing.pods}


def raw_pods(node: KubeletNode) -> dict[tuple[str, str], list[str]]:
    """Every pod List names (with or without devices): (namespace, pod) -> its containers."""
    response = rpc(node, lambda s: s.List(api_pb2.ListPodResourcesRequest(), timeout=10))
    return {(p.namespace, p.name): [c.name for c in p.containers] for p in response.pod_resources}


def devices_of(node: KubeletNode, pod: str) -> dict[str, tuple[str, ...]]:
    return poll(f"{pod} listed with devices by {node.name}'s PodResources",
                lambda: listed(node).get((WORKLOADS, pod)), 60)


def exporter_for(node: KubeletNode, kubeconfig: Path, interval_ms: int = 1000, dra: bool = False) -> Any:
    return running_exporter(["--simulate", str(SCENARIO), "-c", "200", "-k",
                             "--pod-resources-kubelet-socket", str(node.pod_resources_socket),
                             "--kubeconfig", str(kubeconfig), "--node-name", node.name,
                             "--pod-resources-interval", str(interval_ms),
                             *(["--kubernetes-enable-dra"] if dra else [])])


def served(exporter: ExporterProcess) -> dict[str, tuple[str, str, str]]:
    """GPU UUID -> (pod, namespace, container) the exporter serves (DCGM_EXP_GPU_ALLOCATION_INFO)."""
    return {labels["UUID"]: (labels.get("pod", ""), labels.get("namespace", ""), labels.get("container", ""))
            for labels, _ in exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO") if labels.get("pod")}


def record(case: str, pod: str, container: str, ids: tuple[str, ...], namespace: str = WORKLOADS) -> None:
    TABLE.append((case, pod, namespace, container, ", ".join(ids)))


def allocatable_ids(node: KubeletNode) -> set[str]:
    answer = rpc(node, lambda s: s.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=10))
    return {d for entry in answer.devices for d in entry.device_ids}


def uuid_by_minor(minor: int) -> str:
    return next(g.uuid for g in GPUS if g.minor == minor)


def test_whole_gpus_attributed_from_the_real_device_manager(admin: Api, nodes: list[KubeletNode],
                                                            exporter_kubeconfig: Path) -> None:
    node = nodes[0]
    whole = kubelets.device_resources("mixed", [Gpu(g.uuid, g.minor) for g in GPUS])["nvidia.com/gpu"]
    create(admin, pod_manifest("train-two", node, {"nvidia.com/gpu": 2}, containers=("main",)))
    create(admin, pod_manifest("infer-one", node, {"nvidia.com/gpu": 1}, containers=("init-free", "server")))
    wait_phase(admin, "train-two", "Running")
    wait_phase(admin, "infer-one", "Running")
    two = devices_of(node, "train-two")
    one = poll("both containers of infer-one listed", lambda: (d := listed(node).get((WORKLOADS, "infer-one")))
               and len(d) == 2 and d, 60)
    assert list(two) == ["main"] and len(two["main"]) == 2, two
    assert sorted(one) == ["init-free", "server"] and all(len(ids) == 1 for ids in one.values()), one
    held = [*two["main"], *one["init-free"], *one["server"]]
    assert len(set(held)) == 4 and set(held) <= set(whole), held  # the device manager never shares a device
    with exporter_for(node, exporter_kubeconfig) as exporter:
        exporter.wait_healthy(deadline_s=60)
        want = {uuid: ("train-two", WORKLOADS, "main") for uuid in two["main"]}
        want |= {one[c][0]: ("infer-one", WORKLOADS, c) for c in one}
        poll("the exporter serves every GPU the kubelet assigned", lambda: served(exporter) == want, 90)
    for pod, containers in (("train-two", two), ("infer-one", one)):
        for container, ids in containers.items():
            record("whole GPUs", pod, container, ids)
    # What the API server says each pod holds: its containers' limits, which the kubelet's
    # assignment matches in count.
    spec = admin.get(f"/api/v1/namespaces/{WORKLOADS}/pods/infer-one")["spec"]
    assert [c["resources"]["limits"]["nvidia.com/gpu"] for c in spec["containers"]] == ["1", "1"]


def test_get_and_get_allocatable_resources(nodes: list[KubeletNode]) -> None:
    node = nodes[0]
    resources = kubelets.device_resources("mixed", [Gpu(g.uuid, g.minor) for g in GPUS])
    allocatable = rpc(node, lambda s: s.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=10))
    got: dict[str, set[str]] = {}
    for entry in allocatable.devices:
        got.setdefault(entry.resource_name, set()).update(entry.device_ids)
    assert got == {name: set(ids) for name, ids in resources.items()}
    pod = rpc(node, lambda s: s.Get(api_pb2.GetPodResourcesRequest(pod_name="train-two", pod_namespace=WORKLOADS),
                                    timeout=10)).pod_resources
    assert pod.name == "train-two" and [c.name for c in pod.containers] == ["main"]
    assert {d for entry in pod.containers[0].devices for d in entry.device_ids} == \
        set(listed(node)[(WORKLOADS, "train-two")]["main"])
    with pytest.raises(grpc.RpcError) as missing:
        rpc(node, lambda s: s.Get(api_pb2.GetPodResourcesRequest(pod_name="nope", pod_namespace=WORKLOADS), timeout=10))
    record_difference("Get of an unknown pod", f"{missing.value.code().name}: {missing.value.details()}")
    # The raw shape of one pod's entry: container order, one entry per device ID or one per
    # container, topology.
    raw = rpc(node, lambda s: s.List(api_pb2.ListPodResourcesRequest(), timeout=10))
    entry = next(p for p in raw.pod_resources if p.name == "infer-one")
    record_difference("List entry of infer-one", str([(c.name, [(d.resource_name, list(d.device_ids),
                                                                   d.HasField("topology")) for d in c.devices])
                                                       for c in entry.containers]))
    record_difference("pods List names", str(sorted(f"{p.namespace}/{p.name}" for p in raw.pod_resources)))
    # The rate limit: 40 Lists at once on one channel, against a burst of 10.
    codes: list[str] = []
    with grpc.insecure_channel(f"unix://{node.pod_resources_socket}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        calls = [stub.List.future(api_pb2.ListPodResourcesRequest(), timeout=10) for _ in range(40)]
        for call in calls:
            try:
                call.result()
                codes.append("OK")
            except grpc.RpcError as exc:
                codes.append(f"{exc.code().name}: {exc.details()}")
    rejected = sorted({c for c in codes if c != "OK"})
    record_difference("40 concurrent Lists", f"{codes.count('OK')} OK, rejected: {rejected}")
    # One bucket for every method (the calls just before took tokens too): what is rejected is
    # rejected as our fake rejects it; how many depends on timing, so it is printed, not asserted.
    assert codes.count("OK") >= 1
    assert set(rejected) <= {f"RESOURCE_EXHAUSTED: {RATE_LIMIT_MESSAGE}"}, rejected


def test_mig_devices(admin: Api, nodes: list[KubeletNode]) -> None:
    node = nodes[0]
    migs = kubelets.device_resources("mixed", [Gpu(g.uuid, g.minor) for g in GPUS])["nvidia.com/mig-1g.10gb"]
    create(admin, pod_manifest("mig-small", node, {"nvidia.com/mig-1g.10gb": 1}))
    wait_phase(admin, "mig-small", "Running")
    ids = devices_of(node, "mig-small")["main"]
    assert len(ids) == 1 and ids[0] in migs, ids
    record("MIG 1g.10gb", "mig-small", "main", ids)


def test_finished_deleted_and_recreated_pods(admin: Api, nodes: list[KubeletNode]) -> None:
    node = nodes[0]
    # kubelet-0's four whole GPUs are held by train-two and infer-one: the batch pod takes a MIG device.
    create(admin, pod_manifest("batch-once", node, {"nvidia.com/mig-1g.10gb": 1}, command=["exit-after=3s"],
                               restart="Never"))
    record("running, before it finishes", "batch-once", "main", devices_of(node, "batch-once")["main"])
    wait_phase(admin, "batch-once", "Succeeded")
    # What List says of a pod whose containers have all exited: recorded, then the rule the
    # exporter relies on asserted (a finished pod holds no GPU in its answer).
    after = raw_pods(node)
    record_difference("List after the pod Succeeded", "listed" if (WORKLOADS, "batch-once") in after else "absent")
    assert (WORKLOADS, "batch-once") not in after  # 1.34+: List returns active pods only
    try:
        got = rpc(node, lambda s: s.Get(api_pb2.GetPodResourcesRequest(pod_name="batch-once", pod_namespace=WORKLOADS),
                                        timeout=10)).pod_resources
        answer = str([(c.name, [list(d.device_ids) for d in c.devices]) for c in got.containers])
    except grpc.RpcError as exc:
        answer = f"{exc.code().name}: {exc.details()}"
    record_difference("Get of the Succeeded pod", answer)
    # Deleted: gone from List once the kubelet has confirmed the deletion.
    delete(admin, "train-two")
    poll("train-two gone from the API server", lambda: phase(admin, "train-two") == "Gone", 120)
    poll("train-two gone from List", lambda: (WORKLOADS, "train-two") not in raw_pods(node), 60)
    # Re-created with the same name: listed again, with the devices of its new admission.
    create(admin, pod_manifest("train-two", node, {"nvidia.com/gpu": 1}))
    wait_phase(admin, "train-two", "Running")
    again = devices_of(node, "train-two")
    assert len(again["main"]) == 1, again
    record("re-created, same name", "train-two", "main", again["main"])


def test_kubelet_restart_restores_the_device_checkpoint(cluster: Cluster, admin: Api,
                                                        nodes: list[KubeletNode]) -> None:
    node = nodes[0]
    before = poll("infer-one and mig-small listed", lambda: (d := listed(node)) and (WORKLOADS, "infer-one") in d
                  and (WORKLOADS, "mig-small") in d and d, 60)
    old = node.pod_resources_socket.stat().st_ino
    kubelets.restart_kubelet(cluster, node)

    def answered_anew() -> dict[tuple[str, str], dict[str, tuple[str, ...]]] | None:
        try:
            if node.pod_resources_socket.stat().st_ino == old:
                return None
            found = listed(node)
        except (OSError, grpc.RpcError):
            return None
        return found if (WORKLOADS, "infer-one") in found else None

    after = poll("the restarted kubelet's PodResources socket answers", answered_anew, 120)
    for key in ((WORKLOADS, "infer-one"), (WORKLOADS, "mig-small")):
        assert after[key] == before[key], (key, before[key], after[key])
    record("after a kubelet restart", "infer-one", "server", after[(WORKLOADS, "infer-one")]["server"])


def test_time_slicing_replicas_and_gke_names(cluster: Cluster, admin: Api, nodes: list[KubeletNode],
                                             exporter_kubeconfig: Path) -> None:
    node = nodes[1]
    create(admin, pod_manifest("slice-a", node, {"nvidia.com/gpu": 1}))
    create(admin, pod_manifest("slice-b", node, {"nvidia.com/gpu": 1}))
    wait_phase(admin, "slice-a", "Running")
    wait_phase(admin, "slice-b", "Running")
    a, b = devices_of(node, "slice-a")["main"], devices_of(node, "slice-b")["main"]
    assert all("::" in d for d in (*a, *b)) and a != b, (a, b)
    with exporter_for(node, exporter_kubeconfig) as exporter:
        exporter.wait_healthy(deadline_s=60)
        parents = {d.split("::")[0] for d in (*a, *b)}

        def on_parents() -> bool:
            rows = exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO")
            pods = {labels.get("pod") for labels, _ in rows if labels["UUID"] in parents}
            return {"slice-a", "slice-b"} <= pods

        poll("both time-slicing pods on their GPUs' series", on_parents, 90)
    record("time-slicing", "slice-a", "main", a)
    record("time-slicing", "slice-b", "main", b)
    # A native sidecar (restartable init container) holding a replica beside the main container:
    # the container order List gives, which our fake reproduces (sidecars first).
    manifest = pod_manifest("slice-sidecar", node, {"nvidia.com/gpu": 1})
    manifest["spec"]["initContainers"] = [{**manifest["spec"]["containers"][0], "name": "sidecar",
                                           "restartPolicy": "Always"}]
    create(admin, manifest)
    wait_phase(admin, "slice-sidecar", "Running")
    both = poll("both containers of slice-sidecar listed",
                lambda: (d := listed(node).get((WORKLOADS, "slice-sidecar"))) and len(d) == 2 and d, 60)
    record_difference("container order of a pod with a native sidecar", str(list(both)))
    for container, ids in both.items():
        record("native sidecar", "slice-sidecar", container, ids)
    assert list(both) == ["sidecar", "main"], both
    for name in ("slice-a", "slice-b", "slice-sidecar"):
        delete(admin, name)
    poll("the time-slicing pods gone",
         lambda: all(phase(admin, n) == "Gone" for n in ("slice-a", "slice-b", "slice-sidecar")), 120)
    # GKE's device plugin names GPUs nvidia<minor>: the same node's plugin, re-registered.
    gke = kubelets.device_resources("gke", [Gpu(g.uuid, g.minor) for g in GPUS])
    kubelets.start_device_plugin(cluster, node, gke)
    poll("the kubelet's allocatable shows the GKE names",
         lambda: allocatable_ids(node) >= set(gke["nvidia.com/gpu"]), 90)
    create(admin, pod_manifest("gke-job", node, {"nvidia.com/gpu": 1}))
    wait_phase(admin, "gke-job", "Running")
    ids = devices_of(node, "gke-job")["main"]
    assert len(ids) == 1 and ids[0].startswith("nvidia"), ids
    with exporter_for(node, exporter_kubeconfig) as exporter:
        exporter.wait_healthy(deadline_s=60)
        uuid = uuid_by_minor(int(ids[0].removeprefix("nvidia")))
        poll(f"{ids[0]} attributed to GPU {uuid}",
             lambda: served(exporter).get(uuid) == ("gke-job", WORKLOADS, "main"), 90)
    record("GKE nvidia<minor>", "gke-job", "main", ids)


def test_doctor_on_a_real_kubelet_node(nodes: list[KubeletNode], exporter_kubeconfig: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpu-pod-exporter doctor`` with the chart's identity against the real kubelet's socket."""
    node = nodes[0]
    clean_environment(monkeypatch)
    run = doctor("--simulate", str(SCENARIO), "-k", "--kubeconfig", str(exporter_kubeconfig), "--node-name", node.name,
                 "--pod-resources-kubelet-socket", str(node.pod_resources_socket), "--json", "--timeout", "10",
                 "--address", "127.0.0.1:0")
    for check in ("socket", "list"):
        row = run.row("kubelet", check)
        print(f"[doctor] kubelet / {check}: {row['verdict']}: {row.get('detail', row)}")
        assert row["verdict"] == "ok", row
    assert "holding devices" in str(run.row("kubelet", "list"))


def kubelet_list_requests(cluster: Cluster, node: KubeletNode) -> float:
    """The kubelet's own count of PodResources List requests (its /metrics, admin client certificate)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the kubelet's self-signed serving certificate
    context.load_cert_chain(str(cluster.admin_cert), str(cluster.admin_key))
    with urllib.request.urlopen(f"https://127.0.0.1:{node.port}/metrics", context=context, timeout=10) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kubelet_pod_resources_endpoint_requests_list"))


def test_polling_stays_under_the_kubelets_rate_limit(cluster: Cluster, nodes: list[KubeletNode],
                                                     exporter_kubeconfig: Path) -> None:
    """One exporter at its fastest interval (1 s) against the kubelet's 100 QPS (burst 10): counted
    by the kubelet itself over the exporter's own count of polls, never by timing a call."""
    node = nodes[0]
    with exporter_for(node, exporter_kubeconfig, interval_ms=1000) as exporter:
        exporter.wait_healthy(deadline_s=60)
        start_count, start = kubelet_list_requests(cluster, node), time.monotonic()
        poll("a minute of polling", lambda: time.monotonic() - start >= 60, 90)
        count, elapsed = kubelet_list_requests(cluster, node) - start_count, time.monotonic() - start
    print(f"[real kubelet] List requests from one exporter: {count:.0f} in {elapsed:.0f} s "
          f"(limit 100/s, burst 10: {100 * elapsed:.0f})")
    # At most one List per interval, plus one for a poll in flight at each end of the window.
    assert count <= elapsed / 1.0 + 2, count
    assert count >= 1


def claims_of(node: KubeletNode, namespace: str, pod: str) -> dict[str, tuple[tuple[str, str, str, str], ...]]:
    """container -> (claim, driver, pool, device) of each DRA device, from List's dynamic_resources."""
    response = rpc(node, lambda s: s.List(api_pb2.ListPodResourcesRequest(), timeout=10))
    listing = listing_from_response(response, gpu_resource_filter(), dra=True)
    for p in listing.pods:
        if (p.namespace, p.name) == (namespace, pod):
            return {c.name: tuple((d.claim_name, d.driver, d.pool, d.device) for d in c.claims) for c in p.containers}
    return {}


def claim(admin: Api, namespace: str, name: str, count: int, admin_access: bool = False) -> None:
    exactly: dict[str, Any] = {"deviceClassName": kubelets.DRA_DRIVER, "count": count}
    if admin_access:
        exactly["adminAccess"] = True
    admin.create(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}})


def claim_pod(admin: Api, namespace: str, name: str, node: KubeletNode, claim_name: str) -> None:
    manifest = pod_manifest(name, node, {})
    manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    manifest["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
    admin.create(f"/api/v1/namespaces/{namespace}/pods", manifest)


def test_dra_claims_from_the_kubelets_dra_manager(admin: Api, nodes: list[KubeletNode],
                                                   exporter_kubeconfig: Path) -> None:
    """A claim shared by two pods, a claim with two GPUs, an admin-access claim: prepared by our
    DRA driver (kubeletplugin), reported by the kubelet's DRA manager in dynamic_resources."""
    node = nodes[1]
    admin.apply_create("/apis/resource.k8s.io/v1/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": kubelets.DRA_DRIVER},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{kubelets.DRA_DRIVER}"'}}]}})
    poll(f"{node.name}'s ResourceSlice published", lambda: any(
        s["spec"].get("nodeName") == node.name for s in admin.get("/apis/resource.k8s.io/v1/resourceslices")["items"]))
    ensure_namespace(admin, "ml-admin", {"resource.kubernetes.io/admin-access": "true"})
    claim(admin, WORKLOADS, "shared-one", 1)
    claim(admin, WORKLOADS, "two-gpus", 2)
    claim(admin, "ml-admin", "inspect-all", 1, admin_access=True)
    claim_pod(admin, WORKLOADS, "dra-a", node, "shared-one")
    claim_pod(admin, WORKLOADS, "dra-b", node, "shared-one")
    claim_pod(admin, WORKLOADS, "dra-pair", node, "two-gpus")
    claim_pod(admin, "ml-admin", "dra-admin", node, "inspect-all")
    for name in ("dra-a", "dra-b", "dra-pair"):
        wait_phase(admin, name, "Running")
    a = poll("dra-a's claim in dynamic_resources", lambda: claims_of(node, WORKLOADS, "dra-a"), 60)["main"]
    b = poll("dra-b's claim in dynamic_resources", lambda: claims_of(node, WORKLOADS, "dra-b"), 60)["main"]
    pair = poll("dra-pair's claim", lambda: claims_of(node, WORKLOADS, "dra-pair"), 60)["main"]
    inspect = poll("dra-admin's claim", lambda: claims_of(node, "ml-admin", "dra-admin"), 90)["main"]
    assert len(a) == 1 and a == b and a[0][:3] == ("shared-one", kubelets.DRA_DRIVER, node.name), (a, b)
    assert len(pair) == 2 and len({d[3] for d in pair}) == 2, pair
    assert len(inspect) == 1 and inspect[0][0] == "inspect-all", inspect
    for pod, devices, namespace in (("dra-a", a, WORKLOADS), ("dra-b", b, WORKLOADS), ("dra-pair", pair, WORKLOADS),
                                    ("dra-admin", inspect, "ml-admin")):
        record("DRA claim " + devices[0][0], pod, "main", tuple(f"{d[1]}/{d[2]}/{d[3]}" for d in devices), namespace)
    with exporter_for(node, exporter_kubeconfig, dra=True) as exporter:
        exporter.wait_healthy(deadline_s=60)
        uuid = GPUS[int(a[0][3].removeprefix("gpu-"))].uuid

        def shared() -> bool:
            pods = {labels.get("pod") for labels, _ in exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO")
                    if labels["UUID"] == uuid}
            return {"dra-a", "dra-b"} <= pods

        poll(f"both pods of the shared claim on GPU {uuid}", shared, 90)
