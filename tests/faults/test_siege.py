"""The whole siege at once: no client can starve a scrape, nor an Alertmanager delivery.

The real exporter (``--simulate``, 128 GPUs: a ~0.75 MB text exposition, so a slow reader cannot
take it all into its socket buffers) is attacked by another process (``tests/faults/siege.py``)
with, all together: 1,000 idle sockets, 64 slowloris clients (one byte a second), 40 slow readers
of the whole text exposition (4 KiB receive buffer, 1 KiB every half second) and 200 clients
sending wrong passwords back to back. Every attacker comes back when it is cut off. Meanwhile this
process, as Prometheus and a liveness probe would, makes at least 100 paced sequential scrapes and
/health checks, and goes on while the siege holds until the server's own deadlines have visibly acted.

It is judged on states, never on the wall clock (the machine may be busy with other work):

* every scrape, /health check and webhook delivery made during the siege succeeds: the right status
  and a complete body (the last GPU's series in the exposition, the remediator's "accepted");
* the good client is never starved: all its requests complete while the attackers still hold their
  connections (a run is failed as hung only when nothing has progressed for ``STALL_DEADLINE_S``:
  no request answered, no attacker cut; how long the whole siege takes is the machine's business);
* the server cuts the attackers with its own bounds: every slowloris client is cut at least once and
  idle sockets are closed by the server (head deadline, or the connection cap evicting the connection
  that waited longest without a request), slow readers get data and hold their connections, and with
  basic auth the wrong passwords get 401 (or 429 when the bcrypt queue is full), never 200;
* the RSS stays bounded.

The latencies (p50, p99, max) are printed for the record, not asserted: a stopwatch on a shared
machine measures the machine. ``bench/`` is where serving speed is measured.

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

from tests.remediate.fakenodeapi import FakeNodeApiServer
from tests.remediate.support import RemediatorProcess
from tests.support.exporter_process import running_exporter
from tests.support.paths import REPO_ROOT
from tests.support.polling import wait_for
from tests.web.certs import CertificateAuthority

pytestmark = pytest.mark.e2e

SCRAPES = 100
PACE_S = 0.12  # the good client's cadence (Prometheus scrapes on an interval); a load shape, not a wait
# Caps a hung run, measured from the last progress (a request of the good client answered, an attacker
# cut by the server), never from the start: a loaded machine makes the siege slower, not stuck, and the
# server's deadlines (HEAD_TIMEOUT_S, 5 s) cut some attacker well within it while they work.
STALL_DEADLINE_S = 120.0
ARRIVAL_DEADLINE_S = 120.0
REPORT_EVERY_S = 0.5
IDLE, SLOWLORIS, SLOW_READERS, WRONG_PASSWORDS = 1000, 64, 40, 200
# The exporter samples every 3 s: its /health judges the sample's age (3 intervals), and the siege
# judges the HTTP core, not how fast a CPU-starved machine samples 128 GPUs.
EXPORTER_COLLECT_INTERVAL_MS = "3000"
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


class AttackerCounts:
    """The attackers' counts as they report them (a line every ``REPORT_EVERY_S``), read in a thread."""

    def __init__(self, attackers: subprocess.Popen[str]) -> None:
        self._lock = threading.Lock()
        self._latest: dict[str, int] = {}
        self.ready: dict[str, object] = {}
        assert attackers.stdout is not None
        self._stdout = attackers.stdout
        self._thread = threading.Thread(target=self._read, daemon=True)

    def start(self) -> None:
        self.ready = json.loads(self._stdout.readline() or "{}")
        self._thread.start()

    def _read(self) -> None:
        for line in self._stdout:
            counts = json.loads(line)
            with self._lock:
                self._latest = counts

    def join(self) -> dict[str, int]:
        """The final counts, once the attackers have exited."""
        self._thread.join(30)
        return self.latest

    @property
    def latest(self) -> dict[str, int]:
        with self._lock:
            return dict(self._latest)


def wrong_password_answers(counts: Mapping[str, int]) -> dict[str, int]:
    """The wrong-password clients' answers by status ("401", "429", "200", "no-answer")."""
    prefix = "wrong_password_"
    return {key[len(prefix):]: value for key, value in counts.items()
            if key.startswith(prefix) and key != "wrong_password_errors" and value}


def arrived(counts: Mapping[str, int]) -> bool:
    """Every kind of attacker is there: the idle sockets held, the rest connected and sending."""
    return (counts.get("idle_connected", 0) >= IDLE and counts.get("slowloris_connected", 0) >= SLOWLORIS
            and counts.get("slow_reader_requests", 0) >= SLOW_READERS and bool(wrong_password_answers(counts)))


def cut_by_deadlines(counts: Mapping[str, int]) -> bool:
    """The server's own bounds have cut the attackers that send no complete request: every slowloris
    client at least once and a thousand idle sockets (the head deadline, or the connection cap that
    closes the connection waiting longest without a request). Slow readers are not judged here: the
    kernel's socket buffers on loopback can take a whole exposition, so the server's write deadline
    may never be needed; that they never starve the good client is what the siege shows."""
    return (counts.get("slowloris_clients_cut", 0) >= SLOWLORIS
            and counts.get("idle_closed_by_server", 0) >= IDLE)


