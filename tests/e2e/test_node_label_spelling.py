"""The shipped dashboards and rules answer the same with either node-label spelling.

dcgm-exporter 4.8.3 renamed ``Hostname`` to ``hostname``; ``--dcgm-exporter-compat`` picks the spelling.
One exporter of each spelling (under ``--simulate -k``) is scraped by its own real Prometheus with the
shipped rules. In each, the dashboards' hidden ``host_label`` variable is resolved the way Grafana
does (``label_names()`` of the series, filtered by the variable's regex) and the node variable lists
the node; then every panel query of every shipped dashboard must answer for the same panels with
either spelling, and the recording rules must record the same series names. One copy of each
dashboard and rule file serves both generations.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from tests.dashboards.dashboard_queries import load_dashboards
from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for
from tests.support.prometheus import RULE_FILES, PrometheusHarness, dashboard_panel_queries

pytestmark = pytest.mark.e2e

NODE = "spelling-node"
ARGS = ["--simulate", "--collect-interval", "250", "--node-name", NODE]


@pytest.fixture(scope="module")
def prometheus_per_spelling() -> Iterator[dict[str, PrometheusHarness]]:
    with running_exporter([*ARGS, "--dcgm-exporter-compat", "4.8.2"]) as old, \
            running_exporter([*ARGS, "--dcgm-exporter-compat", "4.8.3"]) as new, \
            PrometheusHarness([f"127.0.0.1:{old.port}"], rule_files=RULE_FILES) as old_prometheus, \
            PrometheusHarness([f"127.0.0.1:{new.port}"], rule_files=RULE_FILES) as new_prometheus:
        old.wait_healthy()
        new.wait_healthy()
        old_prometheus.wait_for_targets_up(deadline_s=60.0)
        new_prometheus.wait_for_targets_up(deadline_s=60.0)
        yield {"Hostname": old_prometheus, "hostname": new_prometheus}


def _host_label_as_grafana_resolves_it(prometheus: PrometheusHarness) -> str:
    """label_names(DCGM_FI_DEV_FB_USED), filtered by the dashboards' host_label regex."""
    variables = [variable for dashboard in load_dashboards().values()
                 for variable in dashboard["templating"]["list"] if variable["name"] == "host_label"]
    assert len(variables) >= 2  # the node and overview dashboards filter by node
    [query] = {variable["query"]["query"] for variable in variables}
    [pattern] = {variable["regex"] for variable in variables}
    assert query == "label_names(DCGM_FI_DEV_FB_USED)"
    regex = re.compile(pattern.strip("/"))
    names = wait_for(lambda: prometheus.api("labels", {"match[]": "DCGM_FI_DEV_FB_USED"}) or None, 60.0,
                     "label names of DCGM_FI_DEV_FB_USED")
    matching = [name for name in names if regex.fullmatch(name)]
    assert len(matching) == 1, names
    return matching[0]


def _answered(prometheus: PrometheusHarness, host_label: str) -> frozenset[str]:
    queries = dashboard_panel_queries({"host_label": host_label, "Hostname": NODE, "gpu": "(0|1|2|3)",
                                       "modelName": ".*", "team": ".*", "namespace": ".*", "instance": ".*"})
    return frozenset(f"{query.dashboard} {query.source}" for query in queries if prometheus.query(query.expr))


def test_each_spelling_is_found_by_the_dashboards_and_lists_the_node(
        prometheus_per_spelling: dict[str, PrometheusHarness]) -> None:
    for spelling, prometheus in prometheus_per_spelling.items():
        assert _host_label_as_grafana_resolves_it(prometheus) == spelling
        nodes = prometheus.wait_for(f"count by ({spelling}) (DCGM_FI_DEV_FB_USED)", bool, deadline_s=60.0)
        assert [sample.labels for sample in nodes] == [{spelling: NODE}]


def test_every_panel_answers_the_same_with_either_spelling(
        prometheus_per_spelling: dict[str, PrometheusHarness]) -> None:
    old, new = prometheus_per_spelling["Hostname"], prometheus_per_spelling["hostname"]
    last: list[frozenset[str]] = []

    def same() -> frozenset[str] | None:
        answered = (_answered(old, "Hostname"), _answered(new, "hostname"))
        last[:] = answered
        return answered[0] if answered[0] == answered[1] and len(answered[0]) >= 40 else None

    try:
        wait_for(same, 90.0, "the same panels answering with both spellings", interval_s=1.0)
    except AssertionError:
        pytest.fail(f"only with Hostname: {sorted(last[0] - last[1])}; only with hostname: "
                    f"{sorted(last[1] - last[0])}; {len(last[0])} answered")


def test_the_recording_rules_record_the_same_series_with_either_spelling(
        prometheus_per_spelling: dict[str, PrometheusHarness]) -> None:
    old, new = prometheus_per_spelling["Hostname"], prometheus_per_spelling["hostname"]
    old.wait_for_rules_evaluated(deadline_s=60.0)
    new.wait_for_rules_evaluated(deadline_s=60.0)
    records = [rule["name"] for group in old.wait_for_rules_evaluated() for rule in group["rules"]
               if rule.get("type") == "recording"]

    def recorded(prometheus: PrometheusHarness) -> set[str]:
        return {name for name in records if prometheus.query(name)}

    def same() -> set[str] | None:
        # Rules over rates record only after a few evaluations: wait for at least three on both sides, not
        # for the first moment both happen to hold the same (possibly smaller) set.
        found = recorded(old)
        return found if len(found) >= 3 and found == recorded(new) else None

    found = wait_for(same, 120.0, "at least 3 recording rules recording the same with both spellings", interval_s=1.0)
    assert len(found) >= 3
