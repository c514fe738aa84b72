"""A real Prometheus for end-to-end tests: scrape a target every second, load rule files, query.

Why: promtool proves rules against hand-written series, and the static tests prove names against
the contract. Neither proves that the exporter's actual exposition, scraped by the Prometheus
that users run, answers the dashboards' queries and fires the alerts. This harness starts
Debian's `prometheus` (2.42) on a free port with a throw-away data directory and a generated
configuration, waits until it is ready, and offers the HTTP API calls the e2e tests need.

Usage::

    with PrometheusHarness(["127.0.0.1:9400"], rule_files=RULE_FILES) as prom:
        prom.wait_for_targets_up()
        prom.wait_for('DCGM_FI_DEV_GPU_TEMP', lambda samples: len(samples) == 8)
        for query in dashboard_panel_queries({"Hostname": "node-a", "gpu": "0", ...}):
            prom.query(query.expr)          # raises PrometheusError on a bad query

A missing `prometheus` binary skips the calling test, or fails it when CI=true
(`require_prometheus`).

Engines: the tests that prove rules and dashboards run on both supported Prometheus generations
(``ENGINES``): Debian's 2.42, the oldest supported, and Prometheus 3 built from its Go module
(``scripts/cluster bin prometheus``; ``prometheus_engine``). Prometheus 3 changed scrape-protocol
negotiation, UTF-8 names, left-open range selectors and regex matching, so passing on 2.42 alone
proves nothing about what most users run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import build
from tests.dashboards.dashboard_queries import (
    DASHBOARD_DIR,
    DashboardQuery,
    all_queries,
    dcgm_exporter_queries,
)
from tests.support.http import QuietHandler, serving
from tests.support.paths import REPO_ROOT
from tests.support.polling import DeadlineExceeded, is_answer, wait_for
from tests.support.ports import free_port
from tests.support.processes import ProcessExited, ScratchServer, ServerProcess
from tests.support.programs import require_program

RULE_FILES = tuple(sorted((REPO_ROOT / "deploy" / "rules").glob("*.yaml")))
DEFAULT_JOB = "gpu-pod-exporter"


class PrometheusError(RuntimeError):
    """Prometheus answered an API call with an error (bad query, not ready, ...)."""


@dataclass(frozen=True)
class Sample:
    """One element of an instant-query result."""

    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class RangeSeries:
    """One series of a range-query result: its labels and (timestamp, value) points."""

    labels: dict[str, str]
    points: list[tuple[float, float]]


@dataclass(frozen=True)
class ResolvedQuery:
    """A dashboard query with its template variables replaced, ready to send to Prometheus."""

    dashboard: str
    source: str
    expr: str
    instant: bool


def require_prometheus() -> str:
    """The prometheus executable (skip locally, fail under CI=true when absent)."""
    return require_program("prometheus")


#: The Prometheus generations the engine-parametrized tests run on: Debian bookworm's 2.42 (the
#: oldest supported version) and 3.x built from github.com/prometheus/prometheus (tools/platform/prometheus).
ENGINES = ("2.42", "3")


def prometheus_engine(engine: str, program: str = "prometheus") -> str:
    """The ``prometheus`` (or ``promtool``) executable of ``engine``.

    "2.42" is Debian's package on PATH (``require_program``). "3" is the binary ``scripts/cluster
    build`` put in the platform cache; when it is missing the calling test skips with how to build
    it, except under CI=true, where it is built now (``./scripts/test`` builds it before the suite, so
    this only happens when that step was bypassed) and a failed build fails the test.
    """
    if engine == "2.42":
        return require_program(program)
    if engine != "3":
        raise ValueError(f"unknown Prometheus engine {engine!r}; one of {ENGINES}")
    path = build.binary_path(program)
    if path.is_file() and os.access(path, os.X_OK):
        return str(path)
    if os.environ.get("CI", "").lower() != "true":
        pytest.skip(f"Prometheus 3's {program} is not built: `scripts/cluster bin {program}` builds it "
                    "(Go >= 1.26, several minutes once; ./scripts/test does it)")
    try:
        return str(build.build(program))
    except build.BuildError as error:
        pytest.fail(f"Prometheus 3's {program} could not be built; CI=true requires it: {error}", pytrace=False)


@functools.cache
def engine_version(binary: str) -> str:
    """The version ``binary --version`` reports (``2.42.0``, ``3.16.0``): what the tests ran on."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, check=False)
    match = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    if match is None:
        raise PrometheusError(f"{binary} --version reports no version: {(out.stdout + out.stderr)[:200]!r}")
    return match[1]