def progress_of(timings: Timings, counts: Mapping[str, int]) -> tuple[int, int, int]:
    """What advances while the siege works: the good client's answered requests (up to the number it
    needs) and the attackers the server has cut. Unchanged for ``STALL_DEADLINE_S``: a hung run."""
    return (min(len(timings.scrapes), SCRAPES), counts.get("slowloris_clients_cut", 0),
            counts.get("idle_closed_by_server", 0))


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
    with running_exporter(["--simulate", scenario, "-c", EXPORTER_COLLECT_INTERVAL_MS,
                           *(["--web-config-file", str(web)] if web else [])]) as exporter:
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
           # complete: the last of the 128 GPUs is there (a body cut short of Content-Length raises)
           lambda status, body: status == 200 and b'DCGM_FI_DEV_GPU_TEMP{gpu="127"' in body
           and body.endswith(b"\n")),
    Target("remediator webhook", _remediator,
           lambda client: client.request("POST", "/alerts", ALERTS, {"Content-Type": "application/json"}),
           lambda status, body: status == 200 and b'"status": "accepted"' in body),
]


def siege(exporter: Served, client: Client, attacker_args: list[str],
          target: Target) -> tuple[Timings, dict[str, int]]:
    baseline = max(rss_kib(exporter.process.pid) for _ in range(3))
    timings = Timings(rss_kib=[baseline])
    attackers = subprocess.Popen([sys.executable, "-m", "tests.faults.siege", "--port", str(exporter.port),
                                  "--password", PASSWORD, "--report-every", str(REPORT_EVERY_S),
                                  "--idle", str(IDLE), "--slowloris", str(SLOWLORIS),
                                  "--slow-readers", str(SLOW_READERS), "--wrong-passwords", str(WRONG_PASSWORDS),
                                  *attacker_args],
                                 cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reports = AttackerCounts(attackers)
    sampling = threading.Event()

    def sample_rss() -> None:
        while not sampling.wait(0.25):
            timings.rss_kib.append(rss_kib(exporter.process.pid))

    sampler = threading.Thread(target=sample_rss, daemon=True)
    try:
        reports.start()
        assert reports.ready.get("ready"), attackers.stderr.read() if attackers.stderr else ""
        sampler.start()
        # The good client starts once every kind of attacker is there (a state, not a pause).
        wait_for(lambda: arrived(reports.latest), ARRIVAL_DEADLINE_S, "every attacker to arrive")
        progress, progressed_at = progress_of(timings, reports.latest), time.monotonic()
        while len(timings.scrapes) < SCRAPES or not cut_by_deadlines(reports.latest):
            # Paced, as Prometheus scrapes on an interval; it goes on until the server's deadlines have
            # acted on every attacker, so the siege outlasts them all (the attackers come back when cut).
            if (now := progress_of(timings, reports.latest)) != progress:
                progress, progressed_at = now, time.monotonic()
            assert time.monotonic() - progressed_at < STALL_DEADLINE_S, (
                f"the siege stopped progressing for {STALL_DEADLINE_S:.0f} s: {len(timings.scrapes)} "
                f"requests served, attackers {reports.latest}")
            next_at = time.monotonic() + PACE_S
            exporter.assert_running()
            elapsed, status, body = target.timed(client)
            assert target.served(status, body), (status, body[:200])
            timings.scrapes.append(elapsed)
            elapsed, status, body = client.get("/health")
            assert status == 200, body
            timings.health.append(elapsed)
            time.sleep(max(0.0, next_at - time.monotonic()))
        # Still under siege when the good client finished: the attackers were never all gone.
        assert attackers.poll() is None, "the attackers ended before the good client did"
    finally:
        sampling.set()
        attackers.terminate()
        try:
            attackers.wait(timeout=30)
        finally:
            counts = reports.join()
            errors = attackers.stderr.read() if attackers.stderr else ""
    assert counts, errors
    return timings, counts


def report(name: str, timings: Timings, counts: dict[str, int]) -> None:
    """For the record only (docs/load-and-soak.md): latencies are printed, never asserted."""
    def ms(values: list[float]) -> str:
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, (len(ordered) * 99) // 100)]
        return (f"{len(ordered)} requests, p50 {ordered[len(ordered) // 2] * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, "
                f"max {ordered[-1] * 1e3:.0f} ms")

    print(f"\n{name}: scrapes {ms(timings.scrapes)}; /health {ms(timings.health)}; RSS "
          f"{timings.rss_kib[0] / 1024:.1f} -> max {max(timings.rss_kib) / 1024:.1f} MiB; attackers {counts}")


def assert_unstarved(timings: Timings, counts: dict[str, int]) -> None:
    # Every request of the good client was answered in full (asserted one by one during the siege).
    assert len(timings.scrapes) >= SCRAPES and len(timings.health) == len(timings.scrapes)
    growth_mib = (max(timings.rss_kib) - timings.rss_kib[0]) / 1024
    assert growth_mib < RSS_GROWTH_LIMIT_MIB, f"RSS grew by {growth_mib:.1f} MiB under the siege"
    # The siege really happened: idle sockets were held, slow readers got data ...
    assert arrived(counts) and counts.get("slow_reader_bytes", 0) > 0, counts
    # ... and the server's bounds cut it: every slowloris client at least once, a thousand idle sockets.
    assert cut_by_deadlines(counts), counts
    assert counts.get("slowloris_never_cut", 0) == 0, counts


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
        assert wrong_password_answers(counts).get("200", 0) > 0  # no auth configured: served, not refused
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
        # Wrong passwords are refused: 401, or 429 when the bcrypt queue is full; never served.
        answers = wrong_password_answers(counts)
        assert answers.get("401", 0) > 0 and set(answers) <= {"401", "429"}, counts
        assert "Traceback" not in served.log()
