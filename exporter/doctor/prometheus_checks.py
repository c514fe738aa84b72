"""``--prometheus URL``: does the Prometheus that should watch this node actually do so?

Four questions, each through Prometheus' HTTP API:

* **target**: the scrape target(s) that deliver this node's series (found by the ``Hostname`` label
  the exporter puts on every GPU series, or by the exporter's port among the targets) are up;
* **labels**: none of this node's series carries ``exported_pod``/``exported_namespace``, which is
  what a scrape without ``honorLabels: true`` does to the exporter's workload labels (every
  dashboard and rule that groups by ``pod`` then sees the exporter's pod instead);
* **rules**: the shipped rule groups (``deploy/rules``, the chart's PrometheusRule) are loaded;
* **counters**: every ``DCGM_*``/``gpu_pod_exporter_*`` series those loaded rules read exists for
  this node; an absent one means an alert that can never fire here (unless its absence is by
  design: a reading no GPU of the node supports, an event counter before the first event).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from exporter.app import node_hostname
from exporter.config import Config
from exporter.doctor.report import Row, degraded, failed, ok, skipped
from exporter.kube.series import PROCESS_ATTRIBUTION_FAMILIES
from exporter.metrics.counters import CounterRow, CounterSet
from exporter.prometheus.client import Connection, PrometheusClient, PrometheusError, redacted_url
from exporter.prometheus.promql import any_of, quote
from exporter.web.server import parse_address

SECTION = "prometheus"
# The rule groups shipped in deploy/rules (the chart's PrometheusRule renders the same); a test keeps this in sync.
SHIPPED_RULE_GROUPS: tuple[str, ...] = (
    "gpu-pod-exporter.alert-helpers",
    "gpu-pod-exporter.exporter",
    "gpu-pod-exporter.gpu-health",
    "gpu-pod-exporter.gpu-usage",
    "gpu-pod-exporter.cost-allocation",
    "gpu-pod-exporter.cost-usage",
    "gpu-pod-exporter.cost-report",
    "gpu-pod-exporter.gpu-quota",
)
# Series names the exporter produces: unambiguous tokens in a PromQL expression.
EXPORTER_NAME = re.compile(r"\b(DCGM_[A-Z0-9_]+|gpu_pod_exporter_[a-z0-9_]+)\b")

UNREACHABLE_HINT = "give Prometheus' base URL, e.g. http://prometheus-operated.monitoring:9090 (or a port-forward)"
NO_TARGET_HINT = ("Prometheus scrapes no exporter on this node: check the ServiceMonitor is selected "
                  "(serviceMonitorSelector labels, e.g. serviceMonitor.additionalLabels.release), the Service "
                  "exists, and no NetworkPolicy blocks Prometheus from the exporter's port")
DOWN_HINT = "Prometheus cannot scrape the exporter: fix the error shown (TLS, basic auth, NetworkPolicy, port)"
HONOR_HINT = ("the scrape renames the exporter's pod/namespace labels: set honorLabels: true on the ServiceMonitor "
              "endpoint (the chart's serviceMonitor.honorLabels) or honor_labels: true in the scrape config")
PROCESS_ATTRIBUTION_OFF = "--kubernetes-process-attribution, the chart's processAttribution.enabled"
RULES_HINT = ("load the shipped rules: the chart's PrometheusRule (selected by the ruleSelector) or "
              "deploy/rules/*.yaml in rule_files")


def _api(url: str, timeout_s: float) -> PrometheusClient:
    """The shared client, asked once per question: the doctor's timeout bounds each request, no retries."""
    return PrometheusClient(Connection(url=url, timeout_s=timeout_s, retries=0, user_agent="gpu-pod-exporter-doctor",
                                       auth_hint="give the credentials in the URL: https://USER:PASSWORD@HOST"))


@dataclass(frozen=True)
class _Target:
    job: str
    instance: str
    scrape_url: str
    health: str
    last_error: str

    def selector(self) -> str:
        return f"job={quote(self.job)}, instance={quote(self.instance)}"


def _over_targets(targets: Iterable[_Target], template: str) -> str:
    """One query per target (``{sel}`` in ``template``), joined with ``or``."""
    return " or ".join(template.replace("{sel}", target.selector()) for target in targets)


