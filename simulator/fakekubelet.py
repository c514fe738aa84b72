"""A fake kubelet: a real grpcio server speaking ``v1.PodResourcesLister`` on a unix socket.

The exporter's client talks to it exactly as to a kubelet, so the whole client (channel,
deadlines, receive limit, backoff, reconnect) runs for real in tests and in the demo. It
imitates the real kubelet's behaviour that clients trip over (its
``pkg/kubelet/apis/podresources/server_v1.go`` and the rate limiter of ``pkg/kubelet/apis/grpc``):

* one ``ContainerDevices`` entry per device ID and per NUMA node, so a device on two NUMA nodes
  appears twice; entries and pods in random order on every call; topology absent when unknown;
* restartable init containers (sidecars) listed before regular containers;
* pods and containers without devices listed too;
* a node-wide token bucket (100 QPS, burst 10 by default) answering ``RESOURCE_EXHAUSTED``
  "rejected by rate limit";
* ``Get`` for an unknown pod answering ``UNKNOWN`` "pod X in namespace Y not found";
* ``GetAllocatableResources`` answering every device the node advertises (``allocatable``), held
  by a pod or not, as the real kubelet does (it used to answer the held devices only);
* optional padding that makes the List answer arbitrarily large (to prove the 16 MiB limit);
* DRA claims (``FakeClaim``) in ``dynamic_resources``, as a 1.31+ kubelet names their devices
  (driver, pool, device, CDI names; ``share_id`` as 1.35 adds it), or as a 1.27-1.30 kubelet does
  (``FakeClaimDevice.cdi_only``: CDI names only), in random order like the device entries;
* ``stop()`` removes the socket file and ``start()`` creates a new one (a new inode), which is
  what a kubelet restart looks like to a client holding a channel.

Pods can be added and removed while it runs (``set_pods``, ``add_pod``, ``remove_pod``).
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from exporter.kube.podresources import api_pb2, api_pb2_grpc

RATE_LIMIT_MESSAGE = "rejected by rate limit"


@dataclass(frozen=True)
class FakeClaimDevice:
    """One device of a DRA claim. ``cdi_only``: sent as a 1.27-1.30 kubelet does, CDI names only."""

    driver: str
    pool: str
    device: str
    share_id: str | None = None
    cdi_devices: tuple[str, ...] = ()
    cdi_only: bool = False


@dataclass(frozen=True)
class FakeClaim:
    """A ResourceClaim a container uses, and the devices allocated to it."""

    namespace: str
    name: str
    devices: tuple[FakeClaimDevice, ...] = ()


@dataclass(frozen=True)
class FakeContainer:
    """A container and the device IDs the kubelet assigned to it: ``(resource name, device ID)``,
    and the DRA claims it uses."""

    name: str
    devices: tuple[tuple[str, str], ...] = ()
    sidecar: bool = False  # a restartable init container: the kubelet lists it first
    claims: tuple[FakeClaim, ...] = ()


def claim_message(claim: FakeClaim) -> api_pb2.DynamicResource:
    """A claim as the kubelet lists it in ``ContainerResources.dynamic_resources``."""
    resources = []
    for device in claim.devices:
        cdi = [api_pb2.CDIDevice(name=name) for name in device.cdi_devices]
        if device.cdi_only:
            resources.append(api_pb2.ClaimResource(cdi_devices=cdi))
            continue
        resource = api_pb2.ClaimResource(cdi_devices=cdi, driver_name=device.driver, pool_name=device.pool,
                                         device_name=device.device)
        if device.share_id is not None:
            resource.share_id = device.share_id
        resources.append(resource)
    return api_pb2.DynamicResource(claim_name=claim.name, claim_namespace=claim.namespace,
                                   claim_resources=resources)


@dataclass(frozen=True)
class FakePod:
    namespace: str
    name: str
    containers: tuple[FakeContainer, ...] = ()


@dataclass
class _TokenBucket:
    """golang.org/x/time/rate.Limiter semantics, enough for the kubelet's interceptor."""

    rate: float
    burst: int
    tokens: float = 0.0
    last: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = float(self.burst)

    def allow(self) -> bool:
        now = time.monotonic()
        self.tokens = min(float(self.burst), self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class FakeKubelet:
    """A PodResources v1 server on ``socket_path``; see the module docstring."""

    def __init__(
        self,
        socket_path: str | Path,
        pods: Iterable[FakePod] = (),
        *,
        numa_nodes: Mapping[str, Sequence[int]] | None = None,
        allocatable: Iterable[tuple[str, str]] = (),
        rate_limit_qps: float = 100.0,
        rate_limit_burst: int = 10,
        seed: int | None = None,
    ) -> None:
        self.socket_path = str(socket_path)
        self._pods: dict[tuple[str, str], FakePod] = {(pod.namespace, pod.name): pod for pod in pods}
        self._numa_nodes: dict[str, tuple[int, ...]] = {
            device: tuple(nodes) for device, nodes in (numa_nodes or {}).items()}
        # (resource, device ID) the node's device plugins advertise, held or not (a real kubelet's
        # GetAllocatableResources answers every one of them: tests/platform/test_kubelet.py).
        self._allocatable: set[tuple[str, str]] = set(allocatable)
        self._bucket = _TokenBucket(rate_limit_qps, rate_limit_burst)
        self._random = random.Random(seed)  # noqa: S311 - shuffling answers, not security
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self._padding: list[api_pb2.PodResources] = []
        self._failure: tuple[grpc.StatusCode, str] | None = None
        self._delay_s = 0.0
        self._stopping = threading.Event()  # interrupts injected delays when the kubelet stops
        self.list_calls = 0
        self.rejected_calls = 0

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> FakeKubelet:
        """Bind a fresh socket (removing a stale file first, as the kubelet does) and serve."""
        with self._lock:
            if self._server is not None:
                return self
            self._stopping.clear()
            path = Path(self.socket_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="fake-kubelet"))
            api_pb2_grpc.add_PodResourcesListerServicer_to_server(  # type: ignore[no-untyped-call]
                _Servicer(self), server)
            server.add_insecure_port("unix://" + self.socket_path)
            server.start()
            self._server = server
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket file (a kubelet going down)."""
        self._stopping.set()
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.stop(grace=None).wait(5)
        with contextlib.suppress(FileNotFoundError):
            Path(self.socket_path).unlink()

    def restart(self) -> None:
        """Stop and start again: the socket path comes back with a new inode."""
        self.stop()
        self.start()

    def __enter__(self) -> FakeKubelet:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._server is not None

    # -- mutation ---------------------------------------------------------------------------

    def set_pods(self, pods: Iterable[FakePod]) -> None:
        with self._lock:
            self._pods = {(pod.namespace, pod.name): pod for pod in pods}

    def add_pod(self, pod: FakePod) -> None:
        with self._lock:
            self._pods[(pod.namespace, pod.name)] = pod

    def remove_pod(self, namespace: str, name: str) -> None:
        with self._lock:
            self._pods.pop((namespace, name), None)

    def pods(self) -> list[FakePod]:
        with self._lock:
            return list(self._pods.values())

    def set_rate_limit(self, qps: float, burst: int) -> None:
        with self._lock:
            self._bucket = _TokenBucket(qps, burst)

    def set_response_padding(self, total_bytes: int) -> None:
        """Add device-less filler pods until the List answer is at least ``total_bytes`` long."""
        filler: list[api_pb2.PodResources] = []
        chunk = 64 * 1024
        size = 0
        while size <= total_bytes:  # one filler past the target covers the per-entry framing bytes
            pod = api_pb2.PodResources(name=f"filler-{len(filler)}-" + "x" * chunk, namespace="filler",
                                       containers=[api_pb2.ContainerResources(name="main")])
            filler.append(pod)
            size += pod.ByteSize()
        if total_bytes > 0:
            filler.append(api_pb2.PodResources(name="filler-last-" + "x" * chunk, namespace="filler"))
        with self._lock:
            self._padding = filler

    def set_failure(self, code: grpc.StatusCode | None, details: str = "") -> None:
        """Answer every call with this status (None: answer normally again)."""
        with self._lock:
            self._failure = (code, details) if code is not None else None

    def set_delay(self, seconds: float) -> None:
        """Wait this long before answering each call (a slow kubelet)."""
        with self._lock:
            self._delay_s = seconds

    # -- answers ----------------------------------------------------------------------------

    def _admit(self, context: grpc.ServicerContext, *, counted: bool = False) -> None:
        with self._lock:
            self.list_calls += counted
            failure, delay = self._failure, self._delay_s
            allowed = self._bucket.allow()
            if not allowed:
                self.rejected_calls += 1
        if not allowed:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_MESSAGE)
        if delay and self._stopping.wait(delay):  # the fake's own latency, cut short by stop()
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is shutting down")
        if failure is not None:
            context.abort(failure[0], failure[1])

    def _container_message(self, container: FakeContainer) -> api_pb2.ContainerResources:
        entries: list[api_pb2.ContainerDevices] = []
        for resource_name, device_id in container.devices:
            nodes = self._numa_nodes.get(device_id, (0,))
            if not nodes:
                entries.append(api_pb2.ContainerDevices(resource_name=resource_name, device_ids=[device_id]))
            for node in nodes:
                entries.append(api_pb2.ContainerDevices(
                    resource_name=resource_name, device_ids=[device_id],
                    topology=api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=node)])))
        self._random.shuffle(entries)
        claims = [claim_message(claim) for claim in container.claims]
        self._random.shuffle(claims)
        return api_pb2.ContainerResources(name=container.name, devices=entries, dynamic_resources=claims)

    def _pod_message(self, pod: FakePod) -> api_pb2.PodResources:
        ordered = [c for c in pod.containers if c.sidecar] + [c for c in pod.containers if not c.sidecar]
        return api_pb2.PodResources(name=pod.name, namespace=pod.namespace,
                                    containers=[self._container_message(c) for c in ordered])

    def list_response(self) -> api_pb2.ListPodResourcesResponse:
        with self._lock:
            pods = [self._pod_message(pod) for pod in self._pods.values()]
            padding = list(self._padding)
            self._random.shuffle(pods)
        return api_pb2.ListPodResourcesResponse(pod_resources=pods + padding)

    def get_response(self, namespace: str, name: str) -> api_pb2.GetPodResourcesResponse | None:
        with self._lock:
            pod = self._pods.get((namespace, name))
            if pod is None:
                return None
            return api_pb2.GetPodResourcesResponse(pod_resources=self._pod_message(pod))

    def allocatable_response(self) -> api_pb2.AllocatableResourcesResponse:
        with self._lock:
            devices = sorted(self._allocatable | {device for pod in self._pods.values()
                                                  for container in pod.containers for device in container.devices})
        return api_pb2.AllocatableResourcesResponse(devices=[
            api_pb2.ContainerDevices(resource_name=resource, device_ids=[device_id])
            for resource, device_id in devices])


class _Servicer(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, kubelet: FakeKubelet) -> None:
        self._kubelet = kubelet

    def List(self, request: api_pb2.ListPodResourcesRequest,
             context: grpc.ServicerContext) -> api_pb2.ListPodResourcesResponse:
        self._kubelet._admit(context, counted=True)
        return self._kubelet.list_response()

    def Get(self, request: api_pb2.GetPodResourcesRequest,
            context: grpc.ServicerContext) -> api_pb2.GetPodResourcesResponse:
        self._kubelet._admit(context)
        response = self._kubelet.get_response(request.pod_namespace, request.pod_name)
        if response is None:
            context.abort(grpc.StatusCode.UNKNOWN,
                          f"pod {request.pod_name} in namespace {request.pod_namespace} not found")
        return response

    def GetAllocatableResources(self, request: api_pb2.AllocatableResourcesRequest,
                                context: grpc.ServicerContext) -> api_pb2.AllocatableResourcesResponse:
        self._kubelet._admit(context)
        return self._kubelet.allocatable_response()
