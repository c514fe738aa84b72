"""The Helm chart's PrometheusRules (and the rendered Prometheus Operator manifest) carry deploy/rules unchanged.

The chart embeds copies of deploy/rules/*.yaml (scripts/sync-chart-files.py) and re-serialises them
through Helm's YAML functions. The drift test compares the copied files; this compares what a user
actually applies: every group of every rule file, rule by rule, after the real chart render and in
deploy/manifests/prometheus-operator/. A fix to a rule that is not synced, or a template change that
alters an expression (quoting, line folding, `{{ }}` in annotations), fails here.
"""

from typing import Any

import pytest
import yaml

from tests.deploy.chart_support import MONITORING_APIS, render
from tests.rules.promtool_runner import REPO_ROOT, RULE_FILES

OPERATOR_MANIFEST = REPO_ROOT / "deploy" / "manifests" / "prometheus-operator" / "gpu-pod-exporter.yaml"


def source_groups() -> dict[str, list[dict[str, Any]]]:
    """deploy/rules file name -> its groups, as Prometheus loads them."""
    return {path.name: yaml.safe_load(path.read_text(encoding="utf-8"))["groups"] for path in RULE_FILES}


def by_source(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """PrometheusRule objects keyed by the rule file they were made from (their source annotation)."""
    rules: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        if obj["kind"] == "PrometheusRule":
            rules[obj["metadata"]["annotations"]["gpu-pod-exporter/source"]] = obj["spec"]["groups"]
    return rules


def test_there_are_rule_files_with_alerts_and_records() -> None:
    groups = source_groups()
    assert set(groups) == {"gpu-pod-exporter-alerts.yaml", "gpu-pod-exporter-recording.yaml"}
    rules = [rule for file_groups in groups.values() for group in file_groups for rule in group["rules"]]
    assert sum("alert" in rule for rule in rules) == 26  # 25 GPU and exporter alerts + GpuQuotaMostlyUnused
    assert sum("record" in rule for rule in rules) > 10


@pytest.mark.parametrize("where", ["chart render", "operator manifest"])
def test_prometheusrules_equal_the_rule_files(where: str) -> None:
    if where == "chart render":
        objects = render({"prometheusRule": {"enabled": True}}, api_versions=MONITORING_APIS).objects
    else:
        objects = [doc for doc in yaml.safe_load_all(OPERATOR_MANIFEST.read_text(encoding="utf-8")) if doc]
    assert by_source(objects) == source_groups()