def check_prometheus(url: str, config: Config, counters: CounterSet | None, gpu_rows: Iterable[Row],
                     timeout_s: float) -> list[Row]:
    shown = redacted_url(url)
    try:
        api = _api(url, timeout_s)
    except ValueError:
        return [failed(SECTION, "reachable", f"{shown!r} is not an http(s) URL", UNREACHABLE_HINT)]
    try:
        info = api.get("status/buildinfo")
    except PrometheusError as exc:
        return [failed(SECTION, "reachable", f"cannot query {shown}: {exc}", UNREACHABLE_HINT)]
    version = info.get("version", "?") if isinstance(info, dict) else "?"
    rows = [ok(SECTION, "reachable", f"{shown}: Prometheus {version}", version=version)]
    try:
        targets = _our_targets(api, parse_address(config.address)[1], node_hostname(config))
        rows.append(_target_row(targets, node_hostname(config)))
        up = [target for target in targets if target.health == "up"]
        groups = api.get("rules").get("groups") or []
        if up:
            rows.append(_labels_row(api, up))
        else:
            rows.append(skipped(SECTION, "labels", "not checked: no scrape target of this node is up"))
        rows.append(_rules_row(groups))
        if up:
            rows.append(_counters_row(api, groups, up, counters, counter_states(gpu_rows),
                                      process_attribution=config.process_attribution or config.process_metrics))
        else:
            rows.append(skipped(SECTION, "counters", "not checked: no scrape target of this node is up"))
    except PrometheusError as exc:
        rows.append(failed(SECTION, "query", f"Prometheus refused a query: {exc}", UNREACHABLE_HINT))
    return rows


def _our_targets(api: PrometheusClient, port: int, hostname: str | None) -> list[_Target]:
    """The targets delivering this node's series: by the Hostname label of GPU series, else by our ``port``."""
    active = [_Target(str(item.get("labels", {}).get("job", "")), str(item.get("labels", {}).get("instance", "")),
                      str(item.get("scrapeUrl", "")), str(item.get("health", "")), str(item.get("lastError", "")))
              for item in api.get("targets", state="active").get("activeTargets") or []]
    pairs: set[tuple[str, str]] = set()
    if hostname:
        node = quote(hostname)  # either spelling: dcgm-exporter 4.8.3 and --dcgm-exporter-compat=4.8.3 write hostname
        expr = (f'count by (job, instance) ({{__name__=~"DCGM_.+", Hostname={node}}} '
                f'or {{__name__=~"DCGM_.+", hostname={node}}})')
        pairs = {(item["metric"].get("job", ""), item["metric"].get("instance", "")) for item in api.query(expr)}
    ours = [target for target in active if (target.job, target.instance) in pairs]
    if not ours:  # nothing scraped from this node: a target on the exporter's port that is down is the suspect
        ours = [target for target in active
                if urllib.parse.urlsplit(target.scrape_url).port == port and target.health != "up"]
    return ours


def _target_row(targets: list[_Target], hostname: str | None) -> Row:
    if not targets:
        where = f"node {hostname}" if hostname else "this exporter's port"
        return failed(SECTION, "target", f"no scrape target delivers series of {where}", NO_TARGET_HINT)
    names = ", ".join(f"{target.instance} (job {target.job})" for target in targets)
    urls = [target.scrape_url for target in targets]
    down = [target for target in targets if target.health != "up"]
    if down:
        errors = "; ".join(target.last_error or target.health for target in down)
        return failed(SECTION, "target", f"target {names} is down: {errors}", DOWN_HINT, targets=urls)
    return ok(SECTION, "target", f"target {names} is up", targets=urls)


def _labels_row(api: PrometheusClient, targets: list[_Target]) -> Row:
    found = api.query(_over_targets(targets, 'count by (job) ({exported_pod!="", {sel}}) or '
                                             'count by (job) ({exported_namespace!="", {sel}})'))
    if found:
        count = sum(int(float(item["value"][1])) for item in found)
        jobs = ", ".join(sorted({item["metric"].get("job", "?") for item in found}))
        return failed(SECTION, "labels", f"{count} series of this node carry exported_pod/exported_namespace "
                      f"(job {jobs})", HONOR_HINT, series=count)
    return ok(SECTION, "labels", "no series of this node carries exported_pod: workload labels arrive intact")


def _rules_row(groups: list[dict[str, Any]]) -> Row:
    loaded = {str(group.get("name")) for group in groups}
    missing = [name for name in SHIPPED_RULE_GROUPS if name not in loaded]
    if not missing:
        return ok(SECTION, "rules", f"all {len(SHIPPED_RULE_GROUPS)} shipped rule groups are loaded")
    present = len(SHIPPED_RULE_GROUPS) - len(missing)
    text = f"{present} of {len(SHIPPED_RULE_GROUPS)} shipped rule groups loaded; missing: {', '.join(missing)}"
    if present:
        return degraded(SECTION, "rules", text, RULES_HINT, missing=missing)
    return failed(SECTION, "rules", text, RULES_HINT, missing=missing)


