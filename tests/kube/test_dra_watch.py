"""DRA attribution live: fake kubelet + fake API server, the ResourceSlice watch through the reflector
in the situations a real API server cannot be put in on demand: an API outage, a cluster serving only
``resource.k8s.io/v1beta1``, a cluster without the DRA API. Real sockets and threads; every wait polls
with a deadline.

A slice that appears late and the real server's 403 for an identity without ResourceSlice rights run
against the real control plane: tests/platform/test_dra_watch.py (docs/testing.md lists where each
test went)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.composition import kubernetes_settings
from exporter.config import Config
from exporter.kube import dra
from exporter.kube.attribution import AttributionSnapshot, KubernetesAttribution
from exporter.kube.metadata import WatchTimeouts
from exporter.kube.settings import KubernetesSettings
from simulator.dra_devices import DRIVER, gpu_device, mig_device
from simulator.fakeaccess import DRA_GRANTS
from simulator.fakeapiserver import FakeApiServer
from simulator.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod

from .helpers import DEVICES, GPU0, GPU1, GPU2, MIG_A, MIGS, poll

NODE = "node-a"
FAST = WatchTimeouts(connect_s=1.0, list_read_s=1.0, watch_s=5, watch_read_slack_s=1.0,
                     backoff_initial_s=0.02, backoff_max_s=0.1)
GPU1_DEVICE = gpu_device(1, GPU1)
MIG_A_DEVICE = mig_device(2, GPU2, MIG_A, "3g.40gb", 3)


@dataclass
class Node:
    kubelet: FakeKubelet
    api: FakeApiServer
    config: KubernetesSettings


@pytest.fixture
def node(short_tmp: Path) -> Iterator[Node]:
    api = FakeApiServer(NODE, bookmark_interval_s=0.2).start()
    api.access.grant(DRA_GRANTS)
    api.add_namespace("ml")
    for pod in ("plugin-0", "trainer-0", "nb"):
        api.add_pod("ml", pod)
    kubelet = FakeKubelet(short_tmp / "kubelet.sock", [
        FakePod("ml", "plugin-0", (FakeContainer("main", (("nvidia.com/gpu", GPU0),)),)),
        FakePod("ml", "trainer-0", (FakeContainer("trainer", claims=(FakeClaim("ml", "train-gpu", (
            FakeClaimDevice(DRIVER, NODE, GPU1_DEVICE[0]),)),)),)),
        FakePod("ml", "nb", (FakeContainer("jupyter", claims=(FakeClaim("ml", "nb-mig", (
            FakeClaimDevice(DRIVER, NODE, MIG_A_DEVICE[0]),)),)),)),
    ], seed=5).start()
    config = kubernetes_settings(
            Config(kubernetes=True, node_name=NODE, pod_resources_socket=kubelet.socket_path,
                    pod_resources_interval_ms=20, kubeconfig=str(api.write_kubeconfig(short_tmp / "kubeconfig")),
                    kubernetes_enable_dra=True))
    yield Node(kubelet, api, config)
    kubelet.stop()
    api.stop()


def _attribution(node: Node, timeouts: WatchTimeouts = FAST) -> KubernetesAttribution:
    attribution = KubernetesAttribution(node.config, watch_timeouts=timeouts)
    attribution.start()
    return attribution


def _snapshot(attribution: KubernetesAttribution) -> AttributionSnapshot:
    return attribution.snapshot(DEVICES, MIGS)


def _pod(snapshot: AttributionSnapshot, uuid: str, gpu_instance_id: int | None = None) -> str | None:
    allocation = snapshot.allocation(uuid, gpu_instance_id)
    return allocation.holders[0].workload.pod if allocation is not None and allocation.holders else None


def test_the_last_known_mapping_survives_an_api_outage_until_it_is_stale(node: Node) -> None:
    node.api.add_resource_slice(f"{NODE}-gpus", DRIVER, NODE, [GPU1_DEVICE, MIG_A_DEVICE])
    attribution = _attribution(node, dataclasses.replace(FAST, stale_after_s=1.5))
    try:
        poll(lambda: _pod(_snapshot(attribution), GPU1), what="DRA GPU attributed")
        node.api.set_outage("503")
        snapshot = poll(lambda: "503" in (s := _snapshot(attribution)).status.resourceslices_error and s,
                        what="the ResourceSlice watch down")
        assert not snapshot.status.resourceslices_up
        assert _pod(snapshot, GPU1) == "trainer-0" and _pod(snapshot, GPU2, 3) == "nb"  # last known
        snapshot = poll(lambda: (s := _snapshot(attribution)).unresolved.get(dra.SLICES_UNAVAILABLE) == 2 and s,
                        timeout_s=20, what="the mirror dropped after stale_after_s")
        assert _pod(snapshot, GPU1) is None and _pod(snapshot, GPU0) == "plugin-0"
        node.api.set_outage(None)
        poll(lambda: _pod(_snapshot(attribution), GPU1) == "trainer-0", timeout_s=20, what="relisted after the outage")
    finally:
        attribution.stop()


def test_a_cluster_serving_only_v1beta1_is_watched_there(node: Node) -> None:
    node.api.resource_versions = ("v1beta1",)
    node.api.add_resource_slice(f"{NODE}-gpus", DRIVER, NODE, [GPU1_DEVICE, MIG_A_DEVICE])
    attribution = _attribution(node)
    try:
        poll(lambda: _pod(s := _snapshot(attribution), GPU2, 3) and s.status.resourceslices_up,
             what="resolved through v1beta1, the watch held")
        paths = [path for verb, path, _ in node.api.requests if "resource.k8s.io" in path or path == "resourceslices"]
        assert paths[:2] == ["/apis/resource.k8s.io/v1/resourceslices", "/apis/resource.k8s.io/v1beta2/resourceslices"]
        watched = [query for verb, path, query in node.api.requests if path == "resourceslices"]
        assert watched and all(query.get("fieldSelector") == f"spec.nodeName={NODE}" for query in watched)
    finally:
        attribution.stop()


def test_a_cluster_without_the_dra_api_says_so_and_keeps_device_plugin_gpus(node: Node) -> None:
    node.api.resource_versions = ()
    attribution = _attribution(node)
    try:
        snapshot = poll(lambda: "DRA is not enabled in this cluster" in (s := _snapshot(attribution))
                        .status.resourceslices_error and s, what="404 from every resource.k8s.io version")
        assert "404" in snapshot.status.resourceslices_error and snapshot.status.api_up
        assert _pod(snapshot, GPU0) == "plugin-0" and snapshot.unresolved[dra.SLICES_UNAVAILABLE] == 2
        tried = [path for _, path, _ in node.api.requests if path.startswith("/apis/resource.k8s.io/")]
        assert tried[:3] == [f"/apis/resource.k8s.io/{version}/resourceslices" for version in ("v1", "v1beta2",
                                                                                                 "v1beta1")]
    finally:
        attribution.stop()


def test_nothing_is_unresolved_before_nvml_lists_the_devices(node: Node) -> None:
    """At start-up the slice may be mirrored before the first NVML device list: every published UUID
    would then look like no GPU here. Until the inventory is known every reason counts 0; once it
    is, only what is really unresolved counts."""
    node.api.add_resource_slice(f"{NODE}-gpus", DRIVER, NODE, [GPU1_DEVICE, MIG_A_DEVICE])
    attribution = _attribution(node)
    try:
        poll(lambda: _pod(_snapshot(attribution), GPU1), what="DRA GPU attributed")
        before_inventory = attribution.snapshot((), ())
        assert dict(before_inventory.unresolved) == {reason: 0 for reason in dra.REASONS}
        assert dict(_snapshot(attribution).unresolved) == {reason: 0 for reason in dra.REASONS}
        only_gpus = attribution.snapshot(DEVICES, ())  # the MIG device is really not on this node now
        assert only_gpus.unresolved[dra.NOT_ON_NODE] == 1
    finally:
        attribution.stop()
