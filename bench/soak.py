"""Load and soak runs against the real exporter process on a simulated 8-GPU, 110-pod node.

Three commands (run from the repository root; the node's fakes come from the test helpers):

* ``python -m bench.soak load [--concurrency 200] [--duration 60]``: 200 scrapers, each holding one
  connection at a time and sending the next request as soon as the last one is answered, against
  ``/metrics`` of an exporter attributing 8 GPUs to 110 pods. Prints latency (p50/p99/max),
  throughput, failures, the exporter's CPU and RSS, and how many connections were really open.
* ``python -m bench.soak soak [--minutes 10]``: continuous pod churn (10 pods replaced every
  second, the GPU pods among them, their GPU processes moving to the new pods) under a steady
  scrape load; samples the exporter's RSS every few seconds and compares the end with minute 1.
* ``python -m bench.soak scrape --url URL ...``: the load generator alone, printing JSON. ``load``
  runs it as a separate process, so that its CPU (on a small machine it needs a core of its own)
  is neither the exporter's nor the fakes'.

The generator is asyncio on one thread: ``concurrency`` tasks, each one a scraper that connects,
sends a Prometheus-like request (OpenMetrics preferred, gzip) and reads to the end of the
response. The exporter closes each connection after its response (HTTP/1.0), as it documents, so
a scraper reconnects for every scrape; while the exporter's worker pool is busy the connection
waits in the listen backlog, open and counted. A scrape fails when the connection is refused or
reset, the status is not 200, the body is shorter than its Content-Length, the gzip stream or the
OpenMetrics ``# EOF`` is missing, or it takes longer than the timeout (Prometheus' default scrape
timeout, 10 s). The generator samples the number of open connections every 100 ms, so the figures
show the concurrency actually held, not just the number of tasks.

Nothing here asserts a timing: the tests in ``tests/faults/test_load.py`` and ``test_soak.py`` run
short versions and assert only zero failures and bounded memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import math
import os
import re
import resource
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # ``python bench/soak.py`` works as well as ``python -m bench.soak``
    sys.path.insert(0, str(REPO_ROOT))

from tests.support.exporter_process import ExporterProcess, parse_samples  # noqa: E402
from tests.support.kube_cluster import NodeCluster, PodSpec, node_cluster, scenario_gpus, whole_gpu  # noqa: E402
from tests.support.polling import wait_for  # noqa: E402

SCENARIO = REPO_ROOT / "tests" / "fixtures" / "load-node.yaml"
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
SCRAPE_TIMEOUT_S = 10.0
TICK_S = 0.1
GPU_PID_BASE = 5000  # the scenario's GPU processes: PID 5000 + GPU index
KIB = 1024


# -- the load generator ------------------------------------------------------------------------


@dataclass
class LoadResult:
    """What one generator run saw. Latencies in seconds; ``open_*`` are sampled every 100 ms."""

    concurrency: int
    duration_s: float
    requests: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    p50_s: float = 0.0
    p90_s: float = 0.0
    p99_s: float = 0.0
    max_s: float = 0.0
    mean_s: float = 0.0
    throughput_per_s: float = 0.0
    body_bytes: int = 0  # the last good body, as sent (compressed)
    open_peak: int = 0
    open_mean: float = 0.0
    open_min_after_ramp: int = 0  # fewest connections open at any tick after the first second
    generator_cpu_s: float = 0.0

    @property
    def failed(self) -> int:
        return sum(self.failures.values())


def percentile(ordered: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending sequence (0.0 when empty)."""
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def build_request(host: str, port: int, path: str) -> bytes:
    return (f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: gpu-pod-exporter-soak/1\r\n"
            f"Accept: {PROMETHEUS_ACCEPT}\r\nAccept-Encoding: gzip\r\nConnection: close\r\n\r\n").encode("ascii")


