"""The inhibit rules docs/alerts.md recommends never silence an alert the remediator acts on (issue 29).

Alertmanager applies inhibition before routing, to every receiver: an allowlisted alert that is the
target of an inhibit rule never reaches ``gpu-pod-exporter remediate``. The unit test reads the
rules from the document as a user copies them; the end-to-end test loads them into Debian's
``prometheus-alertmanager`` with the remediator's route and shows, for the faults that raise several
alerts at once, that the remediator's receiver gets the alert it acts on, and that the advice this
replaced did silence it (so the test can tell the difference).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from exporter.remediate.policy import DEFAULT_ALERTS
from tests.support.alertmanager import AlertmanagerHarness, PayloadRecorder, require_alertmanager
from tests.support.polling import wait_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "alerts.md"
# The rule the earlier advice had: a generic alert muting an allowlisted one.
OLD_RULE = {"source_matchers": ['alertname="GpuUnhealthy"'],
            "target_matchers": ['alertname=~"GpuRowRemapPending|GpuRowRemapFailure|GpuRetiredPagesPending|'
                                'GpuXidNeedsReset"'], "equal": ["Hostname", "UUID"]}


def recommended_inhibit_rules() -> list[dict[str, Any]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Avoiding duplicate notifications"):]
    block = re.search(r"```yaml\n(inhibit_rules:.*?)```", section, re.S)
    assert block is not None, "docs/alerts.md: the inhibit_rules block is gone"
    rules = yaml.safe_load(block.group(1))["inhibit_rules"]
    assert rules, "no inhibit rules in docs/alerts.md"
    return list(rules)


def matches(matcher: str, name: str) -> bool:
    found = re.fullmatch(r'alertname(=~|=|!=|!~)"(.*)"', matcher)
    assert found is not None, f"unexpected matcher {matcher!r}: extend this test"
    op, value = found.groups()
    hit = re.fullmatch(value, name) is not None if "~" in op else value == name
    return hit if not op.startswith("!") else not hit


def test_no_recommended_rule_targets_an_alert_the_remediator_acts_on() -> None:
    for rule in recommended_inhibit_rules():
        for name in DEFAULT_ALERTS:
            assert not all(matches(m, name) for m in rule["target_matchers"]), (rule, name)
    assert any(matches(m, "GpuRowRemapFailure") for m in OLD_RULE["target_matchers"])  # the checker can fail


SAME_FAULT = [  # one fault, several alerts, as the shipped rules raise them for one GPU
    {"alertname": "GpuRowRemapFailure", "Hostname": "node-a", "UUID": "GPU-1", "gpu": "1"},
    {"alertname": "GpuUnhealthy", "Hostname": "node-a", "UUID": "GPU-1", "gpu": "1", "reason": "row_remap_failure"},
    {"alertname": "GpuXidFatal", "Hostname": "node-b", "UUID": "GPU-2", "gpu": "2", "xid": "79"},
    {"alertname": "GpuFallenOffBus", "Hostname": "node-b", "UUID": "GPU-2", "gpu": "2"},
    {"alertname": "GpuUnhealthy", "Hostname": "node-b", "UUID": "GPU-2", "gpu": "2", "reason": "fatal_xid"},
    {"alertname": "GpuEccUncorrectableError", "Hostname": "node-c", "UUID": "GPU-3", "gpu": "3"},
    {"alertname": "GpuUnhealthy", "Hostname": "node-c", "UUID": "GPU-3", "gpu": "3", "reason": "ecc"},
]


def config(rules: list[dict[str, Any]], remediate_url: str, people_url: str) -> dict[str, Any]:
    allowlist = "|".join(DEFAULT_ALERTS)
    return {
        "route": {"receiver": "people", "group_by": ["alertname", "Hostname", "UUID"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h",
                  "routes": [{"receiver": "remediate", "matchers": [f'alertname=~"{allowlist}"'],
                              "continue": True}]},
        "receivers": [{"name": "people", "webhook_configs": [{"url": people_url}]},
                      {"name": "remediate", "webhook_configs": [{"url": remediate_url, "send_resolved": True}]}],
        "inhibit_rules": rules,
    }


def post_alerts(alertmanager: AlertmanagerHarness) -> None:
    body = json.dumps([{"labels": labels, "annotations": {}} for labels in SAME_FAULT]).encode()
    request = urllib.request.Request(f"{alertmanager.url}/api/v2/alerts", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def delivered(recorder: PayloadRecorder) -> set[tuple[str, str]]:
    return {(alert["labels"]["alertname"], alert["labels"]["Hostname"])
            for _, _, payload in recorder.notifications() for alert in payload["alerts"]}


def states(alertmanager: AlertmanagerHarness) -> dict[tuple[str, str], str]:
    return {(a["labels"]["alertname"], a["labels"]["Hostname"]): a["status"]["state"] for a in alertmanager.alerts()}


def test_the_recommended_rules_in_a_real_alertmanager_still_deliver_what_the_remediator_acts_on() -> None:
    require_alertmanager()
    wanted = {(labels["alertname"], labels["Hostname"]) for labels in SAME_FAULT
              if labels["alertname"] in DEFAULT_ALERTS}
    remediate, people = PayloadRecorder().start(), PayloadRecorder().start()
    try:
        with AlertmanagerHarness(config(recommended_inhibit_rules(), remediate.url, people.url)) as alertmanager:
            post_alerts(alertmanager)
            wait_for(lambda: wanted <= delivered(remediate), 60, "every allowlisted alert at the remediator")
            assert {key for key, state in states(alertmanager).items() if state == "suppressed"} == \
                {("GpuUnhealthy", "node-a"), ("GpuUnhealthy", "node-b"), ("GpuUnhealthy", "node-c")}
            assert delivered(remediate) == wanted  # and only those: GpuUnhealthy goes to people, when not muted
    finally:
        remediate.stop()
        people.stop()


def test_the_advice_it_replaced_silenced_the_remediation_of_a_failed_row_remap() -> None:
    require_alertmanager()
    remediate, people = PayloadRecorder().start(), PayloadRecorder().start()
    try:
        with AlertmanagerHarness(config([OLD_RULE], remediate.url, people.url)) as alertmanager:
            post_alerts(alertmanager)
            wait_for(lambda: states(alertmanager).get(("GpuRowRemapFailure", "node-a")) == "suppressed", 60,
                     "Alertmanager to mark GpuRowRemapFailure inhibited")
            wait_for(lambda: {("GpuXidFatal", "node-b"), ("GpuEccUncorrectableError", "node-c")}
                     <= delivered(remediate), 60, "the alerts no rule targets")
            assert ("GpuRowRemapFailure", "node-a") not in delivered(remediate)
    finally:
        remediate.stop()
        people.stop()
