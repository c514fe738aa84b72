"""Load generator: scrape a URL like a set of Prometheus servers would, and time every scrape.

Runs as its own process (``python -m bench.loadgen ...``), so its CPU is not the server's; the
harness pins it to a different core when it can and reports the CPU it used, because on a small
machine a generator that runs out of CPU inflates the latencies it measures.

Every scrape opens a new TCP connection, sends one request with ``Connection: close`` and reads the
response to the end, as Prometheus does for each scrape (it does reuse connections between scrapes
of one target, but a new connection per request is the harder case for the server and the one the
issue asks for). Latency runs from before ``connect`` to the last byte. A scrape fails when the
connection is refused or reset, the status is not 200, the body is shorter than its Content-Length,
or it takes longer than the timeout (Prometheus' default scrape timeout is 10 s).

Two load models:

* ``closed`` (default): ``concurrency`` clients, each sending its next request as soon as the last
  one is answered: the server is saturated, and latency ~= concurrency / throughput (Little's law);
* ``paced``: ``concurrency`` scrapers, each scraping once per ``interval`` at its own fixed offset
  (Prometheus spreads targets over the interval the same way): latency is then service time plus
  whatever queueing the random overlaps cause, which is what a scrape sees in production.

It is written on ``selectors`` with non-blocking sockets, to keep its own cost per request low.
"""

from __future__ import annotations

import argparse
import errno
import json
import random
import resource
import selectors
import socket
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
RECV_BYTES = 256 * 1024
SCRAPE_TIMEOUT_S = 10.0  # Prometheus' default scrape_timeout
OK_STATUS = b"200"