def needed_series(groups: Iterable[dict[str, Any]]) -> list[str]:
    """Exporter series the shipped rules read (recorded names excluded: Prometheus makes those)."""
    names: set[str] = set()
    recorded: set[str] = set()
    for group in groups:
        if str(group.get("name")) not in SHIPPED_RULE_GROUPS:
            continue
        for rule in group.get("rules") or ():
            names.update(EXPORTER_NAME.findall(str(rule.get("query", ""))))
            if rule.get("type") == "recording":
                recorded.add(str(rule.get("name")))
    return sorted(names - recorded)


def counter_states(rows: Iterable[Row]) -> dict[str, set[str]]:
    """Per counter row name, the states the GPU rows found (served, unsupported, failing, ...) on this node."""
    states: dict[str, set[str]] = {}
    for row in rows:
        if row.data.get("kind") == "counter":
            states.setdefault(str(row.data.get("counter")), set()).add(str(row.data.get("state")))
    return states


_NOT_IN_CSV = "not in the counters CSV"
_UNSUPPORTED = "not supported by this node's GPUs"
_NO_EVENT_YET = "no event yet (the series appears with the first one)"
_ATTRIBUTION_OFF = f"process attribution is off ({PROCESS_ATTRIBUTION_OFF})"
_NOT_STORED = "served here but not stored by Prometheus"
_SELF_METRIC_ABSENT = "exporter self-metrics absent"
_ABSENT_AS_EXPECTED = frozenset({_UNSUPPORTED, _NO_EVENT_YET, _ATTRIBUTION_OFF})


def _why_absent(name: str, row: CounterRow | None, states: dict[str, set[str]], *, process_attribution: bool) -> str:
    """Why a series a shipped rule reads is not in Prometheus (one of the groups above)."""
    if name in PROCESS_ATTRIBUTION_FAMILIES and not process_attribution:
        return _ATTRIBUTION_OFF
    if row is None:
        return _NOT_IN_CSV if name.startswith("DCGM_") else _SELF_METRIC_ABSENT
    if row.spec.read.produced_by is not None:
        return _NO_EVENT_YET
    if states.get(name) and states[name] <= {"unsupported"}:
        return _UNSUPPORTED
    return _NOT_STORED


def _counters_hint(groups_of: dict[str, list[str]]) -> str:
    if groups_of[_NOT_IN_CSV]:
        return "add the missing rows to the counters CSV (the chart's counters ConfigMap, -f/--collectors)"
    if groups_of[_NOT_STORED]:
        return "a metricRelabelings drop or the scrape's sampleLimit removes them: check the ServiceMonitor"
    return "the exporter did not produce its own metrics: check its log and /metrics"


def _counters_row(api: PrometheusClient, groups: list[dict[str, Any]], targets: list[_Target],
                  counters: CounterSet | None, states: dict[str, set[str]], *, process_attribution: bool) -> Row:
    """Which series the loaded shipped rules read are absent, and whether that is expected on this node.

    Expected: a CSV row none of this node's GPUs supports (the series is omitted by design), and an
    event-driven row (Xid, clock events) whose series appear with the first event, and the per-container
    and unattributed families when process attribution is off (the default install). Not expected: a
    row missing from the CSV, a row this node serves that Prometheus does not have (dropped by
    metricRelabelings or a sample limit), an exporter self-metric that is absent.
    """
    needed = needed_series(groups)
    if not needed:
        return skipped(SECTION, "counters", "no shipped rule is loaded, so no counter is needed")
    expr = _over_targets(targets, f"count by (__name__) ({{__name__=~{any_of(needed)}, {{sel}}}})")
    present = {item["metric"].get("__name__", "") for item in api.query(expr)}
    missing = [name for name in needed if name not in present]
    rows = {row.name: row for row in counters.metrics} if counters is not None else {}
    groups_of: dict[str, list[str]] = {what: [] for what in (_NOT_IN_CSV, _UNSUPPORTED, _NO_EVENT_YET,
                                                             _ATTRIBUTION_OFF, _NOT_STORED, _SELF_METRIC_ABSENT)}
    for name in missing:
        groups_of[_why_absent(name, rows.get(name), states, process_attribution=process_attribution)].append(name)
    parts = [f"{what}: {', '.join(names)}" for what, names in groups_of.items() if names]
    problems = [name for what, names in groups_of.items() if what not in _ABSENT_AS_EXPECTED for name in names]
    text = f"{len(needed) - len(missing)} of {len(needed)} series the shipped rules read are scraped from this node"
    if not problems:
        detail = text + (f"; absent as expected: {'; '.join(parts)}" if parts else "")
        return ok(SECTION, "counters", detail, needed=needed, missing=missing)
    return degraded(SECTION, "counters", f"{text}; {'; '.join(parts)}", _counters_hint(groups_of), needed=needed,
                    missing=missing, unexpected=problems)
