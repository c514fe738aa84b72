"""The report's arithmetic on plain series: percentiles, gaps, missing series, prices."""

from __future__ import annotations

import pytest

from exporter.prometheus.client import Series
from exporter.report.collect import Fetched
from exporter.report.compute import build_report, nearest_rank
from exporter.report.model import Settings, Window
from exporter.report.pricing import PriceSheet, parse_prices
from exporter.report.sources import ALLOCATION_INPUTS, BUSY, SOURCES, UTILIZATION_INPUTS, Presence, missing_notes
from exporter.report.tables import usage_table
from exporter.report.text import render_csv, render_text

WINDOW = Window(start=0.0, end=3600.0, step=600.0)  # six points: 600, 1200, ..., 3600


def settings(**overrides: object) -> Settings:
    values: dict[str, object] = {"prometheus": "http://p", "by": "team", "idle_threshold_percent": 5.0,
                                 "reclaim_by": "p95", "currency": "EUR", "default_price": None}
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


def constant(labels: dict[str, str], value: float, times: list[float] | None = None) -> Series:
    return Series(labels, tuple((t, value) for t in (times if times is not None else WINDOW.times())))


def everywhere(clusters: set[str], *, without: tuple[str, ...] = ()) -> Presence:
    names = [s.series for s in SOURCES] + list(ALLOCATION_INPUTS) + list(UTILIZATION_INPUTS)
    return Presence({name: frozenset() if name in without else frozenset(clusters) for name in names})


def fetched(groups: dict[str, list[Series]], presence: Presence, capacity: list[Series] | None = None) -> Fetched:
    return Fetched(WINDOW, presence, groups, {}, capacity or [], ())


@pytest.mark.parametrize(("values", "percentile", "expected"), [
    ([], 95, 0.0),
    ([5.0], 95, 5.0),
    ([float(v) for v in range(1, 101)], 95, 95.0),
    ([float(v) for v in range(1, 21)], 95, 19.0),  # rank ceil(0.95 x 20) = 19
    ([0.0] * 19 + [7.0], 95, 0.0),
    ([3.0, 1.0, 2.0], 100, 3.0),
])
def test_nearest_rank(values: list[float], percentile: float, expected: float) -> None:
    assert nearest_rank(values, percentile) == expected


def test_hours_are_points_times_step_and_gaps_lower_coverage() -> None:
    labels = {"cluster": "", "namespace": "ns", "team": "a", "modelName": "M"}
    # the allocation is seen at 4 of 6 points: 1200 and 2400 are missing (Prometheus was down)
    times = [600.0, 1800.0, 3000.0, 3600.0]
    groups = {"fraction": [constant(labels, 2.0, times)], "busy": [constant(labels, 1.0, times)],
              "measured": [constant(labels, 2.0, times)]}
    capacity = [constant({}, 4.0, times)]
    report = build_report(fetched(groups, everywhere({""}), capacity), settings(), PriceSheet())
    [row] = report.rows
    assert row.usage.allocated_gpu_hours == pytest.approx(2.0 * 4 * 600 / 3600)
    assert row.usage.utilization_percent == pytest.approx(50.0)
    [cluster] = report.capacity
    assert cluster.coverage_percent == pytest.approx(100 * 4 / 6)
    assert cluster.gaps == ((600.0, 1200.0), (1800.0, 2400.0))
    assert cluster.capacity_gpu_hours == pytest.approx(4 * 4 * 600 / 3600)
    [note] = [n for n in report.notes if "cover" in n]
    assert "this Prometheus: recorded series cover 66.7 % of the window" in note
    assert "1970-01-01T00:10:00Z to 1970-01-01T00:20:00Z" in note and "not billed" in note


