"""The metric names rules and dashboards may read: the exporter's own registries plus a short allowlist.

Why: a hand-kept list of "known metrics" drifts from what the exporter really serves, and a name
that only the list knows turns a panel or an alert into a silent empty result. So the list is
taken from the exporter itself: the DCGM field catalog (every field it can serve, under its legacy
name and its DCGM 4.7 aliases; rows a CSV can select) and the registry of exporter-owned metrics
(``DCGM_EXP_*`` payload and ``gpu_pod_exporter_*`` self-metrics). The only other names allowed are
the few that other programs produce and that rules and dashboards legitimately read, in
``EXTERNAL_METRICS`` below. The e2e test (tests/e2e/test_default_install.py) checks the
same names against what a real Prometheus stored from live scrapes.
"""

from __future__ import annotations

from exporter.metrics.catalog import CATALOG
from exporter.metrics.owned import OWNED
from tests.dashboards.promql_names import MetricEntry

# Names produced by something other than gpu-pod-exporter. Keep this short: each entry is a
# dependency of a rule or dashboard on another program.
EXTERNAL_METRICS: dict[str, MetricEntry] = {
    # Prometheus itself: the scrape health of each target (GpuPodExporterDown/Absent, "Exporter
    # targets up" panel) and the series of pending/firing alerts (dashboard annotations).
    "up": MetricEntry("up", "gauge"),
    "ALERTS": MetricEntry("ALERTS", "gauge"),
    # kube-state-metrics: cordoned nodes and node labels, for the maintenance helper rule
    # hostname:gpu_node_maintenance:max (docs/alerts.md "Nodes in maintenance").
    "kube_node_spec_unschedulable": MetricEntry("kube_node_spec_unschedulable", "gauge"),
    "kube_node_labels": MetricEntry("kube_node_labels", "info"),
    # kube-state-metrics: each ResourceQuota's hard and used values, for GPU quota vs measured need
    # (group gpu-pod-exporter.gpu-quota, the teams dashboard's quota panel, GpuQuotaMostlyUnused).
    "kube_resourcequota": MetricEntry("kube_resourcequota", "gauge"),
}


def _kind(prom_type: str) -> str:
    """The catalog's and the registry's type words as MetricEntry kinds (a CSV 'label' row is no metric)."""
    return prom_type if prom_type in {"gauge", "counter"} else "untyped"


def exporter_metric_entries() -> dict[str, MetricEntry]:
    """Every metric name gpu-pod-exporter can serve, with its Prometheus type.

    Catalog fields that the exporter cannot serve (``read is None``) and string fields that become
    labels (``DCGM_FI_DRIVER_VERSION``) are not metric names a query can read.
    """
    entries: dict[str, MetricEntry] = {}
    for spec in CATALOG.fields:
        if not spec.served or spec.is_label:
            continue
        for name in (spec.name, *spec.aliases):
            entries[name] = MetricEntry(name, _kind(spec.prom_type))
    for metric in OWNED:
        entries[metric.name] = MetricEntry(metric.name, _kind(metric.type))
    return entries


def known_metric_entries() -> dict[str, MetricEntry]:
    """Names rules and dashboards may read (recording-rule outputs are added by the callers)."""
    return {**exporter_metric_entries(), **EXTERNAL_METRICS}


def counter_names() -> set[str]:
    """Names whose running totals must never be compared directly (see counters_read_as_values)."""
    return {entry.name for entry in known_metric_entries().values() if entry.kind == "counter"}
