"""The whole siege at once: no client can starve a scrape, nor an Alertmanager delivery.

The real exporter (``--simulate``, 128 GPUs: a ~0.75 MB text exposition, so a slow reader cannot
take it all into its socket buffers) is attacked by another process (``tests/faults/siege.py``)
with, all together: 1,000 idle sockets, 64 slowloris clients (one byte a second), 40 slow readers
of the whole text exposition (4 KiB receive buffer, 1 KiB every half second) and 200 clients
sending wrong passwords back to back. Every attacker comes back when it is cut off. Meanwhile this
process, as Prometheus and a liveness probe would, makes 100 sequential scrapes and 100 /health
checks: each must answer within 1 s, and the exporter's RSS must stay bounded.

Two variants: the default install (plain HTTP, no web config; the wrong-password clients are then
just 200 clients scraping back to back, their header ignored), and TLS + basic auth (bcrypt cost
10, as ``htpasswd -nBC 10`` writes), where the scraper's credentials were verified once before
the siege, as Prometheus' were by its first scrape.

Both run against both listeners that share the serving core (``exporter.web.server``): the
exporter's ``/metrics``, and the remediator's webhook, where the timed request is Alertmanager's
``POST /alerts`` (bearer token; with basic auth, the web config's user) and the attackers aim at
its ``/metrics``.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import json
import resource
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import bcrypt
import pytest

from tests.e2e.exporter_process import REPO_ROOT, running_exporter, wait_for
from tests.remediate.fakenodeapi import FakeNodeApiServer
from tests.remediate.support import RemediatorProcess
from tests.web.certs import CertificateAuthority

pytestmark = pytest.mark.e2e

BOUND_S = 1.0
SCRAPES = 100
PACE_S = 0.12
PASSWORD = "scrape-pass-4b1d"
RSS_GROWTH_LIMIT_MIB = 64.0
SCENARIO = "description: siege\ngpu_count: 128\n"
TOKEN = "siege-webhook-token"
ALERTS = json.dumps({"version": "4", "status": "firing", "receiver": "r", "groupKey": "g", "truncatedAlerts": 0,
                     "alerts": [{"status": "firing", "labels": {"alertname": "GpuXidFatal", "Hostname": "node-1"},
                                 "startsAt": "2024-05-01T10:00:00Z", "fingerprint": "f"}]}).encode()


class Served(Protocol):
    """A listener's process under siege: the exporter or the remediator."""

    port: int

    @property
    def process(self) -> subprocess.Popen[bytes]: ...

    def assert_running(self) -> None: ...

    def log(self) -> str: ...


@dataclass
class Timings:
    scrapes: list[float] = field(default_factory=list)
    health: list[float] = field(default_factory=list)
    rss_kib: list[int] = field(default_factory=list)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.fixture(autouse=True)
def enough_file_descriptors() -> None:
    """The attackers hold ~1,300 sockets; their process raises its own limit, the exporter its own."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


class Client:
    """One connection per request, as the exporter closes after each answer; times the whole request."""

    def __init__(self, port: int, context: ssl.SSLContext | None, authorization: str | None) -> None:
        self.port = port
        self.context = context
        self.headers = {"Authorization": authorization} if authorization else {}

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[float, int, bytes]:
        return self.request("GET", path, None, headers)

    def request(self, method: str, path: str, body: bytes | None,
                headers: Mapping[str, str] | None = None) -> tuple[float, int, bytes]:
        started = time.monotonic()
        if self.context is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection("127.0.0.1", self.port,
                                                                           context=self.context, timeout=10)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers={**self.headers, **(headers or {})})
            response = conn.getresponse()
            body = response.read()
            if response.getheader("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return time.monotonic() - started, response.status, body
        finally:
            conn.close()


@dataclass(frozen=True)
class Target:
    """What is besieged and what its user's timed request is."""

    name: str
    # (scenario, workdir, web config or None) -> the running process, its client's Authorization
    start: Callable[[str, Path, Path | None], contextlib.AbstractContextManager[tuple[Served, str | None]]]
    timed: Callable[[Client], tuple[float, int, bytes]]
    served: Callable[[int, bytes], bool]


@contextmanager
def _exporter(scenario: str, workdir: Path, web: Path | None) -> Iterator[tuple[Served, str | None]]:
    with running_exporter(["--simulate", scenario, *(["--web-config-file", str(web)] if web else [])]) as exporter:
        yield exporter, None


@contextmanager
def _remediator(scenario: str, workdir: Path, web: Path | None) -> Iterator[tuple[Served, str | None]]:
    with ExitStack() as stack:
        api = stack.enter_context(FakeNodeApiServer())
        api.add_node("node-1", gpus=1)
        remediator = RemediatorProcess(workdir / "remediate", api, token=None if web else TOKEN,
                                       extra=["--web-config-file", str(web)] if web else [])
        stack.callback(remediator.stop)
        yield remediator, None if web else f"Bearer {TOKEN}"


TARGETS = [
    Target("exporter /metrics", _exporter,
           lambda client: client.get("/metrics", {"Accept-Encoding": "gzip"}),
           lambda status, body: status == 200 and b"DCGM_FI_DEV_GPU_TEMP{" in body),
    Target("remediator webhook", _remediator,
           lambda client: client.request("POST", "/alerts", ALERTS, {"Content-Type": "application/json"}),
           lambda status, body: status == 200 and b'"status": "accepted"' in body),
]


