"""The backfilled Prometheus that the exact report tests (and the docs sample) read, built once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from exporter.report.chargeback import RECORDED_SERIES
from exporter.report.sources import SOURCES
from tests.report import synthetic
from tests.report.tsdb import BackfilledPrometheus


@dataclass(frozen=True)
class Backfilled:
    url: str
    offset_s: float


def build(prometheus: BackfilledPrometheus) -> Backfilled:
    """EAST with the report's recording rules backfilled, then WEST as raw series only; started."""
    interval = synthetic.SAMPLE_S
    offset = prometheus.rule_offset(interval)
    prometheus.add_openmetrics("east", synthetic.openmetrics([synthetic.east()], offset))
    start = synthetic.WINDOW_START + synthetic.DATA_FROM_H * 3600
    end = synthetic.WINDOW_START + synthetic.WINDOW_HOURS * 3600
    prometheus.backfill_rules([*(source.series for source in SOURCES), *RECORDED_SERIES], start, end, interval)
    prometheus.add_openmetrics("west", synthetic.openmetrics([synthetic.west()], offset))
    prometheus.start()
    return Backfilled(prometheus.url, offset)


@pytest.fixture(scope="session")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("backfilled-tsdb"))
    try:
        yield build(prometheus)
    finally:
        prometheus.stop()
