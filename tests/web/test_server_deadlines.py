"""Each bound of the listener on its own: head and write deadlines, the connection cap, the bcrypt queue."""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.core import Metric

from exporter.web import server as server_module
from exporter.web.cache import ExpositionCache
from exporter.web.health import HealthReport
from exporter.web.server import Decision, ExporterHTTPServer, WebSecurity
from tests.support.polling import wait_for


def big_families(series: int) -> list[Metric]:
    metric = Metric("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "gauge")
    for index in range(series):
        metric.add_sample("DCGM_FI_DEV_GPU_TEMP", {"gpu": str(index), "UUID": f"GPU-{index:08d}" + "x" * 40}, 41)
    return [metric]


def start(monkeypatch: pytest.MonkeyPatch, stop_later: list[ExporterHTTPServer], *, series: int = 1,
          max_connections: int = 1024, security: WebSecurity | None = None) -> ExporterHTTPServer:
    monkeypatch.setattr(server_module, "HEAD_TIMEOUT_S", 0.5)
    monkeypatch.setattr(server_module, "WRITE_TIMEOUT_S", 1.0)
    cache = ExpositionCache(lambda: big_families(series))
    cache.refresh()
    server = ExporterHTTPServer("127.0.0.1:0", cache, lambda: HealthReport(True, "OK"), security=security,
                                max_connections=max_connections)
    server.start()
    stop_later.append(server)
    return server


@pytest.fixture
def stop_later() -> Iterator[list[ExporterHTTPServer]]:
    servers: list[ExporterHTTPServer] = []
    yield servers
    for server in servers:
        server.stop()


def scrape(port: int, path: str = "/metrics", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def closed_by_server(sock: socket.socket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_a_client_that_never_finishes_its_head_is_cut_at_the_deadline(
        monkeypatch: pytest.MonkeyPatch, stop_later: list[ExporterHTTPServer]) -> None:
    server = start(monkeypatch, stop_later)
    with socket.create_connection(("127.0.0.1", server.port)) as slow:
        slow.sendall(b"GET /metrics HTTP/1.1\r\n")
        # a byte now and then does not extend the deadline: it is for the whole head
        end = time.monotonic() + 5
        cut = False
        while not cut and time.monotonic() < end:
            try:
                slow.sendall(b"X")
            except OSError:
                break
            cut = closed_by_server(slow)
        assert time.monotonic() < end, "the slowloris client was never cut"
    assert scrape(server.port)[0] == 200


def test_at_the_connection_cap_the_oldest_idle_connection_makes_room(
        monkeypatch: pytest.MonkeyPatch, stop_later: list[ExporterHTTPServer]) -> None:
    server = start(monkeypatch, stop_later, max_connections=8)
    monkeypatch.setattr(server_module, "HEAD_TIMEOUT_S", 60.0)  # only the cap may close them here
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(8)]
    try:
        wait_for(lambda: server.open_connections == 8 or None, 10, "8 open connections")
        assert scrape(server.port)[0] == 200  # a ninth client is served: the oldest idle one was closed
        wait_for(lambda: closed_by_server(idle[0]) or None, 10, "the oldest idle connection to be closed")
        assert not closed_by_server(idle[-1])
        assert server.evicted >= 1
    finally:
        for sock in idle:
            sock.close()


def test_a_client_that_does_not_read_is_cut_at_the_write_deadline_without_a_copy_of_the_body(
        monkeypatch: pytest.MonkeyPatch, stop_later: list[ExporterHTTPServer]) -> None:
    server = start(monkeypatch, stop_later, series=40_000)  # ~3.6 MB of text, far more than the socket buffers hold
    server.write_timeout_s = 3.0  # read per response: long enough for a loaded machine to answer /health first
    readers = []
    for _ in range(4):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", server.port))
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        readers.append(sock)
    try:
        wait_for(lambda: server.open_connections >= 4 or None, 10, "the four slow readers to be served")
        assert scrape(server.port, "/health")[0] == 200
        # not waiting behind them: answered while all four still hold their connections (a state, not a
        # stopwatch: had /health queued behind the writers, they would have been cut at the deadline first)
        assert server.open_connections >= 4
        wait_for(lambda: server.open_connections == 0 or None, 10, "the slow readers to be cut")
    finally:
        for sock in readers:
            sock.close()


def test_an_oversized_or_malformed_head_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                   stop_later: list[ExporterHTTPServer]) -> None:
    server = start(monkeypatch, stop_later)
    for request, status in ((b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", b"431"),
                            (b"GET /metrics HTTP/2.0\r\n\r\n", b"505"), (b"\x01\x02 nonsense\r\n\r\n", b"400")):
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            sock.sendall(request)
            sock.settimeout(5)
            assert sock.recv(64).split(b" ")[1] == status


class SlowAuth(WebSecurity):
    """Every request needs a slow check (like bcrypt of a new password) except the known-good header."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started = 0

    def decide(self, headers: Any) -> Decision:
        if headers.get("Authorization") == "good":
            return None

        def check() -> str | None:
            self.started += 1
            self.release.wait(10)
            return "realm"

        return check


def test_a_flood_of_slow_checks_queues_up_to_a_bound_then_gets_429_and_never_delays_a_known_login(
        monkeypatch: pytest.MonkeyPatch, stop_later: list[ExporterHTTPServer]) -> None:
    security = SlowAuth()
    server = start(monkeypatch, stop_later, security=security)
    flood = []
    try:
        for number in range(server_module.AUTH_QUEUE + 5):
            sock = socket.create_connection(("127.0.0.1", server.port))
            sock.sendall(f"GET /metrics HTTP/1.1\r\nAuthorization: guess{number}\r\n\r\n".encode())
            flood.append(sock)
        wait_for(lambda: security.started >= 1 or None, 10, "the first check to start")
        refused = 0
        for sock in flood:
            sock.settimeout(0.2)
            with contextlib.suppress(TimeoutError):
                refused += sock.recv(64).startswith(b"HTTP/1.0 429")
        assert refused >= 5  # beyond the queue: refused at once, no check started for them
        status, _ = scrape(server.port, headers={"Authorization": "good"})
        assert status == 200
        assert security.started == 1  # one thread: the rest wait their turn
    finally:
        security.release.set()
        for sock in flood:
            sock.close()


def test_a_client_that_half_closes_after_its_request_still_gets_the_answer(
        monkeypatch: pytest.MonkeyPatch, stop_later: list[ExporterHTTPServer]) -> None:
    server = start(monkeypatch, stop_later)
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(10)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.0 200 OK") and answer.endswith(b"OK\n")
