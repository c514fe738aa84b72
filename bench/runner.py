"""One measurement: start one exporter on one scenario, measure it, stop it.

Phases, in order (each exporter gets exactly the same treatment):

1. start: ``python -m bench.launch`` (pinned to the server core when ``taskset`` exists); poll
   /metrics every 10 ms until every GPU has a reading -> *time to first complete metrics*; with pods,
   go on polling until pod labels appear -> *time to attributed metrics*;
2. warm-up, then an idle window with no scrapes: process CPU (utime+stime) over sampling cycles
   counted inside the process -> *CPU per cycle*; NVML calls, time inside the fake library and the
   computed driver latency over the same cycles; RSS sampled twice a second -> *steady RSS*;
3. one scrape as Prometheus asks (OpenMetrics, gzip) and one as curl asks (text) -> *exposition size*;
4. closed-loop load at each concurrency, then the paced load (N scrapers at an interval), each from a
   separate load-generator process pinned to the other core: latency percentiles, failures, the
   server's CPU during the phase minus its idle rate -> *CPU per scrape*, and the generator's CPU;
5. VmHWM -> *peak RSS*; SIGTERM.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench import exposition, nvmlprobe, procstat
from bench.loadgen import PROMETHEUS_ACCEPT, SCRAPE_TIMEOUT_S
from bench.stats import percentile, percentile_counting_failures

REPO_ROOT = Path(__file__).resolve().parents[1]
# Blocking waits for Xid events: not sampling work (the thread sleeps in the driver until an event or
# its timeout), so they are reported per second instead of per GPU per cycle.
EVENT_WAIT_SYMBOLS = frozenset({"nvmlEventSetWait_v2", "nvmlEventSetWait"})
SERVER_CPU = "0"
CLIENT_CPU = "1"
STARTUP_POLL_S = 0.01  # how often /metrics is polled for the first complete answer


@dataclass(frozen=True)
class Settings:
    """How long each phase lasts; ``QUICK`` and ``FULL`` are the two presets."""

    warmup_s: float
    idle_s: float
    phase_s: float
    phase_requests: int
    concurrencies: tuple[int, ...]
    paced_scrapers: int
    paced_interval_s: float
    paced_s: float
    repetitions: int
    interval_ms: int = 1000
    startup_timeout_s: float = 60.0
    attribution_timeout_s: float = 30.0
    pin: bool = True


QUICK = Settings(warmup_s=1.0, idle_s=8.0, phase_s=2.0, phase_requests=1_000_000, concurrencies=(1, 16, 64),
                 paced_scrapers=64, paced_interval_s=1.0, paced_s=5.0, repetitions=1)
FULL = Settings(warmup_s=3.0, idle_s=30.0, phase_s=8.0, phase_requests=1_000_000, concurrencies=(1, 16, 64),
                paced_scrapers=64, paced_interval_s=1.0, paced_s=30.0, repetitions=3)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pinned(command: list[str], cpu: str, pin: bool) -> list[str]:
    if pin and shutil.which("taskset") and (os.cpu_count() or 1) > 1:
        return ["taskset", "-c", cpu, *command]
    return command


def _get(port: int, path: str = "/metrics", headers: dict[str, str] | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close", **(headers or {})})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def _text(port: int) -> str | None:
    try:
        status, _, body = _get(port, timeout=5.0)
    except OSError:
        return None
    return body.decode("utf-8", "replace") if status == 200 else None


def _wait(check: Callable[[], Any], timeout_s: float, what: str, process: subprocess.Popen[bytes],
          interval_s: float = STARTUP_POLL_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the exporter exited with code {process.returncode} while waiting for {what}")
        value = check()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


@dataclass
class Measurement:
    """Everything one run measured (JSON-serialisable; None where not applicable)."""

    exporter: str
    gpus: int
    pods: int
    repetition: int
    order: int
    interval_ms: int
    startup_s: float = float("nan")
    attribution_s: float | None = None
    idle: dict[str, Any] = field(default_factory=dict)
    exposition: dict[str, Any] = field(default_factory=dict)
    load: list[dict[str, Any]] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    # What a Prometheus-like scrape got (body and the headers that describe it), for the floor server.
    payload: bytes = field(default=b"", repr=False)
    payload_headers: list[str] = field(default_factory=list, repr=False)


class RunningExporter:
    def __init__(self, exporter: str, scenario: Path, settings: Settings, workdir: Path,
                 extra_args: list[str]) -> None:
        self.exporter = exporter
        self.port = free_port()
        self.probe_port = free_port()
        self.log_path = workdir / f"{exporter}-{self.port}.log"
        command = [sys.executable, "-m", "bench.launch", exporter, "--scenario", str(scenario),
                   "--port", str(self.port), "--probe-port", str(self.probe_port),
                   "--interval-ms", str(settings.interval_ms)]
        if extra_args:
            command += ["--", *extra_args]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        self.started = time.monotonic()
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(pinned(command, SERVER_CPU, settings.pin), cwd=workdir, env=env,
                                            stdout=log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid  # taskset execs the command: same pid

    def probe(self) -> dict[str, Any]:
        _, _, body = _get(self.probe_port, "/", timeout=10.0)
        result: dict[str, Any] = json.loads(body)
        return result

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


MIN_WINDOW_CYCLES = 3
MAX_WINDOW_EXTENSION_S = 60.0


def _diff(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {name: count - before.get(name, 0) for name, count in sorted(after.items())
            if count - before.get(name, 0)}


def _idle_window(server: RunningExporter, settings: Settings, gpus: int) -> dict[str, Any]:
    """Counters come from cycle ends (whole cycles only); CPU is a rate over the window, per cycle rate."""
    before = server.probe()
    cpu_before = procstat.cpu_times(server.pid)
    started = time.monotonic()
    rss: list[int] = []
    while True:
        rss.append(procstat.memory(server.pid).rss_bytes)
        time.sleep(0.5)
        elapsed = time.monotonic() - started
        if elapsed >= settings.idle_s:
            cycles = server.probe()["cycles"] - before["cycles"]
            if cycles >= MIN_WINDOW_CYCLES or elapsed >= settings.idle_s + MAX_WINDOW_EXTENSION_S:
                break
    cpu_after = procstat.cpu_times(server.pid)
    wall = time.monotonic() - started
    after = server.probe()
    first, last = before["at_cycle_end"], after["at_cycle_end"]
    cycles = last["cycles"] - first["cycles"]
    span = last["monotonic"] - first["monotonic"]
    cycles_per_s = cycles / span if span > 0 else float("nan")
    cpu = cpu_after.total_s - cpu_before.total_s
    cpu_per_cycle = (cpu / wall) / cycles_per_s if cycles else float("nan")
    calls = _diff(last["calls"], first["calls"])
    event_waits = sum(count for name, count in calls.items() if name in EVENT_WAIT_SYMBOLS)
    sampling = {name: count for name, count in calls.items() if name not in EVENT_WAIT_SYMBOLS}
    missing = _diff(last["missing_calls"], first["missing_calls"])
    keyed = _diff(last.get("keyed_calls", {}), first.get("keyed_calls", {}))
    entries = last["field_entries"] - first["field_entries"]

    def per_cycle(value: float) -> float:
        return value / cycles if cycles else float("nan")

    nvml_cpu = per_cycle(last["nvml_thread_cpu_s"] - first["nvml_thread_cpu_s"])
    parts = {name: per_cycle(spent - first["parts_thread_cpu_s"].get(name, 0.0))
             for name, spent in last["parts_thread_cpu_s"].items()}
    driver = nvmlprobe.driver_latency_s(sampling, entries, after["latency"], after["field_value_latency"])
    return {
        "wall_s": wall,
        "cycles": cycles,
        "cycles_per_s": cycles_per_s,
        "cpu_s": cpu,
        "cpu_user_s": cpu_after.user_s - cpu_before.user_s,
        "cpu_system_s": cpu_after.system_s - cpu_before.system_s,
        "cpu_percent_of_core": 100 * cpu / wall,
        "cpu_per_cycle_s": cpu_per_cycle,
        "nvml_thread_cpu_per_cycle_s": nvml_cpu,
        "cpu_excl_nvml_per_cycle_s": cpu_per_cycle - nvml_cpu,
        "cpu_excl_nvml_percent_of_core": 100 * (cpu_per_cycle - nvml_cpu) * cycles_per_s,
        "nvml_wall_per_cycle_s": per_cycle(last["nvml_wall_s"] - first["nvml_wall_s"]),
        "cycle_wall_s": per_cycle(last["cycle_wall_s"] - first["cycle_wall_s"]),
        "cycle_thread_cpu_s": per_cycle(last["cycle_thread_cpu_s"] - first["cycle_thread_cpu_s"]),
        "parts_thread_cpu_per_cycle_s": parts,
        "driver_latency_per_cycle_s": per_cycle(driver),
        "nvml_calls_per_cycle": per_cycle(sum(sampling.values())),
        "nvml_calls_per_gpu_per_cycle": per_cycle(sum(sampling.values())) / gpus,
        "event_wait_calls_per_s": event_waits / span if span > 0 else float("nan"),
        "missing_calls_per_gpu_per_cycle": per_cycle(sum(missing.values())) / gpus,
        "calls_per_cycle_by_symbol": {name: per_cycle(count) for name, count in sampling.items()},
        "missing_calls_per_cycle_by_symbol": {name: per_cycle(count) for name, count in missing.items()},
        "calls_per_cycle_by_argument": {name: per_cycle(count) for name, count in keyed.items()},
        "field_entries_per_cycle": per_cycle(entries),
        "rss_steady_bytes": int(percentile(rss, 50)) if rss else None,
        "threads": after["threads"],
    }


def _exposition(server: RunningExporter, result: Measurement) -> dict[str, Any]:
    _, _, plain = _get(server.port)
    size = exposition.measure(plain.decode("utf-8", "replace"))
    _, headers, prometheus = _get(server.port, headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
    result.payload = prometheus
    result.payload_headers = [f"Content-Type: {headers.get('content-type', 'text/plain')}"]
    if headers.get("content-encoding"):
        result.payload_headers.append(f"Content-Encoding: {headers['content-encoding']}")
    return {"text_bytes": size.bytes, "series": size.series, "families": size.families,
            "prometheus_bytes": len(prometheus), "prometheus_content_type": headers.get("content-type", ""),
            "prometheus_gzip": headers.get("content-encoding", "") == "gzip"}


def _load_phases(port: int, pid: int, settings: Settings, idle_rate: float, name: str,
                 progress: Callable[[str], None]) -> list[dict[str, Any]]:
    phases = []
    for concurrency in settings.concurrencies:
        phase = _load_phase(port, pid, settings, idle_rate, "closed", concurrency)
        progress(f"    {name}: closed c={concurrency}: {phase['scrapes']} scrapes, "
                 f"p50 {phase['p50_s'] * 1e3:.2f} ms, p99 {phase['p99_s'] * 1e3:.2f} ms, {phase['failed']} failed")
        phases.append(phase)
    if settings.paced_s > 0:
        phase = _load_phase(port, pid, settings, idle_rate, "paced", settings.paced_scrapers)
        progress(f"    {name}: paced {settings.paced_scrapers} x 1/{settings.paced_interval_s:g}s: "
                 f"p50 {phase['p50_s'] * 1e3:.2f} ms, p99 {phase['p99_s'] * 1e3:.2f} ms, {phase['failed']} failed")
        phases.append(phase)
    return phases


def _load_phase(port: int, pid: int, settings: Settings, idle_cpu_rate: float, mode: str,
                concurrency: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "bench.loadgen", f"http://127.0.0.1:{port}/metrics",
               "--mode", mode, "--concurrency", str(concurrency), "--timeout", str(SCRAPE_TIMEOUT_S)]
    if mode == "closed":
        command += ["--requests", str(settings.phase_requests), "--duration", str(settings.phase_s)]
    else:
        command += ["--interval", str(settings.paced_interval_s), "--duration", str(settings.paced_s)]
    cpu_before = procstat.cpu_times(pid)
    started = time.monotonic()
    completed = subprocess.run(pinned(command, CLIENT_CPU, settings.pin), capture_output=True, check=True,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT)
    wall = time.monotonic() - started
    cpu = procstat.cpu_times(pid).total_s - cpu_before.total_s
    result = json.loads(completed.stdout)
    latencies = result["latencies_s"]
    scrapes = len(latencies)
    failed = sum(result["failures"].values())
    scrape_cpu = max(0.0, cpu - idle_cpu_rate * wall)

    def counted(q: float) -> float:
        return percentile_counting_failures(latencies, failed, SCRAPE_TIMEOUT_S, q)

    return {
        "mode": mode,
        "concurrency": concurrency,
        "interval_s": settings.paced_interval_s if mode == "paced" else None,
        "scrapes": scrapes,
        "failures": result["failures"],
        "failed": failed,
        "wall_s": result["wall_s"],
        "throughput_per_s": scrapes / result["wall_s"] if result["wall_s"] else float("nan"),
        # Percentiles count every failed scrape as the scrape timeout (see percentile_counting_failures);
        # the successful_* ones leave failures out, for reference only.
        "failed_counted_as_s": SCRAPE_TIMEOUT_S,
        "p50_s": counted(50),
        "p90_s": counted(90),
        "p99_s": counted(99),
        "max_s": counted(100),
        "successful_p50_s": percentile(latencies, 50),
        "successful_p99_s": percentile(latencies, 99),
        "server_cpu_s": cpu,
        "server_cpu_per_scrape_s": scrape_cpu / scrapes if scrapes else float("nan"),
        "generator_cpu_s": result["cpu_s"],
        "generator_cpu_percent_of_core": 100 * result["cpu_s"] / result["wall_s"] if result["wall_s"] else None,
    }


def measure(exporter: str, gpus: int, pods: int, scenario: Path, settings: Settings, *, repetition: int,
            order: int, extra_args: list[str] | None = None, progress: Callable[[str], None] = print
            ) -> Measurement:
    result = Measurement(exporter, gpus, pods, repetition, order, settings.interval_ms)
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{exporter}-"))
    server = RunningExporter(exporter, scenario, settings, workdir, extra_args or [])
    try:
        complete = _wait(lambda: (text := _text(server.port)) and exposition.gpus_present(exporter, text) >= gpus,
                         settings.startup_timeout_s, "metrics of every GPU", server.process)
        result.startup_s = time.monotonic() - server.started
        del complete
        if pods and exporter == "ours":
            try:
                _wait(lambda: (text := _text(server.port)) and exposition.attributed_series(text) > 0,
                      settings.attribution_timeout_s, "pod labels", server.process, interval_s=0.05)
                result.attribution_s = time.monotonic() - server.started
            except TimeoutError as exc:
                result.errors.append(str(exc))
        _wait(lambda: server.probe().get("cycles", 0) >= 1, settings.startup_timeout_s, "a sampling cycle",
              server.process, interval_s=0.05)
        time.sleep(settings.warmup_s)
        progress(f"    {exporter}: up in {result.startup_s:.2f} s; idle window {settings.idle_s:.0f} s")
        result.idle = _idle_window(server, settings, gpus)
        result.exposition = _exposition(server, result)
        idle_rate = result.idle["cpu_s"] / result.idle["wall_s"]
        result.load = _load_phases(server.port, server.pid, settings, idle_rate, exporter, progress)
        mem = procstat.memory(server.pid)
        result.memory = {"rss_end_bytes": mem.rss_bytes, "peak_rss_bytes": mem.peak_rss_bytes,
                         "rss_steady_bytes": result.idle.get("rss_steady_bytes")}
    except (RuntimeError, TimeoutError, OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
        progress(f"    {exporter}: FAILED: {exc}\n{server.log_tail()}")
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def measure_floor(payload: bytes, headers: list[str], gpus: int, pods: int, settings: Settings, *,
                  repetition: int, order: int, progress: Callable[[str], None] = print) -> Measurement:
    """The load phases against ``bench.floor`` serving ``payload`` (what the exporter just served)."""
    result = Measurement("floor", gpus, pods, repetition, order, settings.interval_ms)
    workdir = Path(tempfile.mkdtemp(prefix="bench-floor-"))
    body = workdir / "body"
    body.write_bytes(payload)
    port = free_port()
    command = [sys.executable, "-m", "bench.floor", "--port", str(port), "--body", str(body)]
    for header in headers:
        command += ["--header", header]
    process = subprocess.Popen(pinned(command, SERVER_CPU, settings.pin), cwd=REPO_ROOT,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        _wait(lambda: _text(port) is not None, 10.0, "the floor server", process)
        result.exposition = {"prometheus_bytes": len(payload)}
        result.load = _load_phases(port, process.pid, settings, 0.0, "floor", progress)
        mem = procstat.memory(process.pid)
        result.memory = {"rss_end_bytes": mem.rss_bytes, "peak_rss_bytes": mem.peak_rss_bytes}
    except (RuntimeError, TimeoutError, OSError, subprocess.CalledProcessError, ValueError, KeyError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
        progress(f"    floor: FAILED: {exc}")
    finally:
        terminate(process)
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL if it has not ended within 5 s."""
    process.terminate()
    try:
        process.wait(5)
    except subprocess.TimeoutExpired:
        process.kill()


def as_dict(measurement: Measurement) -> dict[str, Any]:
    data = asdict(measurement)
    data.pop("payload", None)
    data.pop("payload_headers", None)
    return data
