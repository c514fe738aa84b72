"""The PodResources client against a real grpc server with the kubelet's quirks."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import grpc
import pytest

from exporter.backoff import BackoffPolicy
from exporter.kube.podresources.client import KubeletState, PodResourcesClient, kubelet_backoff_policy
from exporter.kube.podresources.listing import gpu_resource_filter
from simulator.fakekubelet import FakeContainer, FakeKubelet, FakePod

from ..helpers import GPU0, GPU1, poll

TRAINER = FakePod(
    "ml",
    "trainer-0",
    (
        FakeContainer("log-shipper", sidecar=True),
        FakeContainer("trainer", (("nvidia.com/gpu", GPU0), ("nvidia.com/gpu", GPU1))),
    ),
)


def _client(
    socket: Path, changes: list[KubeletState], interval_s: float = 0.02, **kwargs: float
) -> PodResourcesClient:
    kwargs.setdefault("backoff_max_s", 0.2)  # the real cap is a minute; its arithmetic is tested below
    return PodResourcesClient(str(socket), interval_s, gpu_resource_filter(), changes.append, **kwargs)


@pytest.fixture
def kubelet(short_tmp: Path) -> FakeKubelet:
    fake = FakeKubelet(short_tmp / "kubelet.sock", [TRAINER], numa_nodes={GPU0: [0, 1]}, seed=7)
    fake.start()
    yield fake
    fake.stop()


def _gpu_pods(state: KubeletState) -> list[tuple[str, str, list[str]]]:
    assert state.listing is not None
    return [
        (pod.namespace, pod.name, [d.device_id for c in pod.containers for d in c.devices])
        for pod in state.listing.pods
    ]


def test_lists_on_its_interval_and_publishes_only_changes(kubelet: FakeKubelet) -> None:
    changes: list[KubeletState] = []
    client = _client(Path(kubelet.socket_path), changes)
    client.start()
    try:
        poll(lambda: kubelet.list_calls >= 8, what="eight List calls")
        assert client.state.up and client.state.error == ""
        assert _gpu_pods(client.state) == [("ml", "trainer-0", [GPU0, GPU1])]
        assert len(changes) == 1  # eight shuffled, NUMA-duplicated answers of one allocation: one change
        assert client.state.last_success_wall > 0

        kubelet.add_pod(
            FakePod("ml", "eval", (FakeContainer("main", (("nvidia.com/gpu.shared", f"{GPU1}::1"),)),))
        )
        poll(lambda: len(changes) == 2, what="the new pod to be published")
        assert [pod[1] for pod in _gpu_pods(changes[-1])] == ["eval", "trainer-0"]

        kubelet.add_pod(FakePod("default", "web", (FakeContainer("nginx"),)))  # no GPU: no change
        calls = kubelet.list_calls
        poll(lambda: kubelet.list_calls >= calls + 3, what="three more List calls")
        assert len(changes) == 2
    finally:
        client.stop()


def test_one_channel_is_reused(kubelet: FakeKubelet) -> None:
    changes: list[KubeletState] = []
    client = _client(Path(kubelet.socket_path), changes)
    client.start()
    try:
        poll(lambda: kubelet.list_calls >= 3, what="List calls")
        channel = client._channel
        poll(lambda: kubelet.list_calls >= 6, what="more List calls")
        assert client._channel is channel
    finally:
        client.stop()


def test_a_20_mb_answer_fails_cleanly_and_10_mb_works(kubelet: FakeKubelet) -> None:
    changes: list[KubeletState] = []
    client = _client(Path(kubelet.socket_path), changes)
    kubelet.set_response_padding(20_000_000)
    assert client.poll_once() is False
    assert not client.state.up
    assert "exceeds the 16 MiB receive limit" in client.state.error
    kubelet.set_response_padding(10_000_000)
    assert client.poll_once() is True
    assert client.state.up
    assert _gpu_pods(client.state) == [("ml", "trainer-0", [GPU0, GPU1])]
    assert client.state.listing is not None and client.state.listing.pods_listed > 100
    client.stop()


def test_rate_limited_calls_back_off_and_recover(kubelet: FakeKubelet) -> None:
    changes: list[KubeletState] = []
    kubelet.set_rate_limit(qps=0.0, burst=0)
    client = _client(Path(kubelet.socket_path), changes, interval_s=0.05)
    client.start()
    try:
        poll(lambda: client.state.consecutive_failures >= 3, what="repeated rejections")
        assert not client.state.up
        assert "rate-limited" in client.state.error and "rejected by rate limit" in client.state.error
        assert kubelet.rejected_calls >= 3
        kubelet.set_rate_limit(qps=100.0, burst=10)
        poll(lambda: client.state.up, what="recovery once the bucket refills")
        assert _gpu_pods(client.state) == [("ml", "trainer-0", [GPU0, GPU1])]
    finally:
        client.stop()


def test_retries_never_come_faster_than_the_interval_and_back_off_to_a_minute() -> None:
    """The default 10 s interval: retry windows of 10, 20, 40, then 60 s, one List in each."""
    policy = kubelet_backoff_policy(10.0)
    assert [policy.window(n) for n in range(1, 7)] == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert policy.max_attempts(3600.0) == 1 + 3 + 59  # a kubelet down for an hour: 63 Lists, not 360
    assert kubelet_backoff_policy(120.0).window(1) == 120.0  # a longer interval is never shortened
    assert policy == BackoffPolicy(initial_s=10.0, max_s=60.0)


def test_a_failing_kubelet_is_asked_once_per_window(short_tmp: Path) -> None:
    """Ten simulated minutes of a missing socket at the default interval and cap, on a fake clock:
    each List falls in its own window (10, 20, 40, 60, 60 ... s), wherever the jitter puts it."""
    now = [0.0]
    draws = iter([0.0, 0.999] * 100)  # the earliest and the latest moment of alternate windows
    client = PodResourcesClient(str(short_tmp / "nowhere" / "kubelet.sock"), 10.0, gpu_resource_filter(),
                                monotonic=lambda: now[0], random_fraction=lambda: next(draws))
    attempts = []
    while now[0] < 600.0:
        attempts.append(now[0])
        assert client.poll_once() is False
        now[0] += client.state.next_attempt_s
    policy = kubelet_backoff_policy(10.0)
    edges = [0.0]
    while edges[-1] < 600.0:
        edges.append(edges[-1] + policy.window(len(edges)))
    retries = attempts[1:]
    windows = [next(i for i in range(len(edges) - 1) if edges[i] <= at < edges[i + 1]) for at in retries]
    assert windows == list(range(len(retries)))  # one attempt in each window, none skipped, none doubled
    assert len(attempts) <= policy.max_attempts(600.0) == 1 + 12
    assert min(b - a for a, b in itertools.pairwise(attempts)) < 1.0  # jitter: gaps vary...
    assert max(b - a for a, b in itertools.pairwise(attempts)) > 100.0  # ...within two windows


def test_kubelet_restart_recreates_the_socket_and_the_client_follows(kubelet: FakeKubelet) -> None:
    changes: list[KubeletState] = []
    client = _client(Path(kubelet.socket_path), changes, interval_s=0.05)
    client.start()
    try:
        poll(lambda: client.state.up, what="first answer")
        before = Path(kubelet.socket_path).stat()
        kubelet.stop()
        # Waited for as a state: a List in flight while the server stops is answered UNAVAILABLE before the
        # socket file is removed; the state the client settles in is the missing socket.
        poll(lambda: "kubelet socket not found at " + kubelet.socket_path in client.state.error,
             what="the kubelet to be seen down with its socket gone")
        assert not client.state.up
        kubelet.add_pod(FakePod("ml", "after-restart", (FakeContainer("c", (("nvidia.com/gpu", GPU1),)),)))
        kubelet.start()
        after = Path(kubelet.socket_path).stat()
        assert (after.st_ino, after.st_ctime_ns) != (before.st_ino, before.st_ctime_ns)  # a new socket file
        poll(lambda: client.state.up and "after-restart" in str(client.state.listing), what="recovery")
    finally:
        client.stop()


def test_fast_restart_with_new_inode_is_followed_without_error(
    kubelet: FakeKubelet, caplog: pytest.LogCaptureFixture
) -> None:
    """A kubelet restarted between two Lists: the very next List dials the new socket and succeeds,
    with no failure published, counted or logged (grpc's reconnect backoff never gets a say)."""
    changes: list[KubeletState] = []
    client = _client(Path(kubelet.socket_path), changes)
    with caplog.at_level(logging.INFO, logger="gpu_pod_exporter.kube.kubelet"):
        assert client.poll_once()
        for _ in range(3):
            kubelet.restart()  # the socket path comes back with a new inode
            calls = kubelet.list_calls
            assert client.poll_once()
            assert kubelet.list_calls == calls + 1  # answered by the new server, at the first try
            assert (client.state.up, client.state.error, client.state.consecutive_failures) == (True, "", 0)
        client.stop()
    assert [(state.up, state.error) for state in changes] == [(True, "")]  # one change: up; never down
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert len([r for r in caplog.records if "was re-created" in r.getMessage()]) == 3


def test_a_socket_removed_between_the_check_and_the_dial_is_reported_missing(kubelet: FakeKubelet) -> None:
    """A kubelet stopping removes its socket; when that happens after the client looked for the file but
    before grpc dialled it, grpc says UNAVAILABLE ("No such file or directory"). The user sees the same
    state and message as for a socket found missing: one cause, one message."""

    class RemovedAfterTheCheck(PodResourcesClient):
        def _stub_for_current_socket(self) -> object:  # type: ignore[override]
            stub = super()._stub_for_current_socket()
            Path(self.socket_path).unlink()  # the channel dials lazily: the List below finds no file
            return stub

    changes: list[KubeletState] = []
    client = RemovedAfterTheCheck(kubelet.socket_path, 0.02, gpu_resource_filter(), changes.append)
    assert not client.poll_once()
    client.stop()
    assert client.calls == 1  # it did dial
    assert (client.state.up, client.state.error_kind) == (False, "socket-missing")
    assert client.state.error.startswith(f"kubelet socket not found at {kubelet.socket_path}")


def test_missing_socket_is_a_clear_state_logged_once(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    changes: list[KubeletState] = []
    socket = short_tmp / "nowhere" / "kubelet.sock"
    client = _client(socket, changes)
    with caplog.at_level(logging.WARNING, logger="gpu_pod_exporter.kube.kubelet"):
        client.start()
        poll(lambda: client.state.consecutive_failures >= 5, what="several attempts")
        client.stop()
    assert client.state.error.startswith(f"kubelet socket not found at {socket}")
    assert client.calls == 0  # nothing was dialled
    assert len(changes) == 1
    assert len([r for r in caplog.records if "not found" in r.getMessage()]) == 1


def test_last_known_allocation_is_kept_then_dropped_when_stale(kubelet: FakeKubelet) -> None:
    now = [1000.0]
    changes: list[KubeletState] = []
    client = PodResourcesClient(
        kubelet.socket_path,
        10.0,
        gpu_resource_filter(),
        changes.append,
        stale_after_s=300.0,
        monotonic=lambda: now[0],
    )
    assert client.poll_once()
    kubelet.stop()
    now[0] += 290.0
    assert not client.poll_once()
    assert not client.state.up
    assert client.state.listing is not None  # the last known allocation still labels the series
    now[0] += 11.0
    assert not client.poll_once()
    assert client.state.listing is None  # older than five minutes: dropped
    assert changes[-1].listing is None and not changes[-1].up
    assert len(changes) == 3  # up, down, dropped
    client.stop()


def test_slow_kubelet_hits_the_call_deadline(kubelet: FakeKubelet) -> None:
    kubelet.set_delay(2.0)
    client = _client(Path(kubelet.socket_path), [], call_timeout_s=0.1)
    assert client.poll_once() is False
    assert client.state.error == "kubelet List timed out after 0.1 s"
    kubelet.set_delay(0.0)
    client.stop()


def test_wrong_socket_is_explained(kubelet: FakeKubelet) -> None:
    kubelet.set_failure(grpc.StatusCode.UNIMPLEMENTED, "unknown service v1.PodResourcesLister")
    client = _client(Path(kubelet.socket_path), [])
    assert client.poll_once() is False
    assert "does not serve v1.PodResourcesLister/List" in client.state.error
    client.stop()


def test_not_a_socket(short_tmp: Path) -> None:
    path = short_tmp / "kubelet.sock"
    path.write_text("")
    client = _client(path, [])
    assert client.poll_once() is False
    assert client.state.error == f"{path} is not a unix socket"


def test_stop_cancels_a_slow_call_without_reporting_a_failure(kubelet: FakeKubelet) -> None:
    kubelet.set_delay(30.0)
    changes: list[KubeletState] = []
    client = _client(Path(kubelet.socket_path), changes, call_timeout_s=30.0)
    client.start()
    thread = client._thread
    assert thread is not None
    poll(lambda: kubelet.list_calls >= 1, what="a call in flight")
    client.stop(timeout_s=5.0)
    assert not thread.is_alive()  # the in-flight call was cancelled, not waited out
    assert changes == [] and client.state.error == "not started"
