"""The remediator's own ``/metrics``: what it did, what it held back, and whether its breaker is open.

A private prometheus-client registry (nothing from the exporter's GPU payload), so the names
below are the whole contract; the chart's PrometheusRule alerts on the breaker and on failures.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

ACTIONS = ("event", "taint", "untaint", "cordon", "uncordon", "annotate", "condition", "evict")
RESULTS = ("applied", "dry_run", "unchanged", "suppressed", "deferred", "dropped", "failed")


class RemediationMetrics:
    def __init__(self, mode: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.actions = Counter(
            "gpu_pod_exporter_remediation_actions", "Remediation actions by kind and outcome: applied, "
            "dry_run (mode dry-run or events: only reported), unchanged (already in place), suppressed "
            "(circuit breaker), deferred (cooldown), dropped (its alert resolved while the change was held), "
            "failed (the API server refused or was unreachable).",
            ["action", "result"], registry=self.registry)
        self.breaker_open = Gauge(
            "gpu_pod_exporter_remediation_breaker_open", "1 while the circuit breaker holds back node changes "
            "(latched open by max_nodes_per_hour until a person closes it, or max_tainted_percent reached), "
            "else 0.", registry=self.registry)
        self.held = Gauge(
            "gpu_pod_exporter_remediation_held_nodes", "Nodes with a change held back, by the limit holding it.",
            ["limit"], registry=self.registry)
        self.webhooks = Counter(
            "gpu_pod_exporter_remediation_webhooks", "Webhook requests by result: accepted, invalid (not an "
            "Alertmanager v4 payload), unauthorized, rate_limited, too_large.", ["result"], registry=self.registry)
        self.alerts = Counter(
            "gpu_pod_exporter_remediation_alerts", "Alerts received, by status and handling: new, repeat (an "
            "occurrence seen before: nothing to do), ignored (not allowlisted), unusable (no node or UUID label).",
            ["status", "handling"], registry=self.registry)
        self.marked_nodes = Gauge(
            "gpu_pod_exporter_remediation_marked_nodes", "Nodes with unhealthy GPUs marked by the remediator, as last "
            "seen (taint, condition or annotation; in dry-run the nodes it would have marked).",
            registry=self.registry)
        self.mode = Gauge("gpu_pod_exporter_remediation_mode", "1 for the mode the remediator runs in.",
                          ["mode"], registry=self.registry)
        self.mode.labels(mode).set(1)
        for action in ACTIONS:
            for result in RESULTS:
                self.actions.labels(action, result)
        for limit in ("cooldown", "max_nodes_per_hour", "max_tainted_percent"):
            self.held.labels(limit)

    def count(self, action: str, result: str, amount: int = 1) -> None:
        self.actions.labels(action, result).inc(amount)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
