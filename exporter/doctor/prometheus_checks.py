"""``--prometheus URL``: does the Prometheus that should watch this node actually do so?

Four questions, each through Prometheus' HTTP API:

* **target**: the scrape target(s) that deliver this node's series (found by the ``Hostname`` label
  the exporter puts on every GPU series, or by the exporter's port among the targets) are up;
* **labels**: none of this node's series carries ``exported_pod``/``exported_namespace``, which is
  what a scrape without ``honorLabels: true`` does to the exporter's workload labels (every
  dashboard and rule that groups by ``pod`` then sees the exporter's pod instead);
* **rules**: the shipped rule groups (``deploy/rules``, the chart's PrometheusRule) are loaded;
* **counters**: every ``DCGM_*``/``gpu_pod_exporter_*`` series those loaded rules read exists for
  this node; an absent one means an alert that can never fire here.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from exporter.app import node_hostname
from exporter.config import Config
from exporter.doctor.report import Row, degraded, failed, ok, skipped
from exporter.metrics.counters import CounterSet
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
RULES_HINT = ("load the shipped rules: the chart's PrometheusRule (selected by the ruleSelector) or "
              "deploy/rules/*.yaml in rule_files")


class PrometheusError(Exception):
    pass


@dataclass(frozen=True)
class PrometheusApi:
    url: str
    timeout_s: float

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        request = urllib.request.Request(self.url.rstrip("/") + path + query,  # noqa: S310 - an http(s) URL checked below
                                         headers={"Accept": "application/json",
                                                  "User-Agent": "gpu-pod-exporter-doctor"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"HTTP {exc.code} from {path}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise PrometheusError(f"{path}: {getattr(exc, 'reason', exc)}") from None
        if not isinstance(body, dict) or body.get("status") != "success":
            raise PrometheusError(f"{path}: {body.get('error') if isinstance(body, dict) else 'not JSON'}")
        return body.get("data")

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        return list(data.get("result") or ()) if isinstance(data, dict) else []


def _selector(hostname: str | None) -> str:
    return f'Hostname="{hostname}"' if hostname else ""


def check_prometheus(url: str, config: Config, counters: CounterSet | None, timeout_s: float) -> list[Row]:
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        return [failed(SECTION, "reachable", f"{url!r} is not an http(s) URL", UNREACHABLE_HINT)]
    api = PrometheusApi(url, timeout_s)
    try:
        info = api.get("/api/v1/status/buildinfo")
    except PrometheusError as exc:
        return [failed(SECTION, "reachable", f"cannot query {url}: {exc}", UNREACHABLE_HINT)]
    version = info.get("version", "?") if isinstance(info, dict) else "?"
    rows = [ok(SECTION, "reachable", f"{url}: Prometheus {version}", version=version)]
    hostname = node_hostname(config)
    try:
        rows.append(_target_row(api, config, hostname))
        rows.append(_labels_row(api, hostname))
        groups = api.get("/api/v1/rules").get("groups") or []
        rows.append(_rules_row(groups))
        rows.append(_counters_row(api, groups, hostname, counters, config))
    except PrometheusError as exc:
        rows.append(failed(SECTION, "query", f"Prometheus refused a query: {exc}", UNREACHABLE_HINT))
    return rows


def _target_row(api: PrometheusApi, config: Config, hostname: str | None) -> Row:
    targets = api.get("/api/v1/targets", state="active").get("activeTargets") or []
    pairs: set[tuple[str, str]] = set()
    if hostname:
        expr = f'count by (job, instance) ({{__name__=~"DCGM_.+|gpu_pod_exporter_.+", {_selector(hostname)}}})'
        pairs = {(item["metric"].get("job", ""), item["metric"].get("instance", "")) for item in api.query(expr)}
    ours = [target for target in targets
            if (target.get("labels", {}).get("job", ""), target.get("labels", {}).get("instance", "")) in pairs]
    if not ours:
        _, port = parse_address(config.address)
        ours = [target for target in targets
                if urllib.parse.urlsplit(str(target.get("scrapeUrl", ""))).port == port
                and target.get("health") != "up"]
    if not ours:
        where = f"node {hostname}" if hostname else "this exporter's port"
        return failed(SECTION, "target", f"no scrape target delivers series of {where}", NO_TARGET_HINT)
    down = [target for target in ours if target.get("health") != "up"]
    names = ", ".join(f"{t.get('labels', {}).get('instance', '?')} (job {t.get('labels', {}).get('job', '?')})"
                      for t in ours)
    if down:
        errors = "; ".join(str(target.get("lastError") or target.get("health")) for target in down)
        return failed(SECTION, "target", f"target {names} is down: {errors}", DOWN_HINT,
                      targets=[t.get("scrapeUrl") for t in ours])
    return ok(SECTION, "target", f"target {names} is up", targets=[t.get("scrapeUrl") for t in ours])


def _labels_row(api: PrometheusApi, hostname: str | None) -> Row:
    if not hostname:
        return skipped(SECTION, "labels", "not checked: --no-hostname leaves nothing to find this node's series by")
    found = api.query(f'count by (job) ({{exported_pod!="", {_selector(hostname)}}}) or '
                      f'count by (job) ({{exported_namespace!="", {_selector(hostname)}}})')
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


def _counters_row(api: PrometheusApi, groups: list[dict[str, Any]], hostname: str | None,
                  counters: CounterSet | None, config: Config) -> Row:
    needed = needed_series(groups)
    if not needed:
        return skipped(SECTION, "counters", "no shipped rule is loaded, so no counter is needed")
    if not hostname:
        return skipped(SECTION, "counters", "not checked: --no-hostname leaves nothing to find this node's series by")
    expr = f'count by (__name__) ({{__name__=~"{"|".join(needed)}", {_selector(hostname)}}})'
    present = {item["metric"].get("__name__", "") for item in api.query(expr)}
    missing = [name for name in needed if name not in present]
    if not missing:
        return ok(SECTION, "counters", f"all {len(needed)} series the shipped rules read are scraped from this node",
                  needed=needed)
    in_csv = [name for name in missing if counters is not None and counters.has(name)]
    not_in_csv = [name for name in missing if name.startswith("DCGM_") and name not in in_csv]
    other = [name for name in missing if name not in in_csv and name not in not_in_csv]
    parts = []
    if not_in_csv:
        parts.append(f"not in the counters CSV: {', '.join(not_in_csv)}")
    if in_csv:
        parts.append(f"in the CSV but not served on this node (see the GPU rows): {', '.join(in_csv)}")
    if other:
        note = "" if config.kubernetes else " (Kubernetes attribution is off)"
        parts.append(f"exporter self-metrics absent{note}: {', '.join(other)}")
    hint = ("add the missing rows to the counters CSV (the chart's counters ConfigMap, -f/--collectors)"
            if not_in_csv else "see the rows above for why this node does not produce them")
    return degraded(SECTION, "counters", f"{len(missing)} of {len(needed)} series the shipped rules read are absent: "
                    f"{'; '.join(parts)}", hint, needed=needed, missing=missing)
