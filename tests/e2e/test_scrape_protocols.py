"""Each Prometheus generation's default scrape protocols keep the exporter's names and counter types,
in OpenMetrics too.

Why this module: a default install's counters CSV holds dcgm-exporter's counters, which have no
``_total``, so negotiation answers every Prometheus in text format 0.0.4 (``test_default_install.py``
proves names and types there, on 2.42 and 3.x). A counters CSV without such counters lets the
exporter answer in OpenMetrics, which both generations ask for first (Prometheus 3 adding
``escaping=allow-utf-8``). OpenMetrics names a counter's family without ``_total`` and its samples
with it; this module scrapes such an exporter with each engine and shows what is stored: the sample
names with ``_total``, as in text format, and the counter type.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.exporter_process import ExporterProcess, running_exporter
from tests.support.prometheus import ENGINES, PrometheusHarness, engine_version, prometheus_engine, serve_metrics

pytestmark = pytest.mark.e2e

GAUGES_ONLY = """\
# Gauges only: no counter without _total, so OpenMetrics loses nothing and is negotiated.
DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).
DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).
"""
COUNTER = "gpu_pod_exporter_sampling_cycles"  # a self-metric counter: sampled every collect interval


@dataclass
class Scraped:
    engine: str
    version: str
    prometheus: PrometheusHarness
    accept: str  # the Accept header this engine sends by default


@pytest.fixture(scope="module")
def exporter(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ExporterProcess]:
    counters = Path(tmp_path_factory.mktemp("scrape-protocols")) / "gauges.csv"
    counters.write_text(GAUGES_ONLY, encoding="utf-8")
    with running_exporter(["--simulate", "-f", str(counters)]) as process:
        process.wait_healthy(deadline_s=60)
        yield process


@pytest.fixture(scope="module", params=ENGINES, ids=[f"prometheus-{engine}" for engine in ENGINES])
def scraped(exporter: ExporterProcess, request: pytest.FixtureRequest) -> Iterator[Scraped]:
    binary = prometheus_engine(str(request.param))
    requests: list[dict[str, str]] = []
    # A stand-in target records the headers this engine sends, exactly as configured by default.
    with serve_metrics(lambda: b"# TYPE stand_in gauge\nstand_in 1\n", requests) as recorder, PrometheusHarness(
            [f"127.0.0.1:{exporter.port}"], extra_jobs={"recorder": [recorder]}, prometheus_binary=binary) as prom:
        prom.wait_for_targets_up(deadline_s=60)
        prom.wait_for(f"{COUNTER}_total", bool, deadline_s=30)
        prom.wait_for(f"rate({COUNTER}_total[5s]) > 0", bool, deadline_s=30)
        assert requests
        yield Scraped(str(request.param), engine_version(binary), prom, requests[-1]["Accept"])


def test_the_engine_asks_for_openmetrics_first_and_gets_it(exporter: ExporterProcess, scraped: Scraped) -> None:
    assert scraped.accept.startswith("application/openmetrics-text;version=1.0.0"), scraped.accept
    assert ("escaping=allow-utf-8" in scraped.accept) == (scraped.engine == "3"), scraped.accept
    response = exporter.get("/metrics", {"Accept": scraped.accept})
    assert response.headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert f"# TYPE {COUNTER} counter\n" in response.text
    assert f"\n{COUNTER}_total " in response.text and response.text.endswith("# EOF\n")


def test_counter_samples_keep_their_total_name(scraped: Scraped) -> None:
    names = set(scraped.prometheus.api("label/__name__/values"))
    assert f"{COUNTER}_total" in names and COUNTER not in names
    # Every self-metric counter is stored under its _total name, none under the bare family name.
    families = {name.removesuffix("_total") for name in names if name.startswith("gpu_pod_exporter_")
                and name.endswith("_total")}
    assert len(families) >= 3 and not families & names


def test_counters_stay_counters_in_the_metadata(scraped: Scraped) -> None:
    """/api/v1/metadata (Grafana's metric browser, rate() hints) types the family as a counter. The
    OpenMetrics family is named without _total, and that is the name the metadata carries."""
    metadata = scraped.prometheus.api("metadata", {"metric": COUNTER})
    assert {entry["type"] for entry in metadata.get(COUNTER, [])} == {"counter"}, (scraped.version, metadata)
    gauges = scraped.prometheus.api("metadata", {"metric": "DCGM_FI_DEV_GPU_TEMP"})
    assert {entry["type"] for entry in gauges["DCGM_FI_DEV_GPU_TEMP"]} == {"gauge"}
