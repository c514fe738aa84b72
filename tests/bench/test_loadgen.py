import socket
import threading
from collections.abc import Iterator

import pytest

from bench import floor
from bench.loadgen import PROMETHEUS_ACCEPT, LoadGenerator, build_request, check_response
from tests.support.ports import free_port


def test_prometheus_profile_asks_for_openmetrics_and_gzip_on_a_fresh_connection():
    request = build_request("127.0.0.1", 9400, "/metrics", "prometheus").decode()
    assert request.startswith("GET /metrics HTTP/1.1\r\n")
    assert f"Accept: {PROMETHEUS_ACCEPT}\r\n" in request
    assert "Accept-Encoding: gzip\r\n" in request
    assert "Connection: close\r\n" in request
    assert request.endswith("\r\n\r\n")


@pytest.mark.parametrize(("response", "reason"), [
    (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", None),
    (b"HTTP/1.1 200 OK\r\n\r\nbody without length", None),
    (b"HTTP/1.0 503 Service Unavailable\r\n\r\n", "status 503"),
    (b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nshort", "short body"),
    (b"HTTP/1.0 200 OK\r\nContent-Le", "incomplete headers"),
    (b"", "empty response"),
    (b"garbage\r\n\r\n", "malformed status line"),
])
def test_a_scrape_counts_only_when_complete_and_200(response: bytes, reason: str | None):
    assert check_response(response) == reason


def _server(payload: bytes) -> Iterator[int]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    thread = threading.Thread(target=floor.serve, args=(listener, payload), daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    # Shut down before closing: a close alone leaves the thread blocked in accept(), and its next
    # accept() on the closed descriptor raised EBADF as an unhandled thread exception (seen in a soak).
    listener.shutdown(socket.SHUT_RDWR)
    thread.join(timeout=30)
    listener.close()
    assert not thread.is_alive(), "the floor server did not stop when its listener was shut down"


@pytest.fixture
def ok_port() -> Iterator[int]:
    yield from _server(floor.response(b"x" * 50_000, ["Content-Type: text/plain"]))


@pytest.fixture
def broken_port() -> Iterator[int]:
    yield from _server(b"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")


def test_closed_loop_sends_the_requested_number_of_scrapes(ok_port: int):
    generator = LoadGenerator(f"http://127.0.0.1:{ok_port}/metrics")
    result = generator.closed(concurrency=4, requests=40, duration_s=30)
    assert len(result.latencies_s) == 40
    assert result.failures == {}
    assert result.bytes_received > 40 * 50_000
    assert all(latency > 0 for latency in result.latencies_s)


def test_failed_scrapes_are_counted_by_reason_and_not_timed(broken_port: int):
    result = LoadGenerator(f"http://127.0.0.1:{broken_port}/metrics").closed(2, 10, 30)
    assert result.latencies_s == []
    assert result.failures == {"status 500": 10}


def test_refused_connections_are_failures():
    port = free_port()
    result = LoadGenerator(f"http://127.0.0.1:{port}/metrics").closed(1, 3, 30)
    assert sum(result.failures.values()) == 3
    assert result.latencies_s == []


def test_paced_scrapers_each_scrape_once_per_interval(ok_port: int):
    result = LoadGenerator(f"http://127.0.0.1:{ok_port}/metrics").paced(scrapers=5, interval_s=0.2, duration_s=1.0)
    # Every scraper's first scrape falls within the first interval, then one per interval until 1 s.
    assert 5 * 4 <= len(result.latencies_s) <= 5 * 5
    assert result.failures == {}


def test_only_plain_http_urls():
    with pytest.raises(ValueError, match="only http://"):
        LoadGenerator("https://127.0.0.1:1/metrics")
