"""Which HTTP server: candidates serving the same bytes under the same load, side by side.

    python -m bench.servers [--body-gpus 8] [--rounds 3] [--out docs/benchmarks-servers.json]

Each candidate is a separate process (pinned to the server core) that serves one fixed exposition
(ours, 8 simulated GPUs, OpenMetrics + gzip, as Prometheus gets it) on every path; the load
generator of the main harness (``bench.loadgen``, pinned to the other core) runs the same phases
against each: closed loop at 1, 16 and 64, then 64 paced scrapers once a second. Rounds alternate
the order of the candidates. The candidates:

* ``floor``: ``bench.floor``, one thread, no HTTP parsing: what the machine itself allows;
* ``asyncio``: the exporter's own listener (``exporter.web.server``, asyncio streams of the
  standard library, as shipped: deadlines, connection cap, parsing, negotiation);
* ``aiohttp``: aiohttp's ``web`` server with one handler returning the same bytes and headers
  (``access_log=None``);
* ``threads``: the standard library's ``ThreadingHTTPServer`` (one thread per connection), the
  shape of the server before (which used a 32-thread pool of the same handler class).

Reported per candidate: RSS after start-up (what the server's imports cost), CPU per scrape,
latency percentiles per phase, failures.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import procstat
from bench.runner import QUICK, REPO_ROOT, SERVER_CPU, _load_phases, _text, _wait, free_port, pinned, terminate
from bench.suite import git_commit

CANDIDATES = ("floor", "asyncio", "aiohttp", "threads")
CONTENT_TYPE = "application/openmetrics-text; version=1.0.0; charset=utf-8"


def serve(candidate: str, port: int, body: bytes) -> None:
    """Run one candidate in this process until SIGTERM."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if candidate == "asyncio":
        _serve_asyncio(port, body)
    elif candidate == "aiohttp":
        _serve_aiohttp(port, body)
    elif candidate == "threads":
        _serve_threads(port, body)
    else:
        raise SystemExit(f"unknown candidate {candidate}")


class _FixedExposition:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def body(self, openmetrics: bool, compressed: bool) -> bytes:
        return self._body

    @staticmethod
    def content_type(openmetrics: bool) -> str:
        return CONTENT_TYPE


class _FixedCache:
    def __init__(self, body: bytes) -> None:
        self.current = _FixedExposition(body)


def _serve_asyncio(port: int, body: bytes) -> None:
    from exporter.web.health import HealthReport  # noqa: PLC0415
    from exporter.web.server import ExporterHTTPServer  # noqa: PLC0415

    server = ExporterHTTPServer(f"127.0.0.1:{port}", _FixedCache(body), lambda: HealthReport(True, "OK"))  # type: ignore[arg-type]
    server.start()
    while True:
        time.sleep(3600)


def _serve_aiohttp(port: int, body: bytes) -> None:
    from aiohttp import web  # noqa: PLC0415

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip",
                                                "Vary": "Accept, Accept-Encoding"})

    app = web.Application()
    app.router.add_get("/{tail:.*}", metrics)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None, backlog=1024)


def _serve_threads(port: int, body: bytes) -> None:
    import http.server  # noqa: PLC0415

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        request_queue_size = 1024
        daemon_threads = True

    Server(("127.0.0.1", port), Handler).serve_forever()


def _body(gpus: int) -> tuple[bytes, list[str]]:
    """What ours serves Prometheus for ``gpus`` simulated GPUs (started once, scraped once)."""
    from bench import scenarios  # noqa: PLC0415
    from bench.runner import RunningExporter  # noqa: PLC0415

    with tempfile.TemporaryDirectory(prefix="bench-servers-") as tmp:
        scenario = scenarios.write_scenario(Path(tmp), gpus, 0, kubernetes=False)
        server = RunningExporter("ours", scenario, QUICK, Path(tmp), [])
        try:
            _wait(lambda: _text(server.port), 60, "the exporter", server.process)
            time.sleep(1.5)
            import gzip  # noqa: PLC0415
            import http.client  # noqa: PLC0415

            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            conn.request("GET", "/metrics",
                         headers={"Accept": "application/openmetrics-text", "Accept-Encoding": "gzip"})
            response = conn.getresponse()
            payload = response.read()
            conn.close()
            assert gzip.decompress(payload)
            return payload, [f"Content-Type: {response.getheader('Content-Type')}", "Content-Encoding: gzip"]
        finally:
            server.stop()


