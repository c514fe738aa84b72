"""Background client of the kubelet's PodResources ``List``: one channel, one thread, one clock.

dcgm-exporter dials the socket and calls ``List`` on every scrape with grpc's 4 MiB default
receive limit; on big nodes that turned whole scrapes into HTTP 500s, and per-scrape calls eat
the kubelet's node-wide rate limit (100 QPS, burst 10) that every other agent shares
(dcgm-exporter issues #509, #408, #378; the kubelet's ``pkg/kubelet/apis/podresources/constants.go``).
This client instead:

* keeps ONE long-lived channel to ``unix://<socket>`` with a 16 MiB receive limit (the value the
  kubelet's own e2e client and multus use) and calls ``List`` on its own thread every
  ``interval_s``, never on the scrape path, with a per-call deadline;
* never calls more often than once per interval, failing or not: after a failure the next attempt
  waits for the API watches' backoff schedule (``exporter.backoff``), here with windows that
  start at one interval and double up to ``backoff_max_s`` (60 s), one attempt at a random moment
  in each. The kubelet's rate limit (100 QPS, burst 10) is shared by every agent on the node, and
  a rate-limited or restarting kubelet is not helped by being asked faster;
* notices a kubelet restart by the socket's identity: the kubelet unlinks and re-creates
  ``kubelet.sock`` on every start, so a changed ``(st_dev, st_ino, st_ctime_ns)`` (inode numbers
  alone are reused), or an UNAVAILABLE answer,
  drops the channel and the next attempt dials the new socket (grpc's own reconnect backoff
  grows to two minutes, far longer than one interval);
* reports a missing socket as its own state ("kubelet socket not found at ..."), the most common
  misconfiguration (an unmounted ``/var/lib/kubelet/pod-resources``), without dialling;
* logs once per change of state (with the retry count and the next delay), not once per cycle,
  and publishes an immutable
  ``KubeletState``; ``on_change`` fires only when the GPU allocation or the up/error state
  changed, never because an identical answer arrived again;
* keeps serving the last good allocation while the kubelet is unreachable, for at most
  ``stale_after_s`` (default five minutes), then drops it: labels from a long-dead kubelet are
  more likely wrong than right.
"""

from __future__ import annotations

import random
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

from exporter.backoff import Backoff, BackoffPolicy
from exporter.kube.podresources import api_pb2, api_pb2_grpc
from exporter.kube.podresources.listing import PodResourcesListing, listing_from_response
from exporter.logs import get_logger
from exporter.supervisor import supervised

LOG = get_logger("kube.kubelet")  # under the exporter's handler and format

MAX_RECEIVE_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_CALL_TIMEOUT_S = 10.0
DEFAULT_STALE_AFTER_S = 300.0
DEFAULT_BACKOFF_MAX_S = 60.0


@dataclass(frozen=True)
class KubeletState:
    """What the client knows now. ``listing`` is the last good answer (None: none, or too old).

    ``error`` is empty while up. ``last_success_wall`` is ``time.time()`` of the last good List
    (0.0: never), exported as ``gpu_pod_exporter_kubelet_last_success_timestamp_seconds``.
    """

    up: bool = False
    error: str = "not started"
    error_kind: str = "not-started"  # stable within one failure episode (a status code name, ...)
    listing: PodResourcesListing | None = None
    last_success_wall: float = 0.0
    last_success_monotonic: float | None = None
    consecutive_failures: int = 0
    next_attempt_s: float = 0.0  # delay before the next List, as decided after the last failure

    @property
    def condition(self) -> tuple[bool, str]:
        """The part whose change is worth a log line and a re-render."""
        return self.up, self.error_kind


def kubelet_backoff_policy(interval_s: float, backoff_max_s: float = DEFAULT_BACKOFF_MAX_S) -> BackoffPolicy:
    """Retry windows for the kubelet: the first one interval long, doubling up to ``backoff_max_s``."""
    return BackoffPolicy(initial_s=interval_s, max_s=max(interval_s, backoff_max_s))


