"""The names rules and dashboards may read come from the exporter's registries, not from a hand-kept list."""

import copy

from exporter.metrics.catalog import CATALOG
from exporter.metrics.owned import OWNED
from tests.dashboards.dashboard_queries import dashboard_queries, load_dashboards
from tests.dashboards.exporter_metrics import (
    EXTERNAL_METRICS,
    counter_names,
    exporter_metric_entries,
    known_metric_entries,
)
from tests.dashboards.promql_names import load_label_names, recorded_names, unknown_names
from tests.dashboards.test_dashboards import RULE_FILES


def test_every_served_catalog_field_and_alias_and_every_owned_metric_is_known() -> None:
    entries = exporter_metric_entries()
    served = {name for spec in CATALOG.fields if spec.served and not spec.is_label
              for name in (spec.name, *spec.aliases)}
    assert served <= set(entries)
    assert {metric.name for metric in OWNED} <= set(entries)
    assert entries["DCGM_FI_DEV_GPU_TEMP_CELSIUS"].kind == "gauge"  # a DCGM 4.7 alias
    assert entries["DCGM_EXP_XID_ERRORS_TOTAL"].kind == "counter"
    assert entries["gpu_pod_exporter_nvml_calls_total"].kind == "counter"


def test_fields_the_exporter_cannot_serve_and_label_fields_are_not_metric_names() -> None:
    entries = exporter_metric_entries()
    unserved = [spec.name for spec in CATALOG.fields if not spec.served]
    assert unserved, "the catalog keeps known DCGM fields it cannot serve"
    assert not set(unserved) & set(entries)
    assert "DCGM_FI_DRIVER_VERSION" not in entries  # a CSV 'label' row becomes a label, not a series


def test_the_external_allowlist_is_prometheus_and_kube_state_metrics_only() -> None:
    assert set(EXTERNAL_METRICS) == {"up", "ALERTS", "kube_node_spec_unschedulable", "kube_node_labels",
                                     "kube_resourcequota"}
    assert not set(EXTERNAL_METRICS) & set(exporter_metric_entries())


def test_counters_come_from_the_registries() -> None:
    counters = counter_names()
    assert {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_EXP_XID_ERRORS_TOTAL",
            "DCGM_EXP_CLOCK_EVENTS_TOTAL"} <= counters
    assert "DCGM_FI_DEV_GPU_TEMP" not in counters


def test_a_dashboard_reading_a_name_the_exporter_does_not_produce_fails() -> None:
    """The old hand-kept list allowed names by hand; now only the exporter's registries decide."""
    dashboard = copy.deepcopy(next(iter(load_dashboards().values())))
    panel = next(p for p in dashboard["panels"] if p.get("targets"))
    panel["targets"][0]["expr"] = 'DCGM_FI_DEV_GPU_UTILIZATION{Hostname="$Hostname"}'  # not a DCGM name
    values = {"cluster": "", "Hostname": "a", "gpu": "0", "modelName": "m", "team": "t", "namespace": "n"}
    exprs = [(q.source, q.resolved(values)) for q in dashboard_queries(dashboard)]
    problems = unknown_names(exprs, set(known_metric_entries()) | recorded_names(RULE_FILES), load_label_names())
    assert problems == [f"panel {panel['title']!r} query {panel['targets'][0]['refId']}: "
                        "unknown metric DCGM_FI_DEV_GPU_UTILIZATION"]
