"""DRA attribution live: fake kubelet + fake API server, the ResourceSlice watch through the reflector,
a slice that appears late, an API outage, a cluster serving only an older API version, RBAC without
resourceslices. Real sockets and threads; every wait polls with a deadline."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter.config import Config
from exporter.kube import dra
from exporter.kube.attribution import AttributionSnapshot, KubernetesAttribution
from exporter.kube.metadata import WatchTimeouts
from exporter.simulate.dra_devices import DRIVER, gpu_device, mig_device
from exporter.simulate.fakeaccess import DRA_GRANTS
from exporter.simulate.fakeapiserver import FakeApiServer
from exporter.simulate.fakekubelet import FakeClaim, FakeClaimDevice, FakeContainer, FakeKubelet, FakePod

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
    config: Config


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
    config = Config(kubernetes=True, node_name=NODE, pod_resources_socket=kubelet.socket_path,
                    pod_resources_interval_ms=20, kubeconfig=str(api.write_kubeconfig(short_tmp / "kubeconfig")),
                    kubernetes_enable_dra=True)
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


def test_a_slice_that_appears_late_is_picked_up_and_logged_once_per_device(
        node: Node, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gpu_pod_exporter")
    attribution = _attribution(node)
    try:
        snapshot = poll(lambda: (s := _snapshot(attribution)).status.resourceslices_up
                        and s.unresolved.get(dra.SLICE_MISSING) == 2 and s, what="both DRA devices slice-missing")
        assert _pod(snapshot, GPU0) == "plugin-0"  # the device-plugin GPU does not wait for any slice
        assert _pod(snapshot, GPU1) is None and _pod(snapshot, GPU2, 3) is None
        for _ in range(20):  # many renders and kubelet polls later, still one line per device
            _snapshot(attribution)
        poll(lambda: node.kubelet.list_calls > 10, what="more kubelet polls")
        _snapshot(attribution)
        missing = sorted(((r.levelno, r.getMessage(), r.__dict__["fields"]) for r in caplog.records
                          if "is not attributed to a GPU" in r.getMessage()), key=lambda line: line[1])
        explained = dra.EXPLAINED[dra.SLICE_MISSING]
        assert missing == [  # what an operator reads, with the fields a log search filters on
            (logging.WARNING, f"DRA device {DRIVER}/{NODE}/{GPU1_DEVICE[0]} of claim ml/train-gpu (pod ml/trainer-0) "
             f"is not attributed to a GPU: {explained}",
             {"reason": dra.SLICE_MISSING, "driver": DRIVER, "pool": NODE, "device": GPU1_DEVICE[0],
              "claim": "ml/train-gpu"}),
            (logging.WARNING, f"DRA device {DRIVER}/{NODE}/{MIG_A_DEVICE[0]} of claim ml/nb-mig (pod ml/nb) "
             f"is not attributed to a GPU: {explained}",
             {"reason": dra.SLICE_MISSING, "driver": DRIVER, "pool": NODE, "device": MIG_A_DEVICE[0],
              "claim": "ml/nb-mig"}),
        ]

        node.api.add_resource_slice(f"{NODE}-gpus", DRIVER, NODE, [GPU1_DEVICE, MIG_A_DEVICE])
        snapshot = poll(lambda: _pod(s := _snapshot(attribution), GPU1) and s, what="the late slice resolving")
        assert _pod(snapshot, GPU1) == "trainer-0" and _pod(snapshot, GPU2, 3) == "nb"
        assert dict(snapshot.unresolved) == dict.fromkeys(dra.REASONS, 0)
        resolved = sorted(((r.levelno, r.getMessage(), r.__dict__["fields"]) for r in caplog.records
                           if "is attributed now" in r.getMessage()), key=lambda line: line[1])
        assert resolved == [
            (logging.INFO, f"DRA device {DRIVER}/{NODE}/{device} is attributed now, or no longer claimed",
             {"driver": DRIVER, "pool": NODE, "device": device})
            for device in sorted((GPU1_DEVICE[0], MIG_A_DEVICE[0]))]
        for _ in range(5):  # resolved devices are not announced again
            _snapshot(attribution)
        assert sum("is attributed now" in r.getMessage() for r in caplog.records) == 2
        assert ("resourceslices", "list", "200") in {key for key, _ in snapshot.status.api_requests}
    finally:
        attribution.stop()


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


def test_rbac_without_resourceslices_is_named_and_leaves_the_pod_watch_up(node: Node) -> None:
    node.api.access.forbid("resourceslices", "resource.k8s.io")
    attribution = _attribution(node)
    try:
        snapshot = poll(lambda: (s := _snapshot(attribution)).status.api_up and "403" in s.status.resourceslices_error
                        and s, what="403 on resourceslices")
        assert "kubernetesDRA.enabled" in snapshot.status.resourceslices_error
        assert not snapshot.status.resourceslices_up and _pod(snapshot, GPU0) == "plugin-0"
        assert snapshot.unresolved[dra.SLICES_UNAVAILABLE] == 2
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