def test_a_cluster_missing_one_rule_shows_n_a_in_that_column_and_says_why() -> None:
    presence = everywhere({"east", "west"})
    clusters = dict(presence.clusters_by_series)
    clusters[BUSY.series] = frozenset({"east"})  # west lacks the busy rule
    clusters["DCGM_FI_DEV_GPU_UTIL"] = frozenset({"east"})  # and its exporters lack the utilisation field
    clusters["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] = frozenset({"east"})
    presence = Presence(clusters)
    groups = {"fraction": [constant({"cluster": c, "namespace": "ns", "team": "a", "modelName": "M"}, 1.0)
                           for c in ("east", "west")]}
    report = build_report(fetched(groups, presence), settings(), PriceSheet())
    busy = {row.cluster: row.usage.busy_gpu_hours for row in report.rows}
    assert busy == {"east": 0.0, "west": None}
    [note] = report.notes
    assert note.startswith("cluster west: no namespace_team_model:gpu_busy_fraction:sum in this window")
    assert "group gpu-pod-exporter.cost-report" in note
    assert "DCGM_FI_DEV_GPU_UTIL, DCGM_FI_PROF_GR_ENGINE_ACTIVE) are missing there too" in note
    assert "busy GPU-hours and utilisation not available there" in note
    text = render_text(report)
    west = next(line for line in text.splitlines() if line.startswith("west"))
    assert "n/a" in west
    assert render_csv(report).splitlines()[2].split(",")[4] == ""  # west's busy is empty in CSV


def test_no_rules_at_all_in_a_cluster_is_one_note() -> None:
    presence = Presence({"DCGM_EXP_GPU_ALLOCATION_INFO": frozenset({"west"}),
                         "DCGM_EXP_GPU_ALLOCATED": frozenset({"west"})})
    [note] = missing_notes(presence)
    assert note.startswith("cluster west: none of the report's recorded series are there")
    assert "although DCGM_EXP_GPU_ALLOCATION_INFO and DCGM_EXP_GPU_ALLOCATED are" in note


def test_allocation_rules_without_allocation_inputs_names_the_exporter_flag() -> None:
    presence = everywhere({"east"}, without=("gpu_container:gpu_fraction:ratio", *ALLOCATION_INPUTS))
    presence = Presence({**presence.clusters_by_series, "namespace_team_model:gpu_fraction:sum": frozenset({"east"})})
    notes = missing_notes(presence)
    assert any("gpu_container:gpu_fraction:ratio" in n and "run the exporter with -k / --kubernetes" in n
               for n in notes)


def test_per_model_prices_and_an_unpriced_model() -> None:
    prices = parse_prices(["NVIDIA H100 80GB HBM3=3", "NVIDIA A100-SXM4-80GB=1.5"])
    groups = {"fraction": [
        constant({"namespace": "ns", "team": "a", "modelName": "NVIDIA H100 80GB HBM3"}, 1.0),
        constant({"namespace": "ns", "team": "b", "modelName": "NVIDIA A100-SXM4-80GB"}, 0.5),
        constant({"namespace": "ns", "team": "c", "modelName": "NVIDIA L4"}, 1.0),
    ]}
    report = build_report(fetched(groups, everywhere({""})),
                          settings(default_price=None, model_prices=tuple(sorted(prices.per_model.items()))), prices)
    cost = {row.key: row.usage.cost for row in report.rows}
    assert cost == {"a": pytest.approx(3.0), "b": pytest.approx(0.75), "c": None}
    assert any(n.startswith("no price for NVIDIA L4") for n in report.notes)
    assert report.total.cost == pytest.approx(3.75)
    headings = [c.heading for c in usage_table(report).columns]
    assert headings[-2:] == ["cost (EUR)", "idle cost (EUR)"]


def test_without_a_price_there_are_no_cost_columns() -> None:
    groups = {"fraction": [constant({"namespace": "ns", "team": "a", "modelName": "M"}, 1.0)]}
    report = build_report(fetched(groups, everywhere({""})), settings(), PriceSheet())
    assert "cost" not in " ".join(c.title for c in usage_table(report).columns)
    assert not report.multi_cluster


@pytest.mark.parametrize(("values", "message"), [
    (["abc"], "not a number"),
    (["-1"], "non-negative"),
    (["=3"], "give the model"),
    (["1", "2"], "already given"),
    (["nan"], "non-negative"),
])
def test_bad_prices_are_named(values: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_prices(values)
