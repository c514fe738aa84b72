"""What the live node page costs a scrape: /metrics latency with the page open and refreshing.

    python -m bench node-page             # about three minutes; writes docs/benchmarks-node-page.json
    python -m bench node-page --report    # ... and rewrites docs/benchmarks.md's node-page section

One exporter (``--simulate`` with the ``shared-gpus`` scenario: pods on time-sliced GPUs, process
attribution on, a 1 s collect interval) serves three variants in the same run, alternating
their order every repetition so that drift on a shared machine falls on all of them alike:

* **baseline**: a Prometheus-like client scrapes ``/metrics`` back to back (closed loop, one at a
  time, Prometheus' Accept and gzip headers) for the window; nothing else asks;
* **page open**: the same scrapes while ``TABS`` open pages each fetch ``/gpus.json`` every
  ``PAGE_REFRESH_S`` (what ``static/node.js`` does);
* **page hammered**: the same scrapes while ``HAMMER_CONCURRENCY`` clients fetch ``/gpus.json``
  back to back: far beyond any real use, an upper bound on what the page can cost.

Reported per variant: scrape latency p50 and p99 (medians over repetitions), scrapes per second,
``/gpus.json`` answers per second and the exporter's CPU (user + system) over the window.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import loadgen, procstat, runner
from bench.stats import percentile_counting_failures
from bench.suite import git_commit, machine_info

START, END = "<!-- node-page:start -->", "<!-- node-page:end -->"
SCENARIO = "shared-gpus"
WINDOW_S = 20.0
REPETITIONS = 3
TABS = 4
PAGE_REFRESH_S = 2.0
HAMMER_CONCURRENCY = 4
VARIANTS = ("baseline", "page open", "page hammered")
RESULTS = runner.REPO_ROOT / "docs" / "benchmarks-node-page.json"


def _window(port: int, pid: int, variant: str, window_s: float) -> dict[str, Any]:
    scrapes = loadgen.LoadGenerator(f"http://127.0.0.1:{port}/metrics", "prometheus")
    page = loadgen.LoadGenerator(f"http://127.0.0.1:{port}/gpus.json", "plain")
    page_result = loadgen.Result()

    def browse() -> None:
        nonlocal page_result
        if variant == "page open":
            page_result = page.paced(TABS, PAGE_REFRESH_S, window_s)
        elif variant == "page hammered":
            page_result = page.closed(HAMMER_CONCURRENCY, 10**9, window_s)

    before = procstat.cpu_times(pid).total_s
    thread = threading.Thread(target=browse, daemon=True)
    thread.start()
    result = scrapes.closed(1, 10**9, window_s)
    thread.join(window_s + loadgen.SCRAPE_TIMEOUT_S + 5)
    cpu_s = procstat.cpu_times(pid).total_s - before
    latencies = sorted(result.latencies_s)
    failed = sum(result.failures.values())
    return {
        "variant": variant,
        "scrapes": len(latencies),
        "scrape_failures": failed,  # counted in the percentiles as the scrape timeout
        "scrape_p50_ms": percentile_counting_failures(latencies, failed, loadgen.SCRAPE_TIMEOUT_S, 50) * 1000,
        "scrape_p99_ms": percentile_counting_failures(latencies, failed, loadgen.SCRAPE_TIMEOUT_S, 99) * 1000,
        "scrapes_per_s": len(latencies) / result.wall_s if result.wall_s else 0.0,
        "page_answers": len(page_result.latencies_s),
        "page_failures": sum(page_result.failures.values()),
        "page_answers_per_s": len(page_result.latencies_s) / window_s,
        "exporter_cpu_percent": 100 * cpu_s / result.wall_s if result.wall_s else 0.0,
    }


def _wait_healthy(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if runner._get(port, "/health", timeout=2.0)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the exporter did not become healthy within 60 s")


def run(out: Path, *, repetitions: int = REPETITIONS, window_s: float = WINDOW_S) -> dict[str, Any]:
    port = runner.free_port()
    command = [sys.executable, "-m", "exporter", "--simulate", SCENARIO, "-c", "1000",
               "--address", f"127.0.0.1:{port}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    runs = []
    try:
        _wait_healthy(port, process)
        for repetition in range(repetitions):
            order = VARIANTS[repetition % len(VARIANTS):] + VARIANTS[:repetition % len(VARIANTS)]
            for variant in order:
                measured = _window(port, process.pid, variant, window_s)
                measured["repetition"] = repetition
                runs.append(measured)
                print(f"rep {repetition} {variant}: p50 {measured['scrape_p50_ms']:.2f} ms, "
                      f"p99 {measured['scrape_p99_ms']:.2f} ms, page {measured['page_answers_per_s']:.1f}/s",
                      flush=True)
    finally:
        runner.terminate(process)
    data = {"started": started, "commit": git_commit(), "machine": machine_info(),
            "command": "python -m bench node-page", "scenario": SCENARIO,
            "settings": {"window_s": window_s, "repetitions": repetitions, "tabs": TABS,
                         "page_refresh_s": PAGE_REFRESH_S, "hammer_concurrency": HAMMER_CONCURRENCY},
            "runs": runs}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    return data


def _median(runs: Sequence[dict[str, Any]], key: str) -> float:
    return statistics.median(float(run[key]) for run in runs if run[key] is not None)


def section(data: dict[str, Any]) -> str:
    """docs/benchmarks.md's node-page section from a results file."""
    settings = data["settings"]
    lines = [
        START, "",
        f"- Run: `{data['command']}` at {data['started']} (commit {data['commit']}), scenario `{data['scenario']}`; "
        f"{settings['repetitions']} repetitions of {settings['window_s']:g} s windows per variant, alternating; "
        f"page open = {settings['tabs']} pages refreshing every {settings['page_refresh_s']:g} s, hammered = "
        f"{settings['hammer_concurrency']} clients back to back; medians over repetitions.",
        "",
        "| variant | scrape p50 (ms) | scrape p99 (ms) | scrapes/s | /gpus.json answers/s | exporter CPU (%) "
        "| failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for variant in VARIANTS:
        runs = [run for run in data["runs"] if run["variant"] == variant]
        failed = sum(run["scrape_failures"] + run["page_failures"] for run in runs)
        lines.append(f"| {variant} | {_median(runs, 'scrape_p50_ms'):.2f} | {_median(runs, 'scrape_p99_ms'):.2f} | "
                     f"{_median(runs, 'scrapes_per_s'):.0f} | {_median(runs, 'page_answers_per_s'):.1f} | "
                     f"{_median(runs, 'exporter_cpu_percent'):.0f} | {failed} |")
    lines += ["", END]
    return "\n".join(lines)


def write_report(results: Path, document: Path) -> Path:
    text = document.read_text(encoding="utf-8")
    before, rest = text.split(START, 1)
    _, after = rest.split(END, 1)
    document.write_text(before + section(json.loads(results.read_text(encoding="utf-8"))) + after, encoding="utf-8")
    return document
