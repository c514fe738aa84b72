"""The fake kubelet speaks PodResources v1 with the real kubelet's quirks."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from exporter.kube.podresources import api_pb2, api_pb2_grpc
from simulator.fakekubelet import RATE_LIMIT_MESSAGE, FakeContainer, FakeKubelet, FakePod

GPU_A = "GPU-aaaaaaaa-0000-1111-2222-333333333333"
GPU_B = "GPU-bbbbbbbb-0000-1111-2222-333333333333"
GPU_C = "GPU-cccccccc-0000-1111-2222-333333333333"
MIG = "MIG-dddddddd-0000-1111-2222-333333333333"

POD = FakePod(
    "ml",
    "trainer-0",
    (
        FakeContainer(
            "trainer", (("nvidia.com/gpu", GPU_A), ("nvidia.com/gpu", GPU_B), ("nvidia.com/gpu", GPU_C))
        ),
        FakeContainer("istio-proxy", sidecar=True),
        FakeContainer("metrics", (("nvidia.com/mig-1g.10gb", f"{MIG}::2"),), sidecar=True),
    ),
)


@pytest.fixture
def kubelet() -> Iterator[FakeKubelet]:
    directory = Path(tempfile.mkdtemp(prefix="gpe-"))
    fake = FakeKubelet(
        directory / "kubelet.sock",
        [POD, FakePod("default", "web", (FakeContainer("nginx"),))],
        numa_nodes={GPU_A: [0, 1], GPU_C: []},
    ).start()
    yield fake
    fake.stop()
    shutil.rmtree(directory, ignore_errors=True)


def _stub(kubelet: FakeKubelet) -> tuple[grpc.Channel, api_pb2_grpc.PodResourcesListerStub]:
    channel = grpc.insecure_channel(
        "unix://" + kubelet.socket_path, options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    return channel, api_pb2_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]


def test_list_has_the_kubelets_shape(kubelet: FakeKubelet) -> None:
    channel, stub = _stub(kubelet)
    with channel:
        response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
    pods = {(pod.namespace, pod.name): pod for pod in response.pod_resources}
    assert set(pods) == {("ml", "trainer-0"), ("default", "web")}  # GPU-less pods are listed too
    trainer = pods[("ml", "trainer-0")]
    assert [c.name for c in trainer.containers] == ["istio-proxy", "metrics", "trainer"]  # sidecars first
    entries = trainer.containers[2].devices
    assert all(len(entry.device_ids) == 1 for entry in entries)  # one entry per device ID
    ids = sorted(entry.device_ids[0] for entry in entries)
    assert ids == sorted([GPU_A, GPU_A, GPU_B, GPU_C])  # GPU_A is on two NUMA nodes
    by_id = {(entry.device_ids[0], tuple(n.ID for n in entry.topology.nodes)) for entry in entries}
    assert (GPU_A, (0,)) in by_id and (GPU_A, (1,)) in by_id and (GPU_C, ()) in by_id
    assert trainer.containers[1].devices[0].device_ids == [f"{MIG}::2"]
    assert list(pods[("default", "web")].containers[0].devices) == []


def test_order_changes_between_calls(kubelet: FakeKubelet) -> None:
    kubelet.set_rate_limit(qps=1000.0, burst=100)  # twenty quick calls would exceed the real burst of 10
    channel, stub = _stub(kubelet)
    orders = set()
    with channel:
        for _ in range(20):
            response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
            trainer = next(p for p in response.pod_resources if p.name == "trainer-0")
            orders.add(tuple(entry.device_ids[0] for entry in trainer.containers[2].devices))
    assert len(orders) > 1


def test_rate_limit_rejects_bursts(kubelet: FakeKubelet) -> None:
    kubelet.set_rate_limit(qps=1.0, burst=10)
    channel, stub = _stub(kubelet)
    codes = []
    with channel:
        for _ in range(15):
            try:
                stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
                codes.append("OK")
            except grpc.RpcError as exc:
                assert exc.details() == RATE_LIMIT_MESSAGE  # type: ignore[attr-defined]
                codes.append(exc.code().name)  # type: ignore[attr-defined]
    assert codes[:10] == ["OK"] * 10  # the burst
    assert "RESOURCE_EXHAUSTED" in codes[10:]
    assert kubelet.rejected_calls == codes.count("RESOURCE_EXHAUSTED")


def test_get_and_allocatable(kubelet: FakeKubelet) -> None:
    channel, stub = _stub(kubelet)
    with channel:
        got = stub.Get(api_pb2.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="ml"), timeout=5)
        assert got.pod_resources.name == "trainer-0"
        with pytest.raises(grpc.RpcError) as failure:
            stub.Get(api_pb2.GetPodResourcesRequest(pod_name="ghost", pod_namespace="ml"), timeout=5)
        assert failure.value.code() is grpc.StatusCode.UNKNOWN  # type: ignore[attr-defined]
        assert failure.value.details() == "pod ghost in namespace ml not found"  # type: ignore[attr-defined]
        allocatable = stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=5)
        assert {entry.device_ids[0] for entry in allocatable.devices} == {GPU_A, GPU_B, GPU_C, f"{MIG}::2"}


def test_allocatable_lists_unheld_devices_too(tmp_path: Path) -> None:
    """A real kubelet's GetAllocatableResources answers every advertised device, held or not
    (tests/platform/test_kubelet.py); the fake did the held ones only."""
    spare = "GPU-eeeeeeee-0000-1111-2222-333333333333"
    fake = FakeKubelet(tmp_path / "k.sock", [FakePod("ml", "p", (FakeContainer("c", (("nvidia.com/gpu", GPU_A),)),))],
                       allocatable=[("nvidia.com/gpu", GPU_A), ("nvidia.com/gpu", spare)])
    answer = fake.allocatable_response()
    assert [(e.resource_name, list(e.device_ids)) for e in answer.devices] == [
        ("nvidia.com/gpu", [GPU_A]), ("nvidia.com/gpu", [spare])]
    fake.remove_pod("ml", "p")
    assert {e.device_ids[0] for e in fake.allocatable_response().devices} == {GPU_A, spare}


def test_padding_makes_a_huge_answer(kubelet: FakeKubelet) -> None:
    kubelet.set_response_padding(20_000_000)
    assert kubelet.list_response().ByteSize() >= 20_000_000


def test_restart_replaces_the_socket_file(kubelet: FakeKubelet) -> None:
    path = Path(kubelet.socket_path)
    before = path.stat()
    kubelet.stop()
    assert not path.exists()
    kubelet.start()
    after = path.stat()
    assert (after.st_ino, after.st_ctime_ns) != (before.st_ino, before.st_ctime_ns)
    channel, stub = _stub(kubelet)
    with channel:
        assert len(stub.List(api_pb2.ListPodResourcesRequest(), timeout=5).pod_resources) == 2


def test_pods_are_mutable_while_serving(kubelet: FakeKubelet) -> None:
    channel, stub = _stub(kubelet)
    with channel:
        kubelet.remove_pod("default", "web")
        kubelet.add_pod(
            FakePod("ml", "eval", (FakeContainer("main", (("nvidia.com/gpu.shared", f"{GPU_B}::1"),)),))
        )
        names = {p.name for p in stub.List(api_pb2.ListPodResourcesRequest(), timeout=5).pod_resources}
        assert names == {"trainer-0", "eval"}
        kubelet.set_pods([])
        assert list(stub.List(api_pb2.ListPodResourcesRequest(), timeout=5).pod_resources) == []


def test_injected_failure_and_delay(kubelet: FakeKubelet) -> None:
    channel, stub = _stub(kubelet)
    with channel:
        kubelet.set_failure(grpc.StatusCode.UNAVAILABLE, "restarting")
        with pytest.raises(grpc.RpcError) as failure:
            stub.List(api_pb2.ListPodResourcesRequest(), timeout=5)
        assert failure.value.code() is grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        kubelet.set_failure(None)
        kubelet.set_delay(30.0)  # cut short when the fixture stops the kubelet
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as slow:
            stub.List(api_pb2.ListPodResourcesRequest(), timeout=0.1)
        assert slow.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
        # the client gave up at its deadline, long before the answer (a margin no loaded machine uses up)
        assert time.monotonic() - started < 10.0
        kubelet.set_delay(0.0)
