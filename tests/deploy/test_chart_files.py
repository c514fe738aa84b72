"""Rule files, dashboards and the counters CSV reach the chart (scripts/sync-chart-files.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helm_python import HelmRenderError

from tests.deploy.chart_support import (
    CHART_DIR,
    MONITORING_APIS,
    REPO,
    SAMPLE_DASHBOARD,
    SAMPLE_RULES,
    SAMPLE_RULES_2,
    load_script,
    render,
)

sync_chart_files = load_script("sync-chart-files")


def chart_of(repo: Path) -> Path:
    return repo / "deploy" / "helm" / "gpu-pod-exporter"


def synced(repo: Path) -> Path:
    chart = chart_of(repo)
    sync_chart_files.sync(repo, chart)
    return chart


def test_the_chart_in_this_repository_matches_its_sources() -> None:
    """Fails when deploy/rules, deploy/dashboards, exporter/metrics/data/default-counters.csv or the values
    table changed without `python scripts/sync-chart-files.py`."""
    assert sync_chart_files.drift(REPO, CHART_DIR) == []


def test_sync_copies_rules_and_dashboards_but_not_promtool_tests(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    assert sorted(p.name for p in (chart / "files" / "rules").iterdir()) == ["gpu-extra.yaml", "gpu.yaml"]
    assert sorted(p.name for p in (chart / "files" / "dashboards").iterdir()) == ["GPU_Pods.json"]
    assert (chart / "files" / "rules" / "gpu.yaml").read_text(encoding="utf-8") == SAMPLE_RULES
    assert sync_chart_files.drift(repo_copy, chart) == []


def test_drift_names_changed_new_and_removed_files(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    rules = repo_copy / "deploy" / "rules"
    (rules / "gpu.yaml").write_text(SAMPLE_RULES.replace("85", "90"), encoding="utf-8")
    (rules / "gpu-extra.yaml").unlink()
    (rules / "new.yaml").write_text("groups: []\n", encoding="utf-8")
    counters = repo_copy / "exporter" / "metrics" / "data" / "default-counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, util\n", encoding="utf-8")
    problems = sync_chart_files.drift(repo_copy, chart)
    assert "out of date: files/rules/gpu.yaml" in " ".join(problems)
    assert "missing: files/rules/new.yaml" in " ".join(problems)
    assert "stale: files/rules/gpu-extra.yaml" in " ".join(problems)
    assert "out of date: files/default-counters.csv" in " ".join(problems)
    sync_chart_files.sync(repo_copy, chart)
    assert sync_chart_files.drift(repo_copy, chart) == []
    assert not (chart / "files" / "rules" / "gpu-extra.yaml").exists()


def test_readme_values_table_follows_the_schema(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    schema_path = chart / "values.schema.json"
    schema = json.loads(schema_path.read_text(encoding="utf-8"))
    schema["properties"]["hostNetwork"]["description"] = "Changed description."
    schema_path.write_text(json.dumps(schema), encoding="utf-8")
    expected = "out of date: README.md (from values.schema.json + values.yaml)"
    assert sync_chart_files.drift(repo_copy, chart) == [expected]
    sync_chart_files.sync(repo_copy, chart)
    assert "| `hostNetwork` | boolean | `false` | Changed description. |" in (chart / "README.md").read_text()


@pytest.mark.parametrize(
    ("file_name", "content", "message"),
    [
        ("broken.yaml", "groups:\n  - name: [unclosed\n", "broken.yaml:3: not valid YAML"),
        ("alerts.yaml", "alerts:\n  - x\n", "alerts.yaml: not a Prometheus rule file"),
        ("extra.yaml", "groups: []\nrules: []\n", "extra.yaml: unexpected top-level keys ['rules']"),
    ],
)
def test_bad_rule_files_are_reported_by_file(repo_copy: Path, file_name: str, content: str, message: str) -> None:
    (repo_copy / "deploy" / "rules" / file_name).write_text(content, encoding="utf-8")
    with pytest.raises(sync_chart_files.SyncError, match="^.*" + message.replace("[", r"\[").replace("]", r"\]")):
        sync_chart_files.sync(repo_copy, chart_of(repo_copy))


def test_bad_dashboard_is_reported_with_its_line(repo_copy: Path) -> None:
    (repo_copy / "deploy" / "dashboards" / "bad.json").write_text('{\n  "title": "x",\n}\n', encoding="utf-8")
    with pytest.raises(sync_chart_files.SyncError, match=r"bad\.json:3: not valid JSON"):
        sync_chart_files.sync(repo_copy, chart_of(repo_copy))


def test_main_check_exits_one_on_drift(repo_copy: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sync_chart_files, "REPO", repo_copy)
    monkeypatch.setattr(sync_chart_files, "CHART", chart_of(repo_copy))
    assert sync_chart_files.main(["--check"]) == 1
    assert "missing: files/rules/gpu.yaml" in capsys.readouterr().out
    assert sync_chart_files.main([]) == 0
    assert sync_chart_files.main(["--check"]) == 0


# --- what the chart makes of the copied files -------------------------------------------------------


def test_every_group_of_every_rule_file_becomes_a_prometheusrule(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    rendered = render({"prometheusRule": {"additionalLabels": {"release": "kube-prometheus-stack"}}},
                      chart_dir=chart, api_versions=MONITORING_APIS)
    rules = {rule["metadata"]["name"]: rule for rule in rendered.all("PrometheusRule")}
    assert set(rules) == {"gpu-pod-exporter-rules-gpu", "gpu-pod-exporter-rules-gpu-extra"}
    assert rules["gpu-pod-exporter-rules-gpu"]["spec"]["groups"] == yaml.safe_load(SAMPLE_RULES)["groups"]
    assert rules["gpu-pod-exporter-rules-gpu-extra"]["spec"]["groups"] == yaml.safe_load(SAMPLE_RULES_2)["groups"]
    for rule in rules.values():
        assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert rule["metadata"]["namespace"] == "gpu-monitoring"
    # alert templates pass through untouched (the files are data, not Helm templates)
    annotation = rules["gpu-pod-exporter-rules-gpu"]["spec"]["groups"][0]["rules"][0]["annotations"]["summary"]
    assert annotation == "GPU {{ $labels.gpu }} of {{ $labels.pod }} is hot"


def test_prometheusrules_need_the_crd_api_and_can_be_turned_off(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    assert not render(chart_dir=chart).all("PrometheusRule")
    assert len(render({"prometheusRule": {"force": True}}, chart_dir=chart).all("PrometheusRule")) == 2
    off = render({"prometheusRule": {"enabled": False}}, chart_dir=chart, api_versions=MONITORING_APIS)
    assert not off.all("PrometheusRule")


def test_additional_rule_groups_get_their_own_object(repo_copy: Path) -> None:
    group = {"name": "site", "rules": [{"alert": "SiteGPUIdle", "expr": "DCGM_FI_DEV_GPU_UTIL == 0", "for": "1h"}]}
    rendered = render({"prometheusRule": {"force": True, "additionalGroups": [group]}}, chart_dir=synced(repo_copy))
    assert rendered.one("PrometheusRule", "gpu-pod-exporter-rules-additional")["spec"]["groups"] == [group]


def test_a_bad_rule_file_inside_the_chart_fails_the_render_naming_it(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    (chart / "files" / "rules" / "hand-edited.yaml").write_text("groups: []\nrule_files: []\n", encoding="utf-8")
    with pytest.raises(HelmRenderError, match=r"files/rules/hand-edited\.yaml: unexpected top-level keys rule_files"):
        render(chart_dir=chart, api_versions=MONITORING_APIS)


def test_each_dashboard_becomes_a_sidecar_configmap_with_the_json_unchanged(repo_copy: Path) -> None:
    chart = synced(repo_copy)
    rendered = render({"grafanaDashboards": {"folder": "GPU", "additionalLabels": {"team": "infra"}}}, chart_dir=chart)
    configmap = rendered.one("ConfigMap", "gpu-pod-exporter-dashboard-gpu-pods")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["labels"]["team"] == "infra"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    source = (repo_copy / "deploy" / "dashboards" / "GPU_Pods.json").read_text(encoding="utf-8")
    assert configmap["data"]["GPU_Pods.json"] == source.rstrip("\n")
    assert json.loads(configmap["data"]["GPU_Pods.json"]) == SAMPLE_DASHBOARD

    custom = render({"grafanaDashboards": {"label": "dashboards", "labelValue": "gpu", "namespace": "grafana"}},
                    chart_dir=chart).one("ConfigMap", "gpu-pod-exporter-dashboard-gpu-pods")
    assert custom["metadata"]["labels"]["dashboards"] == "gpu"
    assert custom["metadata"]["namespace"] == "grafana"
    assert "annotations" not in custom["metadata"]
    disabled = render({"grafanaDashboards": {"enabled": False}}, chart_dir=chart)
    assert [cm["metadata"]["name"] for cm in disabled.all("ConfigMap")] == ["gpu-pod-exporter-counters"]
