"""200 concurrent scrapers against 8 simulated GPUs and 110 pods: not one scrape fails.

The bounded CI version of ``python -m bench.soak load`` (60 s there, 10 s here). The generator
runs as its own process and really holds 200 connections: each scraper reconnects as soon as its
answer is complete (the exporter closes connections after each response), and while the worker
pool is busy the connection waits in the listen backlog. Every answer is checked (status,
Content-Length, gzip stream, OpenMetrics ``# EOF``). Latency is measured and printed, never
asserted (docs/load-and-soak.md has the figures).
"""

from __future__ import annotations

import pytest

from bench.soak import load_report, run_load

pytestmark = pytest.mark.e2e

CONCURRENCY = 200
DURATION_S = 10.0


def test_200_concurrent_scrapers_against_8_gpus_and_110_pods_zero_failures() -> None:
    run = run_load(CONCURRENCY, DURATION_S, pods=110)
    print(load_report(run))  # the measurement, visible with pytest -s
    load = run.load
    assert load.failures == {}
    assert load.open_peak == CONCURRENCY  # the generator did hold 200 connections at once
    assert load.requests >= CONCURRENCY  # and every scraper got answers
    assert run.pods == 110 and run.series > 0
    assert run.healthy_after  # /health 200 after the load
    assert run.still_attributed  # and the payload still names every GPU's pod
    assert run.log_problems == []  # no "request failed", no traceback