def measure(candidate: str, body_file: Path, body: bytes, headers: list[str]) -> dict[str, Any]:
    port = free_port()
    if candidate == "floor":
        command = [sys.executable, "-m", "bench.floor", "--port", str(port), "--body", str(body_file)]
        for header in headers:
            command += ["--header", header]
    else:
        command = [sys.executable, "-m", "bench.servers", "--serve", candidate, "--port", str(port),
                   "--body-file", str(body_file)]
    process = subprocess.Popen(pinned(command, SERVER_CPU, QUICK.pin), cwd=REPO_ROOT,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        _wait(lambda: _text(port) is not None or None, 30, candidate, process)
        rss_start = procstat.memory(process.pid).rss_bytes
        phases = _load_phases(port, process.pid, QUICK, 0.0, candidate, lambda line: print(line, flush=True))
        memory = procstat.memory(process.pid)
        return {"candidate": candidate, "rss_after_start_bytes": rss_start, "peak_rss_bytes": memory.peak_rss_bytes,
                "load": phases}
    finally:
        terminate(process)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.servers", description=__doc__.splitlines()[0])
    parser.add_argument("--serve", choices=CANDIDATES[1:], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--body-file", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--body-gpus", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--candidates", default=",".join(CANDIDATES))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "results" / "servers.json")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.serve:
        serve(args.serve, args.port, args.body_file.read_bytes())
        return 0
    candidates = [name.strip() for name in args.candidates.split(",") if name.strip()]
    body, headers = _body(args.body_gpus)
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                               "commit": git_commit(), "body_bytes": len(body), "settings": {"phase_s": QUICK.phase_s,
                                                                     "paced_s": QUICK.paced_s},
                               "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-servers-") as tmp:
        body_file = Path(tmp) / "body"
        body_file.write_bytes(body)
        for round_number in range(args.rounds):
            order = candidates if round_number % 2 == 0 else list(reversed(candidates))
            for candidate in order:
                print(f"[round {round_number + 1}/{args.rounds}] {candidate}", flush=True)
                run = measure(candidate, body_file, body, headers)
                run["round"] = round_number
                results["runs"].append(run)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(summary(results))
    return 0


def summary(results: dict[str, Any]) -> str:
    """A markdown table: medians over rounds per candidate."""
    from statistics import median  # noqa: PLC0415

    rows = ["| candidate | RSS after start, MiB | CPU per scrape (c=1), ms | p99 c=1, ms | p99 c=64, ms | "
            "scrapes/s c=64 | p99 64 paced, ms | failed |", "|---|---|---|---|---|---|---|---|"]
    for candidate in dict.fromkeys(run["candidate"] for run in results["runs"]):
        runs = [run for run in results["runs"] if run["candidate"] == candidate]

        def phase(run: dict[str, Any], mode: str, concurrency: int) -> dict[str, Any]:
            return next(p for p in run["load"] if p["mode"] == mode and p["concurrency"] == concurrency)

        rss = median(run["rss_after_start_bytes"] for run in runs) / 2**20
        cpu = median(phase(run, "closed", 1)["server_cpu_per_scrape_s"] for run in runs) * 1e3
        p99_1 = median(phase(run, "closed", 1)["p99_s"] for run in runs) * 1e3
        p99_64 = median(phase(run, "closed", 64)["p99_s"] for run in runs) * 1e3
        rate_64 = median(phase(run, "closed", 64)["throughput_per_s"] for run in runs)
        paced = median(phase(run, "paced", 64)["p99_s"] for run in runs) * 1e3
        failed = sum(p["failed"] for run in runs for p in run["load"])
        rows.append(f"| {candidate} | {rss:.1f} | {cpu:.3f} | {p99_1:.2f} | {p99_64:.2f} | {rate_64:,.0f} | "
                    f"{paced:.2f} | {failed} |")
    return "\n".join(rows)


if __name__ == "__main__":
    raise SystemExit(main())
