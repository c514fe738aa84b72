"""DRA attribution live against the REAL API server: the ResourceSlice watch (``exporter.kube.resourceslices``
through the reflector) and the API server's own RBAC answer.

Moved here from tests/kube/test_dra_watch.py, where a fake API server stood in for Kubernetes:

* a slice published after the exporter started is picked up by the watch (``resource.k8s.io/v1``,
  ``fieldSelector=spec.nodeName``, as the real server filters it), each unresolvable device logged
  once and its resolution once;
* an identity that may watch pods and namespaces but not ResourceSlices gets the real server's 403:
  the exporter names it with the chart value that fixes it, and the pod watch stays up.

The kubelet stays the fake one (there is none here). The fake API server keeps what the real one
cannot be made to do on demand: an outage, a cluster serving only ``v1beta1``, one without the DRA
API at all (tests/kube/test_dra_watch.py).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube import dra
from exporter.kube.attribution import AttributionSnapshot, KubernetesAttribution
from exporter.kube.metadata import WatchTimeouts
from exporter.kube.settings import KubernetesSettings
from simulator.dra_devices import DRIVER, gpu_device, mig_device
from simulator.fakeapiserver import resource_slice
from simulator.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod
from tests.kube.helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIGS
from tests.platform.support import bound_pod, delete_namespaces, ensure_namespace, poll

NODE = "dra-watch-node"  # no Node object: the pool and the pods' node, nothing else
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SERIAL = itertools.count()
TIMEOUTS = WatchTimeouts(backoff_initial_s=0.2, backoff_max_s=1.0)
GPU1_DEVICE = gpu_device(1, GPU1)
MIG_A_DEVICE = mig_device(2, GPU2, MIG_A, "3g.40gb", 3)


@dataclass
class Node:
    admin: Api
    kubelet: FakeKubelet
    namespace: str
    config: KubernetesSettings
    slice_name: str

    def attribution(self, kubeconfig: Path | None = None) -> KubernetesAttribution:
        config = self.config if kubeconfig is None else dataclasses.replace(
            self.config, api=dataclasses.replace(self.config.api, kubeconfig=str(kubeconfig)))
        attribution = KubernetesAttribution(config, watch_timeouts=TIMEOUTS)
        attribution.start()
        return attribution

    def publish(self) -> None:
        self.admin.create(SLICES, resource_slice(self.slice_name, DRIVER, NODE, [GPU1_DEVICE, MIG_A_DEVICE],
                                                 node_name=NODE))


@pytest.fixture
def node(cluster: Cluster, admin: Api) -> Iterator[Node]:
    namespace = f"dra-watch-{next(SERIAL)}"
    ensure_namespace(admin, namespace)
    for pod in ("plugin-0", "trainer-0", "nb"):
        bound_pod(admin, namespace, pod, NODE)
    root = Path(tempfile.mkdtemp(prefix="gpe-dra-"))  # short: unix socket paths are limited to 107 bytes
    kubelet = FakeKubelet(root / "kubelet.sock", [
        FakePod(namespace, "plugin-0", (FakeContainer("main", (("nvidia.com/gpu", GPU0),)),)),
        FakePod(namespace, "trainer-0", (FakeContainer("trainer", claims=(FakeClaim(namespace, "train-gpu", (
            FakeClaimDevice(DRIVER, NODE, GPU1_DEVICE[0]),)),)),)),
        FakePod(namespace, "nb", (FakeContainer("jupyter", claims=(FakeClaim(namespace, "nb-mig", (
            FakeClaimDevice(DRIVER, NODE, MIG_A_DEVICE[0]),)),)),)),
    ], seed=5).start()
    config = kubernetes_settings(
            Config(kubernetes=True, node_name=NODE, pod_resources_socket=kubelet.socket_path,
                    pod_resources_interval_ms=20, kubeconfig=str(cluster.kubeconfig), kubernetes_enable_dra=True))
    try:
        yield Node(admin, kubelet, namespace, config, f"{namespace}-gpus")
    finally:
        kubelet.stop()
        shutil.rmtree(root, ignore_errors=True)
        admin.delete(f"{SLICES}/{namespace}-gpus")
        delete_namespaces(admin, NODE, namespace)


def _pod(snapshot: AttributionSnapshot, uuid: str, gpu_instance_id: int | None = None) -> str | None:
    allocation = snapshot.allocation(uuid, gpu_instance_id)
    return allocation.holders[0].workload.pod if allocation is not None and allocation.holders else None


def test_a_slice_that_appears_late_is_picked_up_and_logged_once_per_device(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_pod_exporter")
    attribution = node.attribution()
    ns = node.namespace
    try:
        snapshot = poll("both DRA devices slice-missing, the watch held", lambda: (
            s := attribution.snapshot(DEVICES, MIGS)).status.resourceslices_up
            and s.unresolved.get(dra.SLICE_MISSING) == 2 and s, deadline_s=60)
        assert _pod(snapshot, GPU0) == "plugin-0"  # the device-plugin GPU does not wait for any slice
        assert _pod(snapshot, GPU1) is None and _pod(snapshot, GPU2, 3) is None
        calls = node.kubelet.list_calls
        poll("more kubelet polls", lambda: node.kubelet.list_calls > calls + 10)
        for _ in range(20):  # many renders and kubelet polls later, still one line per device
            attribution.snapshot(DEVICES, MIGS)
        missing = sorted(r.getMessage() for r in caplog.records if "is not attributed to a GPU" in r.getMessage())
        explained = dra.EXPLAINED[dra.SLICE_MISSING]
        assert missing == [
            f"DRA device {DRIVER}/{NODE}/{GPU1_DEVICE[0]} of claim {ns}/train-gpu (pod {ns}/trainer-0) "
            f"is not attributed to a GPU: {explained}",
            f"DRA device {DRIVER}/{NODE}/{MIG_A_DEVICE[0]} of claim {ns}/nb-mig (pod {ns}/nb) "
            f"is not attributed to a GPU: {explained}"]

        node.publish()  # the real server validates it, stores it, and sends it to the node's watch
        snapshot = poll("the late slice resolving", lambda: _pod(s := attribution.snapshot(DEVICES, MIGS), GPU1)
                        and s)
        assert _pod(snapshot, GPU1) == "trainer-0" and _pod(snapshot, GPU2, 3) == "nb"
        assert dict(snapshot.unresolved) == dict.fromkeys(dra.REASONS, 0)
        for _ in range(5):  # resolved devices are not announced again
            attribution.snapshot(DEVICES, MIGS)
        assert sorted(r.getMessage() for r in caplog.records if "is attributed now" in r.getMessage()) == [
            f"DRA device {DRIVER}/{NODE}/{device} is attributed now, or no longer claimed"
            for device in sorted((GPU1_DEVICE[0], MIG_A_DEVICE[0]))]
        requests = dict(snapshot.status.api_requests)
        assert requests[("resourceslices", "list", "200")] == 1  # the late slice came through the watch
    finally:
        attribution.stop()


def test_rbac_without_resourceslices_is_named_and_leaves_the_pod_watch_up(
        node: Node, admin: Api, sa_token: Callable[..., str], token_kubeconfig: Callable[[str, Path], Path],
        tmp_path: Path) -> None:
    """An identity with the exporter's rights before DRA (pods and namespaces), as a chart installed
    with kubernetesDRA.enabled=false and run with --kubernetes-enable-dra would give it."""
    name = f"{node.namespace}-no-slices"
    admin.create(f"/api/v1/namespaces/{node.namespace}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "exporter"}})
    admin.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]}]})
    admin.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "exporter", "namespace": node.namespace}]})
    try:
        kubeconfig = token_kubeconfig(sa_token(node.namespace, "exporter"), tmp_path / "kubeconfig")
        attribution = node.attribution(kubeconfig)
        try:
            snapshot = poll("403 on resourceslices, the pod watch up", lambda: (
                s := attribution.snapshot(DEVICES, MIGS)).status.api_up
                and "403" in s.status.resourceslices_error and s, deadline_s=60)
            assert "kubernetesDRA.enabled" in snapshot.status.resourceslices_error
            assert not snapshot.status.resourceslices_up and _pod(snapshot, GPU0) == "plugin-0"
            assert snapshot.unresolved[dra.SLICES_UNAVAILABLE] == 2
        finally:
            attribution.stop()
    finally:
        admin.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}")
        admin.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")