@contextmanager
def serve_metrics(render: Callable[[], bytes],
                  requests: list[dict[str, str]] | None = None) -> Iterator[str]:
    """A stand-in scrape target on 127.0.0.1: ``/metrics`` answers ``render()`` (text format 0.0.4).

    Yields ``host:port`` for a Prometheus scrape config; other paths get 404. When ``requests`` is
    given, the headers of each scrape are appended to it (what a Prometheus version asks for:
    ``Accept``, ``User-Agent``, ...).
    """

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            if self.path != "/metrics":
                self.send_error(404)
                return
            if requests is not None:
                requests.append(dict(self.headers.items()))
            self.answer(200, render(), "text/plain; version=0.0.4")

    with serving(Handler) as server:
        yield f"127.0.0.1:{server.server_address[1]}"


class PrometheusHarness(ScratchServer):
    """A private Prometheus process scraping ``targets`` (host:port) every ``scrape_interval``.

    ``rule_files`` are loaded as they are (absolute paths); ``honor_labels`` defaults to True as
    in the chart's ServiceMonitor, so the exporter's pod/namespace labels win over target
    labels; ``target_labels`` are added to every target (e.g. ``{"Hostname": "node-a"}``, the
    relabelling docs/alerts.md recommends). ``extra_jobs`` adds scrape jobs of other programs
    (job name -> targets, same interval), e.g. a stand-in for kube-state-metrics, so that series
    from other exporters keep their own ``job`` as in a real cluster. ``storage_path`` serves an
    existing TSDB (e.g. backfilled blocks; kept on stop) instead of a throw-away one, with
    ``retention`` and any ``extra_flags`` (e.g. ``--query.lookback-delta=60s``).
    """

    def __init__(
        self,
        targets: Sequence[str],
        *,
        rule_files: Sequence[Path] = (),
        job: str = DEFAULT_JOB,
        metrics_path: str = "/metrics",
        scrape_interval: str = "1s",
        evaluation_interval: str = "1s",
        honor_labels: bool = True,
        target_labels: Mapping[str, str] | None = None,
        extra_jobs: Mapping[str, Sequence[str]] | None = None,
        prometheus_binary: str | None = None,
        storage_path: Path | None = None,
        retention: str = "1d",
        extra_flags: Sequence[str] = (),
        startup_timeout_s: float = 60.0,
    ) -> None:
        self.targets = list(targets)
        self.rule_files = [Path(p).resolve() for p in rule_files]
        self.job = job
        self.metrics_path = metrics_path
        self.scrape_interval = scrape_interval
        self.evaluation_interval = evaluation_interval
        self.honor_labels = honor_labels
        self.target_labels = dict(target_labels or {})
        self.extra_jobs = {job: list(targets) for job, targets in (extra_jobs or {}).items()}
        self.prometheus_binary = prometheus_binary
        self.startup_timeout_s = startup_timeout_s
        self.storage_path = storage_path
        self.retention = retention
        self.extra_flags = list(extra_flags)
        self.port = 0
        super().__init__()

    # ------------------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        """Base URL of the running Prometheus, e.g. http://127.0.0.1:41234."""
        return f"http://127.0.0.1:{self.port}"

    def config(self) -> dict[str, Any]:
        """The prometheus.yml this harness writes."""
        static: dict[str, Any] = {"targets": self.targets}
        if self.target_labels:
            static["labels"] = self.target_labels
        return {
            "global": {"scrape_interval": self.scrape_interval, "scrape_timeout": self.scrape_interval,
                       "evaluation_interval": self.evaluation_interval},
            "rule_files": [str(p) for p in self.rule_files],
            "scrape_configs": [
                {"job_name": self.job, "metrics_path": self.metrics_path, "honor_labels": self.honor_labels,
                 "static_configs": [static]},
                *({"job_name": job, "static_configs": [{"targets": targets}]}
                  for job, targets in self.extra_jobs.items()),
            ],
        }

    def start(self) -> PrometheusHarness:
        """Write the configuration, start Prometheus and wait until /-/ready answers 200."""
        return self.launch().wait_ready()

    def launch(self) -> PrometheusHarness:
        """Write the configuration and start Prometheus without waiting for it (``wait_ready`` does):
        several servers that must see the same events start together this way."""
        binary = self.prometheus_binary or require_prometheus()
        self.workdir = Path(tempfile.mkdtemp(prefix="prometheus-harness-"))
        config_path = self.workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(self.config(), sort_keys=False), encoding="utf-8")
        self.port = free_port()
        storage = self.storage_path or self.workdir / "data"
        self.server = ServerProcess(
            "prometheus",
            [binary, f"--config.file={config_path}", f"--storage.tsdb.path={storage}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn",
             f"--storage.tsdb.retention.time={self.retention}", *self.extra_flags],
            self.workdir, f"{self.url}/-/ready").launch()
        return self

    def wait_ready(self) -> PrometheusHarness:
        """Wait until the launched Prometheus answers /-/ready (stopping it if it never does)."""
        assert self.server is not None, "launch() first"
        try:
            self.server.wait_ready(self.startup_timeout_s)
        except (DeadlineExceeded, ProcessExited):
            self.stop()
            raise
        return self


    # ------------------------------------------------------------------------------------ API
    def api(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        """GET /api/v1/<path> and return its ``data``; PrometheusError on an error answer."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=30) as response:
                body = json.load(response)
        except urllib.error.HTTPError as error:
            body = json.loads(error.read() or b"{}")
            detail = f"{body.get('errorType')}: {body.get('error')}"
            raise PrometheusError(f"{path} {dict(params or {})}: {detail}") from error
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {dict(params or {})}: {body}")
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[Sample]:
        """Instant query. A scalar result comes back as one Sample with no labels."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", params)
        if data["resultType"] == "vector":
            return [Sample(dict(item["metric"]), float(item["value"][1])) for item in data["result"]]
        if data["resultType"] == "scalar":
            return [Sample({}, float(data["result"][1]))]
        raise PrometheusError(f"unexpected result type {data['resultType']} for {expr}")

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> list[RangeSeries]:
        """Range query between two Unix times with ``step`` seconds."""
        data = self.api("query_range", {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                        "step": f"{step}"})
        return [RangeSeries(dict(item["metric"]), [(float(t), float(v)) for t, v in item["values"]])
                for item in data["result"]]

    def rules(self) -> list[dict[str, Any]]:
        """The loaded rule groups (/api/v1/rules), with each rule's health and lastError."""
        return list(self.api("rules")["groups"])

    def alerts(self) -> list[dict[str, Any]]:
        """Pending and firing alerts (/api/v1/alerts)."""
        return list(self.api("alerts")["alerts"])

    def targets_health(self) -> list[dict[str, Any]]:
        """Active scrape targets with health and lastError (/api/v1/targets)."""
        return list(self.api("targets")["activeTargets"])

    def wait_for(self, expr: str, predicate: Callable[[list[Sample]], bool], deadline_s: float = 30.0,
                 interval_s: float = 0.25) -> list[Sample]:
        """Poll ``expr`` until ``predicate(result)`` holds; TimeoutError shows the last result."""
        return wait_for(lambda: self.query(expr), deadline_s, f"{expr!r} to satisfy the predicate",
                        interval_s, accept=predicate)

    def wait_for_targets_up(self, deadline_s: float = 30.0) -> None:
        """Wait until every target of the job has been scraped successfully."""
        self.wait_for(f'up{{job="{self.job}"}} == 1', lambda samples: len(samples) == len(self.targets),
                      deadline_s)

    def wait_for_rules_evaluated(self, deadline_s: float = 30.0) -> list[dict[str, Any]]:
        """Wait until every loaded rule has been evaluated once; returns the rule groups."""

        def check() -> list[dict[str, Any]] | None:
            groups = self.rules()
            evaluated = all(not rule.get("lastEvaluation", "0001").startswith("0001")
                            for group in groups for rule in group["rules"])
            return groups if groups and evaluated else None

        return wait_for(check, deadline_s, "all rules to be evaluated", 0.25, accept=is_answer)


