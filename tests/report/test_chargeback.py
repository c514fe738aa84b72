"""The chargeback's arithmetic on plain series (no Prometheus): cost groups, prices, sharing, the previous period."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from exporter.prometheus.client import Series
from exporter.report.chargeback import ChargebackData, GroupBy, build_chargeback, queries
from exporter.report.model import Window
from exporter.report.pricing import NodePool, PriceSheet
from exporter.report.tables import chargeback_table

WINDOW = Window(0.0, 4 * 3600.0, 3600.0)  # four one-hour points
PREVIOUS = Window(-4 * 3600.0, 0.0, 3600.0)
H100 = "H100"


def holder(window: Window, values: list[float], **labels: str) -> Series:
    return Series({"cluster": "c1", "modelName": H100, "Hostname": "n1"} | labels,
                  tuple((window.start + (i + 1) * window.step, v) for i, v in enumerate(values)))


def data(window: Window, holders: list[Series], gpus: float = 2.0, **extra: list[Series]) -> ChargebackData:
    capacity = [Series({"cluster": "c1", "modelName": H100, "Hostname": "n1"},
                       tuple((window.start + (i + 1) * window.step, gpus) for i in range(window.points)))]
    return ChargebackData(window, {"fraction": holders, "share": holders}, capacity,
                          extra.get("node_labels", []), extra.get("namespace_meta", []), extra.get("pod_meta", []))


# team a holds one GPU all four hours, team b one GPU for the first hour: 8 GPU-hours of capacity, 3 free
A = dict(namespace="ns-a", team="a", cost_center="cc-1")
B = dict(namespace="ns-b", team="b")
HOLDERS = [holder(WINDOW, [1, 1, 1, 1], **A), holder(WINDOW, [1, 0, 0, 0], **B)]


def totals(chargeback: object, field: str = "cost") -> dict[str, float | None]:
    return {t.group: getattr(t, field) for t in chargeback.totals}  # type: ignore[attr-defined]


@pytest.mark.parametrize(("mode", "expected"), [
    ("none", {"a": 8.0, "b": 2.0, "(unallocated)": 6.0}),
    ("even", {"a": 8.0 + 3.0, "b": 2.0 + 3.0}),
    ("proportional", {"a": 8.0 + 6.0 * 8 / 10, "b": 2.0 + 6.0 * 2 / 10}),
])
def test_unallocated_capacity_is_priced_and_shared_as_asked(mode: str, expected: dict[str, float]) -> None:
    result = build_chargeback(data(WINDOW, HOLDERS), None, GroupBy("team"), prices=PriceSheet(default=2.0),
                              share_idle=mode, currency="EUR")
    assert totals(result) == pytest.approx(expected)
    assert sum(line.cost or 0 for line in result.lines) == pytest.approx(16.0)  # 8 GPU-hours at 2.0, all billed


def test_a_pool_price_from_the_node_label_beats_the_model_price() -> None:
    prices = PriceSheet(per_model={H100: 3.0}, pool_label="pool", pools=(NodePool("cheap", default=1.0),))
    nodes = [Series({"cluster": "c1", "node": "n1", "label_pool": "cheap"}, ((WINDOW.end, 1.0),))]
    result = build_chargeback(data(WINDOW, HOLDERS, node_labels=nodes), None, GroupBy("team"), prices=prices,
                              share_idle="none", currency="USD")
    assert totals(result) == pytest.approx({"a": 4.0, "b": 1.0, "(unallocated)": 3.0})
    assert {line.node_pool for line in result.lines} == {"cheap"}


def test_groups_from_the_pod_label_then_the_namespace_label_then_unlabelled() -> None:
    namespaces = [Series({"cluster": "c1", "namespace": "ns-b", "label_cost_center": "cc-2"}, ((WINDOW.end, 1.0),))]
    holders = [*HOLDERS, holder(WINDOW, [0, 0, 0, 1], namespace="ns-c", team="c")]
    result = build_chargeback(data(WINDOW, holders, gpus=3.0, namespace_meta=namespaces), None,
                              GroupBy.parse("label:cost-center"), prices=PriceSheet(default=1.0), share_idle="none",
                              currency="USD")
    assert totals(result, "gpu_hours") == pytest.approx({"cc-1": 4.0, "cc-2": 1.0, "unlabelled": 1.0,
                                                         "(unallocated)": 6.0})
    fallback = build_chargeback(data(WINDOW, holders, gpus=3.0, namespace_meta=namespaces), None,
                                GroupBy.parse("label:cost-center", "namespace"), prices=PriceSheet(default=1.0),
                                share_idle="none", currency="USD")
    assert "ns-c" in totals(fallback)


def test_the_previous_period_sits_beside_each_group() -> None:
    before = [holder(PREVIOUS, [1, 1, 0, 0], **A)]
    result = build_chargeback(data(WINDOW, HOLDERS), data(PREVIOUS, before), GroupBy("team"),
                              prices=PriceSheet(default=1.0), share_idle="none", currency="USD")
    by_group = {t.group: t for t in result.totals}
    assert by_group["a"].previous_cost == pytest.approx(2.0)
    assert by_group["a"].change_percent == pytest.approx(100.0)  # 4 now against 2 before
    assert by_group["b"].previous_cost is None  # b held nothing before
    assert by_group["(unallocated)"].previous_cost == pytest.approx(8.0 - 2.0)


def test_a_previous_period_with_seconds_of_data_shows_its_coverage_and_no_change() -> None:
    """The "+2,900 %" of a previous period Prometheus saw for one minute: its coverage is shown, the change is not."""
    month = 30 * 86400.0
    window, previous = Window(0.0, month, 3600.0), Window(-month, 0.0, 3600.0)
    now = [holder(window, [1.0] * window.points, **A)]
    before = [holder(previous, [1.0] + [0.0] * (previous.points - 1), **A)]
    glimpse = data(previous, [Series(before[0].labels, before[0].points[:1])])
    glimpse = ChargebackData(previous, glimpse.holders, [Series(s.labels, s.points[:1]) for s in glimpse.capacity],
                             [], [], [])
    result = build_chargeback(data(window, now), glimpse, GroupBy("team"), prices=PriceSheet(default=1.0),
                              share_idle="none", currency="USD")
    [a] = [t for t in result.totals if t.group == "a"]
    assert (a.cost, a.previous_cost) == pytest.approx((720.0, 1.0))
    assert (a.coverage_percent, a.previous_coverage_percent) == pytest.approx((100.0, 100 / 720))
    assert a.change_percent is None  # not +71,900 %
    assert any("data of cluster c1 for 0.139 % of the previous period" in note and "no change is shown" in note
               for note in result.notes), result.notes
    table = chargeback_table(SimpleNamespace(chargeback=result, settings=None))  # type: ignore[arg-type]
    headings = [column.heading for column in table.columns]
    row = dict(zip(headings, next(r for r in table.rows if r[1] == "a"), strict=True))
    assert (row["previous data (%)"], row["change (%)"]) == pytest.approx((100 / 720, None))
    assert table.total is not None and table.total[-1] is None


def test_a_previous_period_covered_as_well_shows_the_change() -> None:
    before = [holder(PREVIOUS, [1, 1, 0, 0], **A)]
    result = build_chargeback(data(WINDOW, HOLDERS), data(PREVIOUS, before), GroupBy("team"),
                              prices=PriceSheet(default=1.0), share_idle="none", currency="USD")
    [a] = [t for t in result.totals if t.group == "a"]
    assert (a.previous_coverage_percent, a.comparable, a.change_percent) == pytest.approx((100.0, True, 100.0))
    assert not any("previous period" in note for note in result.notes)


def test_the_queries_keep_the_label_the_groups_need() -> None:
    exprs = queries(GroupBy.parse("label:cost-center"), 'cluster="c1"', 5.0, 86400.0, "cloud.google.com/gke-nodepool")
    assert "cost_center" in exprs["fraction"] and "Hostname" in exprs["fraction"]
    assert exprs["namespace_meta"] == ('max by (cluster, namespace, label_cost_center) '
                                       '(last_over_time(kube_namespace_labels{cluster="c1"}[86400s]))')
    assert "label_cloud_google_com_gke_nodepool" in exprs["node_labels"]
    assert "pod_meta" not in exprs


@pytest.mark.parametrize("text", ["cost-center", "label:", "tag:x", "annotation: "])
def test_a_bad_group_by_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="--group-by"):
        GroupBy.parse(text)