def build_request(host: str, port: int, path: str, profile: str) -> bytes:
    """The request bytes: ``prometheus`` (its Accept and gzip headers) or ``plain`` (text, no gzip)."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "User-Agent: gpu-pod-exporter-bench/1"]
    if profile == "prometheus":
        lines += [f"Accept: {PROMETHEUS_ACCEPT}", "Accept-Encoding: gzip"]
    elif profile == "plain":
        lines += ["Accept: text/plain"]
    else:
        raise ValueError(f"unknown request profile {profile!r}")
    lines += ["Connection: close", "", ""]
    return "\r\n".join(lines).encode("ascii")


def check_response(data: bytes) -> str | None:
    """None when ``data`` is a complete 200 response, else why the scrape failed."""
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return "incomplete headers" if data else "empty response"
    status_line, *header_lines = head.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/"):
        return "malformed status line"
    if parts[1] != OK_STATUS:
        return f"status {parts[1].decode('ascii', 'replace')}"
    for line in header_lines:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                expected = int(value.strip())
            except ValueError:
                return "bad content-length"
            if len(body) < expected:
                return "short body"
    return None


@dataclass
class _Scrape:
    sock: socket.socket
    started: float
    chunks: list[bytes] = field(default_factory=list)
    sent: bool = False


@dataclass
class Result:
    latencies_s: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    bytes_received: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def fail(self, reason: str) -> None:
        self.failures[reason] = self.failures.get(reason, 0) + 1


class LoadGenerator:
    def __init__(self, url: str, profile: str = "prometheus", timeout_s: float = SCRAPE_TIMEOUT_S) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"only http://host:port/path URLs are supported, got {url!r}")
        self.address = (parts.hostname, parts.port or 80)
        self.request = build_request(parts.hostname, self.address[1], parts.path or "/", profile)
        self.timeout_s = timeout_s
        self._selector = selectors.DefaultSelector()
        self._open: dict[int, _Scrape] = {}

    def _start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        scrape = _Scrape(sock, time.perf_counter())
        code = sock.connect_ex(self.address)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            raise ConnectionError(errno.errorcode.get(code, str(code)))
        self._open[sock.fileno()] = scrape
        self._selector.register(sock, selectors.EVENT_WRITE, scrape)

    def _finish(self, scrape: _Scrape, result: Result, reason: str | None) -> None:
        self._selector.unregister(scrape.sock)
        del self._open[scrape.sock.fileno()]
        scrape.sock.close()
        if reason is None:
            data = b"".join(scrape.chunks)
            result.bytes_received += len(data)
            reason = check_response(data)
            if reason is None:
                result.latencies_s.append(time.perf_counter() - scrape.started)
                return
        result.fail(reason)

    def _step(self, result: Result, wait_s: float) -> int:
        """Advance open scrapes; returns how many finished."""
        finished = 0
        for key, events in self._selector.select(wait_s):
            scrape: _Scrape = key.data
            try:
                if not scrape.sent and events & selectors.EVENT_WRITE:
                    error = scrape.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if error:
                        self._finish(scrape, result, errno.errorcode.get(error, str(error)))
                        finished += 1
                        continue
                    scrape.sock.send(self.request)
                    scrape.sent = True
                    self._selector.modify(scrape.sock, selectors.EVENT_READ, scrape)
                elif events & selectors.EVENT_READ:
                    chunk = scrape.sock.recv(RECV_BYTES)
                    if chunk:
                        scrape.chunks.append(chunk)
                    else:
                        self._finish(scrape, result, None)
                        finished += 1
            except OSError as exc:
                self._finish(scrape, result, errno.errorcode.get(exc.errno or 0, type(exc).__name__))
                finished += 1
        now = time.perf_counter()
        for scrape in [s for s in self._open.values() if now - s.started > self.timeout_s]:
            self._finish(scrape, result, "timeout")
            finished += 1
        return finished

    def _launch(self, result: Result) -> None:
        try:
            self._start()
        except OSError as exc:
            result.fail(type(exc).__name__)

    def closed(self, concurrency: int, requests: int, duration_s: float) -> Result:
        """Keep ``concurrency`` scrapes in flight until ``requests`` were sent or ``duration_s`` passed."""
        result = Result()
        started = time.perf_counter()
        deadline = started + duration_s
        sent = 0
        while len(self._open) < concurrency and sent < requests:
            self._launch(result)
            sent += 1
        while self._open:
            finished = self._step(result, 0.05)
            for _ in range(finished):
                if sent < requests and time.perf_counter() < deadline:
                    self._launch(result)
                    sent += 1
        result.wall_s = time.perf_counter() - started
        return result

    def paced(self, scrapers: int, interval_s: float, duration_s: float, seed: int = 1) -> Result:
        """Each of ``scrapers`` scrapes once per ``interval_s`` at a fixed random offset."""
        result = Result()
        rng = random.Random(seed)
        started = time.perf_counter()
        next_due = [started + rng.uniform(0, interval_s) for _ in range(scrapers)]
        deadline = started + duration_s
        while True:
            now = time.perf_counter()
            for index, due in enumerate(next_due):
                if due <= now and due < deadline:
                    self._launch(result)
                    next_due[index] = due + interval_s
            if now >= deadline and not self._open:
                break
            upcoming = min((due for due in next_due if due < deadline), default=now + 0.05)
            self._step(result, max(0.0, min(0.05, upcoming - time.perf_counter())))
        result.wall_s = time.perf_counter() - started
        return result


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen", description="Scrape a URL; print JSON results.")
    parser.add_argument("url")
    parser.add_argument("--mode", choices=("closed", "paced"), default="closed")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--requests", type=int, default=1000, help="closed mode: at most this many requests")
    parser.add_argument("--duration", type=float, default=5.0, help="seconds (closed: stop sending after)")
    parser.add_argument("--interval", type=float, default=1.0, help="paced mode: each scraper's interval")
    parser.add_argument("--profile", choices=("prometheus", "plain"), default="prometheus")
    parser.add_argument("--timeout", type=float, default=SCRAPE_TIMEOUT_S)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    generator = LoadGenerator(args.url, args.profile, args.timeout)
    cpu = _cpu_s()
    if args.mode == "closed":
        result = generator.closed(args.concurrency, args.requests, args.duration)
    else:
        result = generator.paced(args.concurrency, args.interval, args.duration)
    result.cpu_s = _cpu_s() - cpu
    json.dump({"latencies_s": result.latencies_s, "failures": result.failures, "wall_s": result.wall_s,
               "cpu_s": result.cpu_s, "bytes_received": result.bytes_received}, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