def dashboard_panel_queries(
    variables: Mapping[str, str],
    directory: Path = DASHBOARD_DIR,
    include_dcgm_exporter: bool = True,
) -> list[ResolvedQuery]:
    """Every query of our dashboards (and of dcgm-exporter's), variables substituted.

    ``variables`` gives a value for each template variable: at least ``Hostname``, ``gpu``,
    ``modelName``, ``team``, ``namespace`` and, for dcgm-exporter's dashboard, ``instance``.
    Grafana's built-ins ($__rate_interval, $__interval, $__range, ...) default to values that
    suit a 1 s scrape interval and can be overridden in the same mapping. For multi-value
    variables pass the regex Grafana would send, e.g. ``"(0|1)"``.
    """
    # cluster: "" is what Grafana sends when no series carries the label (its "None" option): a
    # single-cluster Prometheus, where cluster="" matches every series.
    defaults = {"datasource": "prometheus", "cluster": "", "__rate_interval": "15s", "__interval": "5s",
                "__interval_ms": "5000", "__range": "5m", "__range_s": "300", "__range_ms": "300000"}
    values = {**defaults, **variables}
    queries: list[DashboardQuery] = all_queries(directory)
    if include_dcgm_exporter:
        queries += dcgm_exporter_queries()
    return [ResolvedQuery(q.dashboard, q.source, q.resolved(values), q.instant) for q in queries]