def siege(exporter: Served, client: Client, attacker_args: list[str],
          target: Target) -> tuple[Timings, dict[str, int]]:
    baseline = max(rss_kib(exporter.process.pid) for _ in range(3))
    timings = Timings(rss_kib=[baseline])
    attackers = subprocess.Popen([sys.executable, "-m", "tests.faults.siege", "--port", str(exporter.port),
                                  "--password", PASSWORD, *attacker_args],
                                 cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sampling = threading.Event()

    def sample_rss() -> None:
        while not sampling.wait(0.25):
            timings.rss_kib.append(rss_kib(exporter.process.pid))

    sampler = threading.Thread(target=sample_rss, daemon=True)
    try:
        assert attackers.stdout is not None
        ready = json.loads(attackers.stdout.readline() or "{}")
        assert ready.get("ready"), attackers.stderr.read() if attackers.stderr else ""
        sampler.start()
        time.sleep(2.0)  # let the slowloris, slow readers and wrong passwords all arrive first
        started = time.monotonic()
        for number in range(SCRAPES):
            # Paced (Prometheus scrapes on an interval), so the siege outlasts every deadline of the
            # exporter: slowloris clients get cut and come back, idle sockets get closed and come back.
            time.sleep(max(0.0, started + number * PACE_S - time.monotonic()))
            exporter.assert_running()
            elapsed, status, body = target.timed(client)
            assert target.served(status, body), (status, body[:200])
            timings.scrapes.append(elapsed)
            elapsed, status, body = client.get("/health")
            assert status == 200, body
            timings.health.append(elapsed)
    finally:
        sampling.set()
        attackers.terminate()
        output, errors = attackers.communicate(timeout=30)
    lines = output.strip().splitlines()
    counts: dict[str, int] = json.loads(lines[-1]) if lines else {}
    assert counts, errors
    return timings, counts


def report(name: str, timings: Timings, counts: dict[str, int]) -> None:
    def ms(values: list[float]) -> str:
        ordered = sorted(values)
        return f"median {ordered[len(ordered) // 2] * 1e3:.0f} ms, max {ordered[-1] * 1e3:.0f} ms"

    print(f"\n{name}: scrapes {ms(timings.scrapes)}; /health {ms(timings.health)}; RSS "
          f"{timings.rss_kib[0] / 1024:.1f} -> max {max(timings.rss_kib) / 1024:.1f} MiB; attackers {counts}")


def assert_unstarved(timings: Timings, counts: dict[str, int]) -> None:
    assert len(timings.scrapes) == SCRAPES and len(timings.health) == SCRAPES
    assert max(timings.scrapes) < BOUND_S, sorted(timings.scrapes)[-5:]
    assert max(timings.health) < BOUND_S, sorted(timings.health)[-5:]
    growth_mib = (max(timings.rss_kib) - timings.rss_kib[0]) / 1024
    assert growth_mib < RSS_GROWTH_LIMIT_MIB, f"RSS grew by {growth_mib:.1f} MiB under the siege"
    # The siege really happened: idle sockets were held, slow readers got data, slowloris clients were cut.
    assert counts.get("idle_connected", 0) >= 1000
    assert counts.get("slow_reader_requests", 0) >= 40 and counts.get("slow_reader_bytes", 0) > 0
    assert counts.get("slowloris_connected", 0) >= 64
    # ... and the deadlines held under it: every slowloris client was cut at least once (head deadline,
    # 5 s), idle sockets were closed (head deadline or the connection cap).
    assert counts.get("slowloris_connected", 0) >= 128 and counts.get("idle_closed_by_server", 0) >= 1000


@pytest.fixture
def scenario(tmp_path: Path) -> str:
    path = tmp_path / "siege.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_siege_on_plain_http_default_install(scenario: str, tmp_path: Path, target: Target) -> None:
    with target.start(scenario, tmp_path, None) as (served, authorization):
        client = Client(served.port, None, authorization)
        wait_for(lambda: _healthy(served, client), 60, "/health")
        timings, counts = siege(served, client, [], target)
        report(f"{target.name}, plain HTTP", timings, counts)
        assert_unstarved(timings, counts)
        assert counts.get("wrong_password_200", 0) > 0  # no auth configured: they were served, not refused
        assert "Traceback" not in served.log()


def _healthy(served: Served, client: Client) -> bool:
    served.assert_running()
    try:
        return client.get("/health")[1] == 200
    except (OSError, ssl.SSLError):
        return False


@pytest.fixture
def tls_files(tmp_path: Path) -> Path:
    ca = CertificateAuthority("siege CA")
    ca.issue("gpu-pod-exporter", dns=("exporter", "localhost")).write_pair(tmp_path / "tls", "tls")
    ca.write(tmp_path / "ca.crt")
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    (tmp_path / "web.yml").write_text(f"tls_server_config:\n  cert_file: tls/tls.crt\n  key_file: tls/tls.key\n"
                                      f"basic_auth_users:\n  prometheus: {hashed}\n")
    return tmp_path


@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_siege_on_tls_with_basic_auth(scenario: str, tls_files: Path, target: Target) -> None:
    context = ssl.create_default_context(cafile=str(tls_files / "ca.crt"))
    context.check_hostname = False
    authorization = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    with target.start(scenario, tls_files, tls_files / "web.yml") as (served, _):
        client = Client(served.port, context, authorization)
        # The first authenticated request verifies (and caches) the client's credentials, as Prometheus'
        # first scrape (or Alertmanager's first delivery) does.
        wait_for(lambda: _healthy(served, client) and client.get("/metrics")[1] == 200, 60, "/metrics over HTTPS")
        timings, counts = siege(served, client, ["--tls", str(tls_files / "ca.crt")], target)
        report(f"{target.name}, TLS + basic auth", timings, counts)
        assert_unstarved(timings, counts)
        refused = counts.get("wrong_password_401", 0) + counts.get("wrong_password_429", 0)
        assert refused > 0 and counts.get("wrong_password_200", 0) == 0
        assert "Traceback" not in served.log()
