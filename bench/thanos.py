"""Two clusters behind Thanos: series per node, samples per second per cluster, dashboard latency.

``python -m bench.thanos [--settle 30] [--repeat 5] [--out docs/fleet-thanos.json]``

Starts the fleet of tests/e2e/test_two_clusters.py (tests/e2e/thanos_fleet.py: per cluster the
chart-installed exporter on the built-in ``alert-zoo`` node, Prometheus 3 with the external label
``cluster`` and a Thanos sidecar; one Thanos Query; one Thanos Ruler with the recording rules), lets
it run ``--settle`` seconds, then measures:

* **series per node**: what Prometheus scraped from the exporter (``scrape_samples_scraped``), and the
  head series of each cluster's Prometheus (its TSDB status);
* **samples per second per cluster**: the increase of ``prometheus_tsdb_head_samples_appended_total``
  (read from each Prometheus' own /metrics) over the settle time, at the test's 1 s scrape and
  evaluation interval; and what the same series give at the chart's 15 s interval;
* **dashboard latency**: every query of each of our dashboards for cluster ``a``, as Grafana sends
  them (range queries over the last 5 minutes at a 15 s step, variables resolved), once through the
  Thanos Query and once straight from cluster ``a``'s Prometheus (``cluster`` "None"), ``--repeat``
  times; per dashboard the time to answer all its queries one after the other (median of the
  repetitions) and its slowest query. The heaviest dashboard is the slowest through Thanos.

The binaries come from the platform cache (``scripts/cluster bin prometheus``, ``scripts/cluster bin
thanos``). Figures are for one simulated node per cluster on whatever machine runs this; docs/fleet.md
gives them with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devcluster import build
from tests.dashboards.dashboard_queries import dashboard_queries, load_dashboards, query_variables
from tests.e2e.test_default_install import GRAFANA_BUILTINS, resolve_variables
from tests.e2e.thanos_fleet import CLUSTERS, ZOO_NODE, Fleet, two_clusters
from tests.support.prometheus import PrometheusHarness

CHART_INTERVAL_S = 15.0
RANGE_S = 300.0
STEP_S = 15.0


def _binary(name: str) -> str:
    path = build.binary_path(name)
    if not path.is_file():
        sys.exit(f"{name} is not built: scripts/cluster bin {name}")
    return str(path)


def _self_metric(server: PrometheusHarness, name: str) -> float:
    """Sum of one metric family on a Prometheus' own /metrics (it does not scrape itself here)."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and not line.startswith("#") and line[len(name)] in "{ ")


def _dashboard_queries(fleet: Fleet, cluster: str) -> dict[str, list[str]]:
    base = {"datasource": "prometheus", **GRAFANA_BUILTINS}
    found: dict[str, list[str]] = {}
    for dashboard in load_dashboards().values():
        values = resolve_variables(fleet.query, query_variables(dashboard), base,
                                   {"cluster": cluster, "Hostname": ZOO_NODE})
        queries = dashboard_queries(dashboard)
        found[queries[0].dashboard] = [query.resolved(values) for query in queries
                                       if not query.source.startswith("variable")]
    return found


def _timed_range(server: PrometheusHarness, expr: str, end: float) -> float:
    start = time.perf_counter()
    server.query_range(expr, end - RANGE_S, end, STEP_S)
    return time.perf_counter() - start


def measure(fleet: Fleet, settle_s: float, repeat: int) -> dict[str, Any]:
    before = {c: _self_metric(s, "prometheus_tsdb_head_samples_appended_total") for c, s in fleet.clusters.items()}
    started = time.monotonic()
    time.sleep(settle_s)  # a benchmark: samples accumulate over wall time
    elapsed = time.monotonic() - started
    after = {c: _self_metric(s, "prometheus_tsdb_head_samples_appended_total") for c, s in fleet.clusters.items()}
    clusters: dict[str, Any] = {}
    for cluster, server in fleet.clusters.items():
        [scraped] = server.query('scrape_samples_scraped{job="gpu-pod-exporter"} > 0')
        head = server.api("status/tsdb")["headStats"]["numSeries"]
        recorded = len(server.query('{__name__=~".+:.+"}'))
        gpus = len(server.query('DCGM_FI_DEV_FB_USED'))
        clusters[cluster] = {
            "exporter_series_per_scrape": scraped.value, "gpus": gpus, "recorded_series": recorded,
            "head_series": head,
            "samples_per_second_measured": (after[cluster] - before[cluster]) / elapsed,
            "samples_per_second_at_15s": (scraped.value + recorded) / CHART_INTERVAL_S,
        }
    queries = _dashboard_queries(fleet, "a")
    local = {name: [q.replace('cluster="a"', 'cluster=""') for q in exprs] for name, exprs in queries.items()}
    latency: dict[str, Any] = {}
    for name, exprs in queries.items():
        runs: dict[str, list[list[float]]] = {"thanos": [], "prometheus": []}
        for _ in range(repeat):
            end = time.time()
            runs["thanos"].append([_timed_range(fleet.query, q, end) for q in exprs])
            runs["prometheus"].append([_timed_range(fleet.clusters["a"], q, end) for q in local[name]])
        latency[name] = {"queries": len(exprs), **{
            engine: {"all_queries_s_median": statistics.median(sum(run) for run in found),
                     "slowest_query_s_median": statistics.median(max(run) for run in found)}
            for engine, found in runs.items()}}
    heaviest = max(latency, key=lambda n: latency[n]["thanos"]["all_queries_s_median"])
    return {"engines": {"prometheus": fleet.prometheus_version, "thanos": fleet.thanos_version},
            "clusters": clusters, "settle_s": settle_s, "repeat": repeat, "range_s": RANGE_S, "step_s": STEP_S,
            "dashboards": latency, "heaviest_dashboard": heaviest}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.thanos", description=__doc__.splitlines()[0])
    parser.add_argument("--settle", type=float, default=30.0, help="seconds of scraping before measuring")
    parser.add_argument("--repeat", type=int, default=5, help="repetitions of every dashboard's queries")
    parser.add_argument("--out", type=Path, help="write the results here (JSON)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-thanos-") as tmp, \
            two_clusters(_binary("prometheus"), _binary("thanos"), Path(tmp)) as fleet:
        assert set(fleet.clusters) == set(CLUSTERS)
        results = measure(fleet, args.settle, args.repeat)
    text = json.dumps(results, indent=2) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