def check_response(data: bytes) -> tuple[str | None, int]:
    """(None, body length) for a complete, intact 200 answer, else (why it failed, 0)."""
    head, separator, body = data.partition(b"\r\n\r\n")
    if not separator:
        return ("incomplete headers" if data else "empty response"), 0
    status_line, *header_lines = head.split(b"\r\n")
    parts = status_line.split(b" ", 2)
    if len(parts) < 2 or parts[1] != b"200":
        return f"status {parts[1].decode('ascii', 'replace') if len(parts) > 1 else '?'}", 0
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if int(headers.get(b"content-length", b"-1")) != len(body):
        return "body length differs from Content-Length", 0
    text = body
    if headers.get(b"content-encoding") == b"gzip":
        try:
            text = gzip.decompress(body)
        except (OSError, EOFError, zlib.error):
            return "broken gzip stream", 0
    if headers.get(b"content-type", b"").startswith(b"application/openmetrics-text") and not text.endswith(b"# EOF\n"):
        return "OpenMetrics body without # EOF", 0
    return None, len(body)


class _Generator:
    def __init__(self, host: str, port: int, path: str, concurrency: int, duration_s: float, timeout_s: float) -> None:
        self.host, self.port = host, port
        self.request = build_request(host, port, path)
        self.concurrency = concurrency
        self.duration_s = duration_s
        self.timeout_s = timeout_s
        self.latencies: list[float] = []
        self.failures: Counter[str] = Counter()
        self.open = 0
        self.open_samples: list[int] = []
        self.body_bytes = 0

    async def scrape(self) -> None:
        started = time.perf_counter()
        writer: asyncio.StreamWriter | None = None
        self.open += 1
        try:
            async with asyncio.timeout(self.timeout_s):
                reader, writer = await asyncio.open_connection(self.host, self.port)
                writer.write(self.request)
                await writer.drain()
                data = await reader.read()
            error, size = check_response(data)
        except TimeoutError:
            error, size = f"no complete answer within {self.timeout_s:g} s", 0
        except OSError as exc:
            error, size = type(exc).__name__, 0
        finally:
            if writer is not None:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
            self.open -= 1  # after the close: the connection counts as held until it is gone
        if error is None:
            self.latencies.append(time.perf_counter() - started)
            self.body_bytes = size
        else:
            self.failures[error] += 1

    async def scraper(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            await self.scrape()

    async def ticker(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.open_samples.append(self.open)
            await asyncio.sleep(TICK_S)

    async def run(self) -> LoadResult:
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        started = time.monotonic()
        deadline = started + self.duration_s
        await asyncio.gather(self.ticker(deadline), *(self.scraper(deadline) for _ in range(self.concurrency)))
        wall = time.monotonic() - started
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        ordered = sorted(self.latencies)
        after_ramp = self.open_samples[int(1.0 / TICK_S):] or self.open_samples
        return LoadResult(
            concurrency=self.concurrency, duration_s=round(wall, 3),
            requests=len(ordered) + sum(self.failures.values()),
            failures=dict(self.failures), p50_s=percentile(ordered, 0.50), p90_s=percentile(ordered, 0.90),
            p99_s=percentile(ordered, 0.99), max_s=ordered[-1] if ordered else 0.0,
            mean_s=sum(ordered) / len(ordered) if ordered else 0.0, throughput_per_s=len(ordered) / wall,
            body_bytes=self.body_bytes, open_peak=max(self.open_samples, default=0),
            open_mean=sum(self.open_samples) / len(self.open_samples) if self.open_samples else 0.0,
            open_min_after_ramp=min(after_ramp, default=0),
            generator_cpu_s=(cpu_after.ru_utime + cpu_after.ru_stime) - (cpu_before.ru_utime + cpu_before.ru_stime))


def scrape_load(url: str, concurrency: int, duration_s: float, timeout_s: float = SCRAPE_TIMEOUT_S) -> LoadResult:
    """Run the generator in this process (the ``scrape`` command)."""
    parts = urlsplit(url)
    generator = _Generator(parts.hostname or "127.0.0.1", parts.port or 80, parts.path or "/metrics", concurrency,
                           duration_s, timeout_s)
    return asyncio.run(generator.run())


def scrape_load_in_process(url: str, concurrency: int, duration_s: float,
                           timeout_s: float = SCRAPE_TIMEOUT_S) -> LoadResult:
    """Run the generator as a separate process and read its JSON result."""
    command = [sys.executable, "-m", "bench.soak", "scrape", "--url", url, "--concurrency", str(concurrency),
               "--duration", str(duration_s), "--timeout", str(timeout_s)]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False,
                          timeout=duration_s + timeout_s + 60)
    if done.returncode != 0:
        raise RuntimeError(f"the load generator failed ({done.returncode}):\n{done.stderr}")
    values = json.loads(done.stdout)
    return LoadResult(**values)


# -- the node: 8 GPUs, 110 pods, churn ---------------------------------------------------------


class ChurningNode:
    """``pods`` pods on a fake node: slots 0-7 hold GPU 0-7 (and its process), the rest hold none.

    ``churn(count)`` replaces the next ``count`` slots' pods (round robin) by new pods with new
    names, UIDs, container IDs and labels, as a Deployment rolling its pods does; a GPU slot's
    process moves into the new pod (a new process reusing the PID).
    """

    def __init__(self, cluster: NodeCluster, pods: int = 110, namespaces: int = 10) -> None:
        self.cluster = cluster
        self.gpus = scenario_gpus(SCENARIO)
        self.slots = pods
        self.namespaces = tuple(f"team-{index}" for index in range(namespaces))
        self.current: dict[int, PodSpec] = {}
        self.generation: dict[int, int] = {}
        self.replaced = 0
        self._next = 0

    def pod(self, slot: int, generation: int) -> PodSpec:
        devices = (whole_gpu(self.gpus[slot]),) if slot < len(self.gpus) else ()
        pids = (GPU_PID_BASE + slot,) if slot < len(self.gpus) else ()
        # The labels a Deployment's pods typically carry (the exporter keeps them while the pod lives).
        labels = (("app", f"svc-{slot}"), ("app.kubernetes.io/name", f"svc-{slot}"),
                  ("app.kubernetes.io/instance", f"svc-{slot}-production"),
                  ("app.kubernetes.io/version", f"1.{generation % 50}.0"),
                  ("app.kubernetes.io/component", "worker" if slot < len(self.gpus) else "server"),
                  ("app.kubernetes.io/part-of", f"platform-{slot % 7}"), ("app.kubernetes.io/managed-by", "Helm"),
                  ("helm.sh/chart", f"svc-{slot}-1.{generation % 50}.0"),
                  ("example.com/cost-center", f"cc-{slot % 13}"),
                  ("pod-template-hash", f"{(slot * 7919 + generation * 104729) % 16**10:010x}"))
        return PodSpec(self.namespaces[slot % len(self.namespaces)], f"svc-{slot}-{generation}", "main", devices,
                       pids=pids, labels=labels)

    def populate(self) -> None:
        for index, namespace in enumerate(self.namespaces):
            self.cluster.add_namespace(namespace, {"team": f"team-{index % 4}"})
        for slot in range(self.slots):
            self.generation[slot] = 0
            self.current[slot] = self.pod(slot, 0)
            self.cluster.add_pod(self.current[slot])

    def churn(self, count: int) -> None:
        for _ in range(count):
            slot = self._next
            self._next = (self._next + 1) % self.slots
            self.cluster.remove_pod(self.current[slot])
            self.generation[slot] += 1
            self.current[slot] = self.pod(slot, self.generation[slot])
            self.cluster.add_pod(self.current[slot])
            self.replaced += 1

    def gpu_pod_names(self) -> set[str]:
        return {self.current[slot].name for slot in range(min(self.slots, len(self.gpus)))}


def exporter_args(cluster: NodeCluster, collect_interval_ms: int) -> list[str]:
    return ["--simulate", str(SCENARIO), "-c", str(collect_interval_ms), "--kubernetes-enable-pod-uid",
            "--kubernetes-enable-pod-labels", "--kubernetes-pod-label-allowlist-regex", "^app$",
            *cluster.exporter_args(process_attribution=True)]


def attributed(exporter: ExporterProcess, node: ChurningNode) -> bool:
    """Every GPU labelled with its current pod, and the API knows every pod."""
    samples = parse_samples(exporter.metrics())
    gpu_pods = {labels.get("pod") for name, labels, _ in samples if name == "DCGM_FI_DEV_GPU_TEMP"}
    known = [value for name, _, value in samples if name == "gpu_pod_exporter_kubernetes_pods"]
    return gpu_pods == node.gpu_pod_names() and known == [float(node.slots)]


@contextlib.contextmanager
def running_node(pods: int, collect_interval_ms: int) -> Iterator[tuple[ChurningNode, ExporterProcess]]:
    """A populated node and an exporter attributing all of it (stopped on exit)."""
    with node_cluster() as cluster:
        node = ChurningNode(cluster, pods)
        node.populate()
        exporter = ExporterProcess(exporter_args(cluster, collect_interval_ms))
        try:
            exporter.wait_healthy(30.0)
            wait_for(lambda: attributed(exporter, node), 60.0, f"8 GPUs attributed, {pods} pods known")
            yield node, exporter
        finally:
            exporter.stop()


# -- the exporter's CPU and memory -------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (fields 14 and 15, counted after the ")")."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) in KiB: resident now, and the peak since start."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    rss = re.search(r"^VmRSS:\s+(\d+) kB$", status, re.MULTILINE)
    hwm = re.search(r"^VmHWM:\s+(\d+) kB$", status, re.MULTILINE)
    if rss is None or hwm is None:
        raise RuntimeError(f"no VmRSS/VmHWM for process {pid}")
    return int(rss[1]), int(hwm[1])


# -- load ------------------------------------------------------------------------------------------


@dataclass
class LoadRun:
    load: LoadResult
    pods: int
    exposition_bytes: int  # uncompressed text format
    series: int
    exporter_cpu_cores: float  # CPU seconds of the exporter per wall second during the load
    rss_before_kib: int
    rss_after_kib: int
    rss_peak_kib: int
    healthy_after: bool
    still_attributed: bool  # every GPU still labelled with its pod after the load
    log_problems: list[str]  # error lines and tracebacks in the exporter's log


def error_lines(exporter: ExporterProcess) -> list[str]:
    return [line for line in exporter.log().split("\n") if " error " in line or "Traceback" in line]


def run_load(concurrency: int = 200, duration_s: float = 60.0, pods: int = 110,
             collect_interval_ms: int = 1000) -> LoadRun:
    with running_node(pods, collect_interval_ms) as (node, exporter):
        text = exporter.metrics()
        pid = exporter.process.pid
        rss_before, _ = memory_kib(pid)
        cpu_before, started = cpu_seconds(pid), time.monotonic()
        result = scrape_load_in_process(f"http://127.0.0.1:{exporter.port}/metrics", concurrency, duration_s)
        cpu_used, wall = cpu_seconds(pid) - cpu_before, time.monotonic() - started
        rss_after, peak = memory_kib(pid)
        return LoadRun(load=result, pods=pods, exposition_bytes=len(text.encode("utf-8")),
                       series=len(parse_samples(text)), exporter_cpu_cores=cpu_used / wall,
                       rss_before_kib=rss_before, rss_after_kib=rss_after, rss_peak_kib=peak,
                       healthy_after=exporter.get("/health").status == 200,
                       still_attributed=attributed(exporter, node), log_problems=error_lines(exporter))


# -- soak ------------------------------------------------------------------------------------------


@dataclass
class SoakRun:
    duration_s: float
    pods: int
    churn_per_s: float
    pods_replaced: int
    scrapes: int
    scrape_failures: int
    rss_samples: list[tuple[float, int]]  # (seconds since the churn began, VmRSS KiB)
    reference_s: float
    rss_reference_kib: int
    rss_end_kib: int
    rss_max_kib: int
    stale_series: int  # series naming a pod that no longer exists, at the end
    healthy_after: bool
    log_problems: list[str]

    @property
    def growth(self) -> float:
        """RSS at the end relative to the reference sample (0.05 = 5 % more)."""
        return self.rss_end_kib / self.rss_reference_kib - 1.0


class _Scrapers:
    """A steady background scrape load: one scrape every ``interval_s`` (gzip, Prometheus's Accept header)."""

    def __init__(self, exporter: ExporterProcess, interval_s: float) -> None:
        self._exporter = exporter
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-scrapers", daemon=True)
        self.scrapes = 0
        self.failures = 0

    def __enter__(self) -> _Scrapers:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
        while not self._stop.wait(self._interval_s):
            self.scrapes += 1
            try:
                response = self._exporter.get("/metrics", headers=headers, timeout=SCRAPE_TIMEOUT_S)
                # Prometheus's Accept gets the text format while the CSV has dcgm-exporter's counters
                # (exporter.metrics.exposition.wants_openmetrics); either way the body must be complete.
                openmetrics = response.headers.get("Content-Type", "").startswith("application/openmetrics-text")
                ok = response.status == 200 and response.body.endswith(b"# EOF\n" if openmetrics else b"\n")
            except OSError:
                ok = False
            self.failures += not ok


def run_soak(duration_s: float = 600.0, reference_s: float = 60.0, pods: int = 110, churn_per_step: int = 10,
             step_s: float = 1.0, sample_every_s: float = 5.0, scrape_every_s: float = 0.25,
             collect_interval_ms: int = 1000, progress: bool = False) -> SoakRun:
    """Churn ``churn_per_step`` pods every ``step_s`` for ``duration_s``; RSS every ``sample_every_s``."""
    with running_node(pods, collect_interval_ms) as (node, exporter):
        pid = exporter.process.pid
        samples: list[tuple[float, int]] = []
        started = time.monotonic()
        next_sample = started
        next_step = started
        with _Scrapers(exporter, scrape_every_s) as scrapers:
            while (now := time.monotonic()) < started + duration_s:
                exporter.assert_running()
                if now >= next_step:
                    node.churn(churn_per_step)
                    next_step += step_s
                if now >= next_sample:
                    rss, _ = memory_kib(pid)
                    samples.append((round(now - started, 1), rss))
                    next_sample += sample_every_s
                    if progress:
                        print(f"  t={now - started:6.0f} s  RSS {rss / KIB:7.1f} MiB  pods replaced {node.replaced}",
                              file=sys.stderr, flush=True)
                time.sleep(max(0.0, min(next_step, next_sample) - time.monotonic()))
        rss, _ = memory_kib(pid)
        samples.append((round(time.monotonic() - started, 1), rss))
        # Churn has stopped: every series must name only the pods that exist now.
        wait_for(lambda: attributed(exporter, node), 60.0, "the final pods attributed")
        current = {spec.name for spec in node.current.values()}
        stale = sum(1 for _, labels, _ in parse_samples(exporter.metrics())
                    if "pod" in labels and labels["pod"] not in current)
        reference = min(samples, key=lambda sample: abs(sample[0] - reference_s))
        return SoakRun(duration_s=duration_s, pods=pods, churn_per_s=churn_per_step / step_s,
                       pods_replaced=node.replaced, scrapes=scrapers.scrapes, scrape_failures=scrapers.failures,
                       rss_samples=samples, reference_s=reference[0], rss_reference_kib=reference[1],
                       rss_end_kib=samples[-1][1], rss_max_kib=max(value for _, value in samples),
                       stale_series=stale, healthy_after=exporter.get("/health").status == 200,
                       log_problems=error_lines(exporter))


# -- reports -----------------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def load_report(run: LoadRun) -> str:
    load = run.load
    return "\n".join([
        f"| scrapers (concurrent connections) | {load.concurrency} |",
        f"| duration | {load.duration_s:.1f} s |",
        f"| node | 8 simulated H100s, {run.pods} pods; exposition {run.exposition_bytes / KIB:.0f} KiB, "
        f"{run.series} series, {load.body_bytes / KIB:.1f} KiB gzip |",
        f"| scrapes answered / failed | {load.requests - load.failed} / {load.failed} {load.failures or ''} |",
        f"| throughput | {load.throughput_per_s:.0f} scrapes/s |",
        f"| latency p50 / p90 / p99 / max | {_ms(load.p50_s)} / {_ms(load.p90_s)} / {_ms(load.p99_s)} / "
        f"{_ms(load.max_s)} |",
        f"| connections open (sampled every 100 ms) | peak {load.open_peak}, mean {load.open_mean:.1f}, "
        f"fewest after the first second {load.open_min_after_ramp} |",
        f"| exporter CPU | {run.exporter_cpu_cores:.2f} cores |",
        f"| exporter RSS before / after / peak | {run.rss_before_kib / KIB:.1f} / {run.rss_after_kib / KIB:.1f} / "
        f"{run.rss_peak_kib / KIB:.1f} MiB |",
        f"| load generator CPU | {load.generator_cpu_s / load.duration_s:.2f} cores |",
        f"| /health after; every GPU still attributed | {'200' if run.healthy_after else 'not 200'}; "
        f"{'yes' if run.still_attributed else 'NO'} |",
        f"| error lines in the exporter's log | {len(run.log_problems)} |",
    ])


def soak_report(run: SoakRun) -> str:
    lines = [
        f"| duration | {run.duration_s / 60:.1f} min |",
        f"| pods | {run.pods} on the node at any time; {run.churn_per_s:g} replaced per second, "
        f"{run.pods_replaced} in all |",
        f"| scrapes / failed | {run.scrapes} / {run.scrape_failures} |",
        f"| RSS at {run.reference_s:.0f} s (reference) | {run.rss_reference_kib / KIB:.1f} MiB |",
        f"| RSS at the end | {run.rss_end_kib / KIB:.1f} MiB ({run.growth * 100:+.1f} %) |",
        f"| RSS max | {run.rss_max_kib / KIB:.1f} MiB |",
        f"| series of deleted pods at the end | {run.stale_series} |",
        f"| /health after | {'200' if run.healthy_after else 'not 200'} |",
        f"| error lines in the exporter's log | {len(run.log_problems)} |",
        "",
        "RSS samples (s: MiB): " + ", ".join(f"{t:.0f}: {kib / KIB:.1f}" for t, kib in run.rss_samples),
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    scrape = commands.add_parser("scrape", help="run the load generator alone against URL; print JSON")
    scrape.add_argument("--url", required=True)
    scrape.add_argument("--concurrency", type=int, default=200)
    scrape.add_argument("--duration", type=float, default=60.0)
    scrape.add_argument("--timeout", type=float, default=SCRAPE_TIMEOUT_S)
    load = commands.add_parser("load", help="N concurrent scrapers against 8 GPUs and 110 pods")
    load.add_argument("--concurrency", type=int, default=200)
    load.add_argument("--duration", type=float, default=60.0)
    load.add_argument("--pods", type=int, default=110)
    soak = commands.add_parser("soak", help="pod churn for N minutes; RSS at minute 1 and at the end")
    soak.add_argument("--minutes", type=float, default=10.0)
    soak.add_argument("--reference-minute", type=float, default=1.0)
    soak.add_argument("--pods", type=int, default=110)
    soak.add_argument("--churn", type=int, default=10, help="pods replaced per second")
    for sub in (load, soak):
        sub.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)

    result: Any
    if args.command == "scrape":
        result = scrape_load(args.url, args.concurrency, args.duration, args.timeout)
        print(json.dumps(asdict(result)))
        return 0
    if args.command == "load":
        result = run_load(args.concurrency, args.duration, args.pods)
        print(load_report(result))
        ok = result.load.failed == 0 and result.healthy_after and result.still_attributed and not result.log_problems
    else:
        result = run_soak(args.minutes * 60, args.reference_minute * 60, args.pods, args.churn, progress=True)
        print(soak_report(result))
        ok = (result.scrape_failures == 0 and result.stale_series == 0 and result.healthy_after
              and not result.log_problems)
    if args.json is not None:
        args.json.write_text(json.dumps(asdict(result), indent=1) + "\n", encoding="utf-8")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