class PodResourcesClient:
    """Polls ``v1.PodResourcesLister/List`` in the background; see the module docstring."""

    def __init__(
        self,
        socket_path: str,
        interval_s: float,
        accept_resource: Callable[[str], bool],
        on_change: Callable[[KubeletState], None] = lambda state: None,
        *,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
        max_receive_message_bytes: int = MAX_RECEIVE_MESSAGE_BYTES,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        random_fraction: Callable[[], float] = random.random,
        dra: bool = False,
    ) -> None:
        self.socket_path = socket_path
        self.dra = dra  # keep the containers' DRA claim devices (--kubernetes-enable-dra)
        self.interval_s = interval_s
        self._accept_resource = accept_resource
        self._on_change = on_change
        self._call_timeout_s = call_timeout_s
        self._stale_after_s = stale_after_s
        self._max_receive = max_receive_message_bytes
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        self._backoff = Backoff(kubelet_backoff_policy(interval_s, backoff_max_s), random_fraction)
        self._state = KubeletState()
        self._channel: grpc.Channel | None = None
        self._channel_socket: tuple[int, int, int] | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # guards the channel: stop() may close it mid-call
        self.calls = 0  # List calls attempted, for tests and debugging

    @property
    def state(self) -> KubeletState:
        return self._state

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = supervised(self._run, name="kubelet-podresources", stop=self._stop)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            self._close_channel()  # cancels an in-flight List
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            ok = self.poll_once()
            delay = self.interval_s if ok else self._state.next_attempt_s
            if self._stop.wait(delay):
                break
        with self._lock:
            self._close_channel()

    def poll_once(self) -> bool:
        """One List attempt; publishes the outcome. True on success."""
        try:
            listing = self._list()
        except _ListError as failure:
            if self._stop.is_set():
                return False  # stop() cancelled the call: not a kubelet failure
            self._publish_failure(failure)
            return False
        self._publish_success(listing)
        return True

    # -- one attempt ------------------------------------------------------------------------

    def _list(self) -> PodResourcesListing:
        stub = self._stub_for_current_socket()
        self.calls += 1
        try:
            # Outside the lock, so that stop() can close the channel and cancel a slow call.
            response = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self._call_timeout_s)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
            details = (exc.details() if isinstance(exc, grpc.Call) else str(exc)) or ""
            if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                with self._lock:
                    if self._stub is stub:
                        self._close_channel()  # dial afresh next time instead of waiting on grpc's backoff
                if code is grpc.StatusCode.UNAVAILABLE and not Path(self.socket_path).exists():
                    # The socket went away between the stat and the dial (a kubelet stopping removes it):
                    # the same state, and the same one message, as a socket found missing before dialling.
                    raise self._socket_missing() from None
            kind = code.name
            if code is grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
                kind = "TOO_LARGE"
            raise _ListError(kind, self._describe(code, details)) from None
        return listing_from_response(response, self._accept_resource, dra=self.dra)

    def _stub_for_current_socket(self) -> api_pb2_grpc.PodResourcesListerStub:
        """The stub of the channel to the socket that exists now, dialling it when it is new."""
        with self._lock:
            try:
                info = Path(self.socket_path).stat()
            except FileNotFoundError:
                self._close_channel()
                raise self._socket_missing() from None
            except OSError as exc:
                self._close_channel()
                raise _ListError("socket-error",
                                 f"cannot stat kubelet socket {self.socket_path}: {exc.strerror}") from None
            if not stat.S_ISSOCK(info.st_mode):
                self._close_channel()
                raise _ListError("not-a-socket", f"{self.socket_path} is not a unix socket")
            # A deleted socket's inode number is often reused at once, so the change time is part
            # of the identity: a re-created socket always has a new one.
            identity = (info.st_dev, info.st_ino, info.st_ctime_ns)
            if self._stub is None or identity != self._channel_socket:
                if self._channel is not None:
                    LOG.info("kubelet socket %s was re-created (kubelet restart); reconnecting",
                             self.socket_path)
                self._close_channel()
                self._channel = grpc.insecure_channel(
                    "unix://" + self.socket_path,
                    options=[("grpc.max_receive_message_length", self._max_receive)],
                )
                self._channel_socket = identity
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]
            return self._stub

    def _socket_missing(self) -> _ListError:
        return _ListError("socket-missing", f"kubelet socket not found at {self.socket_path} (is the "
                          "kubelet's pod-resources directory mounted into the exporter?)")

    def _describe(self, code: grpc.StatusCode, details: str) -> str:
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in details:
            return (f"kubelet List answer exceeds the {self._max_receive // (1024 * 1024)} MiB receive limit "
                    f"({details})")
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            return f"kubelet rate-limited List (RESOURCE_EXHAUSTED: {details}); backing off"
        if code is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"kubelet List timed out after {self._call_timeout_s:g} s"
        if code is grpc.StatusCode.UNIMPLEMENTED:
            return (f"{self.socket_path} does not serve v1.PodResourcesLister/List (kubelet older than "
                    "1.20, or the device-plugin socket instead of pod-resources/kubelet.sock)")
        if code is grpc.StatusCode.UNAVAILABLE:
            return f"kubelet PodResources socket {self.socket_path} unavailable: {details}"
        return f"kubelet List failed: {code.name}: {details}"

    def _close_channel(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._channel_socket = None
        self._stub = None

    # -- publishing -------------------------------------------------------------------------

    def _publish_success(self, listing: PodResourcesListing) -> None:
        self._backoff.reset()
        previous = self._state
        state = KubeletState(up=True, error="", error_kind="", listing=listing,
                             last_success_wall=self._wall_clock(), last_success_monotonic=self._monotonic())
        self._state = state
        if previous.condition != state.condition:
            LOG.info("kubelet PodResources up at %s: %d pods listed, %d holding GPUs%s",
                     self.socket_path, listing.pods_listed, len(listing.pods), " or DRA claims" if self.dra else "")
        if previous.condition != state.condition or previous.listing != listing:
            self._on_change(state)

    def _publish_failure(self, failure: _ListError) -> None:
        previous = self._state
        listing = previous.listing
        dropped = False
        if (listing is not None and previous.last_success_monotonic is not None
                and self._monotonic() - previous.last_success_monotonic > self._stale_after_s):
            listing, dropped = None, True
        same_episode = not previous.up and previous.error_kind == failure.kind
        # One message per failure episode: details such as byte counts vary from call to call,
        # and neither the log nor the published value should churn with them.
        message = previous.error if same_episode else failure.message
        delay = self._backoff.failed(self._monotonic())
        state = replace(previous, up=False, error=message, error_kind=failure.kind, listing=listing,
                        consecutive_failures=previous.consecutive_failures + 1, next_attempt_s=delay)
        self._state = state
        if not same_episode:
            LOG.warning("%s; retry %d in %.1f s", message, state.consecutive_failures, delay,
                        extra={"fields": {"retries": state.consecutive_failures, "next_retry_s": round(delay, 1)}})
        if dropped:
            LOG.warning("dropping GPU allocations last confirmed by the kubelet %.0f s ago",
                        self._monotonic() - (previous.last_success_monotonic or 0.0))
        if not same_episode or dropped:
            self._on_change(state)


class _ListError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
