"""House rules for deploy/rules: labels, annotations, runbooks, names, counters, and test coverage.

promtool proves each rule behaves as its unit test says; these tests prove that every rule has
such a test, that alerts say where (node, GPU, pod, team) and link to an existing runbook
section, and that every expression reads only names the exporter produces (its own catalog and
registry) or an allowlisted external name.
"""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.dashboards.exporter_metrics import counter_names, known_metric_entries
from tests.dashboards.promql_names import (
    counters_read_as_values,
    load_label_names,
    recorded_names,
    rule_groups,
    unknown_names,
)
from tests.rules.promtool_runner import REPO_ROOT, RULE_FILES, RULE_TEST_FILES

RUNBOOK_BASE = "https://github.com/gpu-pod-exporter/gpu-pod-exporter/blob/main/docs/alerts.md"
ALERTS_DOC = REPO_ROOT / "docs" / "alerts.md"
JOB_MATCHER = 'job=~".*gpu-pod-exporter.*"'

RULES = rule_groups(RULE_FILES)
ALERTS = {str(rule["alert"]): rule for _, rule in RULES if "alert" in rule}
RECORDS = {str(rule["record"]): rule for _, rule in RULES if "record" in rule}


def groups_by_name() -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            groups[group["name"]] = group["rules"]
    return groups


def promtool_tests() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    for path in RULE_TEST_FILES:
        groups.extend(yaml.safe_load(path.read_text(encoding="utf-8"))["tests"])
    return groups


def minutes(duration: str) -> float:
    match = re.fullmatch(r"(\d+)([smh])", duration)
    assert match, duration
    return int(match.group(1)) * {"s": 1 / 60, "m": 1, "h": 60}[match.group(2)]


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub generates for the headings of a markdown file."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"^#{1,6}\s+(.*)$", line)
        if match:
            text = match.group(1).strip().lower()
            text = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
            anchors.add(text)
    return anchors


def test_the_expected_alerts_exist() -> None:
    assert len(ALERTS) == 26
    assert {"GpuAllocatedButIdle", "GpuXidFatal", "GpuEccUncorrectableError", "GpuFallenOffBus",
            "GpuPodExporterDown", "GpuMemoryHeldWithoutAllocation"} <= set(ALERTS)


@pytest.mark.parametrize("name", sorted(ALERTS))
def test_alert_has_severity_annotations_and_an_existing_runbook(name: str) -> None:
    rule = ALERTS[name]
    assert rule["labels"]["severity"] in {"info", "warning", "critical"}
    annotations = rule["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert annotations["runbook_url"] == f"{RUNBOOK_BASE}#{name.lower()}"
    assert name.lower() in github_anchors(ALERTS_DOC.read_text(encoding="utf-8")), \
        f"docs/alerts.md has no section '{name}'"


@pytest.mark.parametrize("name", sorted(n for n, _ in groups_by_name().items()))
def test_alerts_name_what_they_are_about(name: str) -> None:
    """GPU alerts name node, GPU index, UUID and model, and the pod and team where there is one."""
    for rule in groups_by_name()[name]:
        if "alert" not in rule:
            continue
        description = rule["annotations"]["description"]
        if name == "gpu-pod-exporter.exporter":
            assert "$labels.instance" in description or rule["alert"] == "GpuPodExporterAbsent"
            continue
        if name == "gpu-pod-exporter.gpu-quota":  # about a namespace's quota, not one GPU
            assert "$labels.namespace" in description and "$labels.cluster" in description, rule["alert"]
            continue
        for label in ("Hostname", "gpu", "UUID", "modelName", "GPU_I_ID"):
            assert f"$labels.{label}" in description, (rule["alert"], label)
        if rule["alert"] != "GpuMemoryHeldWithoutAllocation":  # an unallocated GPU has no pod
            for label in ("pod", "namespace", "team"):
                assert f"$labels.{label}" in description, (rule["alert"], label)


def test_every_rule_expression_reads_only_names_the_exporter_produces() -> None:
    known = set(known_metric_entries()) | recorded_names(RULE_FILES)
    exprs = [(f"{path.name} {rule.get('alert') or rule.get('record')}", str(rule["expr"]))
             for path, rule in RULES]
    assert unknown_names(exprs, known, load_label_names()) == []


def test_no_rule_reads_a_counter_as_a_running_total() -> None:
    counters = counter_names()
    offenders = {str(rule.get("alert") or rule.get("record")):
                 counters_read_as_values(str(rule["expr"]), counters) for _, rule in RULES}
    assert {name: found for name, found in offenders.items() if found} == {}


def test_self_health_rules_select_the_exporter_job() -> None:
    for rule in groups_by_name()["gpu-pod-exporter.exporter"]:
        expr = str(rule["expr"])
        if "up{" in expr:
            assert JOB_MATCHER in expr, rule["alert"]


def test_every_alert_has_promtool_cases_that_fire_and_stay_silent_just_before() -> None:
    """For each alert: a case with expected labels and all annotations, and silence one evaluation earlier."""
    problems = []
    for name in ALERTS:
        fired_with_annotations = False
        silent_just_before = False
        for group in promtool_tests():
            checks = [c for c in group.get("alert_rule_test", []) if c["alertname"] == name]
            silent_at = {minutes(c["eval_time"]) for c in checks if not c["exp_alerts"]}
            for check in checks:
                if not check["exp_alerts"]:
                    continue
                if all(set(a.get("exp_annotations", {})) == {"summary", "description", "runbook_url"}
                       and a["exp_labels"].get("severity") for a in check["exp_alerts"]):
                    fired_with_annotations = True
                if minutes(check["eval_time"]) - 1 in silent_at:
                    silent_just_before = True
        if not fired_with_annotations:
            problems.append(f"{name}: no case that fires with exact labels and annotations")
        if not silent_just_before:
            problems.append(f"{name}: no silent check one evaluation before a firing one")
    assert problems == []


def test_every_recording_rule_has_expected_values_in_a_promtool_test() -> None:
    tested: set[str] = set()
    for group in promtool_tests():
        for check in group.get("promql_expr_test", []):
            if check["exp_samples"]:
                tested.update(name for name in RECORDS if name in check["expr"])
    assert set(RECORDS) - tested == set()


def test_promtool_tests_use_only_features_of_promtool_2_42() -> None:
    """Debian bookworm's promtool 2.42 rejects newer keys such as start_timestamp or fuzzy_compare."""
    allowed_top = {"rule_files", "evaluation_interval", "group_eval_order", "tests"}
    allowed_group = {"name", "interval", "input_series", "alert_rule_test", "promql_expr_test",
                     "external_labels", "external_url"}
    for path in RULE_TEST_FILES:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert set(document) <= allowed_top, path
        for group in document["tests"]:
            assert set(group) <= allowed_group, (path, group.get("name"))


def test_rule_files_use_no_field_newer_than_prometheus_2_42() -> None:
    allowed = {"alert", "record", "expr", "for", "labels", "annotations"}
    for _, rule in RULES:
        assert set(rule) <= allowed, rule


def test_group_eval_order_puts_the_alert_helpers_first() -> None:
    """Alerts read recorded helper series; promtool must evaluate the helper group first."""
    for path in RULE_TEST_FILES:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
        if any(Path(f).name == "gpu-pod-exporter-alerts.yaml" for f in document["rule_files"]):
            assert document["group_eval_order"][0] == "gpu-pod-exporter.alert-helpers", path
