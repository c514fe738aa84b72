"""The chart passes `helm lint`, renders API-valid objects and rejects invalid values by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import Chart, HelmRenderError, HelmValuesError, lint

from tests.deploy.chart_support import CHART_DIR, CI_VALUES, MONITORING_APIS, load_ci_values, load_script, render

# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and a current one.
KUBERNETES_VERSIONS = ("1.27.0", "1.35.0")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
SCENARIO_IDS = [path.name.removesuffix("-values.yaml") for path in CI_VALUES]


def test_the_scenario_matrix_covers_what_users_run() -> None:
    assert {"default", "no-servicemonitor", "tls-basic-auth", "process-attribution", "custom-counters",
            "hostnetwork"} <= set(SCENARIO_IDS)


@pytest.mark.parametrize("values_file", CI_VALUES, ids=SCENARIO_IDS)
def test_helm_lint_reports_nothing(values_file: Path) -> None:
    report = lint(CHART_DIR, load_ci_values(values_file), strict=True, namespace="gpu-monitoring")
    assert report["errors"] == []
    assert report["messages"] == []  # strict: not even an info ("icon is recommended")


@pytest.mark.parametrize("values_file", CI_VALUES, ids=SCENARIO_IDS)
@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_rendered_core_objects_validate_against_the_kubernetes_schemas(values_file: Path, version: str) -> None:
    rendered = render(load_ci_values(values_file), api_versions=MONITORING_APIS)
    core = [obj for obj in rendered.objects if obj["kind"] not in CRD_KINDS]
    assert {"DaemonSet", "ServiceAccount", "Service", "ConfigMap"} <= {obj["kind"] for obj in core}
    for obj in core:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for Kubernetes {version}: {exc.message}")


def _check_relabelings(relabelings: list[dict[str, Any]]) -> None:
    for relabel in relabelings:
        assert set(relabel) <= {"sourceLabels", "separator", "targetLabel", "regex", "modulus", "replacement", "action"}


def _renders_a_servicemonitor(values_file: Path) -> bool:
    return bool(render(load_ci_values(values_file), api_versions=MONITORING_APIS).all("ServiceMonitor"))


WITH_SERVICEMONITOR = [path for path in CI_VALUES if _renders_a_servicemonitor(path)]


def test_every_values_file_but_the_opt_out_renders_a_servicemonitor() -> None:
    without = {path.name.removesuffix("-values.yaml") for path in CI_VALUES} - {
        path.name.removesuffix("-values.yaml") for path in WITH_SERVICEMONITOR}
    assert without == {"no-servicemonitor"}


@pytest.mark.parametrize("values_file", WITH_SERVICEMONITOR,
                         ids=[path.name.removesuffix("-values.yaml") for path in WITH_SERVICEMONITOR])
def test_servicemonitor_has_the_structure_the_operator_accepts(values_file: Path) -> None:
    """kubernetes-validate has no CRD schemas: check the fields the operator's CRD defines."""
    rendered = render(load_ci_values(values_file), api_versions=MONITORING_APIS)
    monitors = rendered.all("ServiceMonitor")
    assert len(monitors) == 1
    for monitor in monitors:
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        spec = monitor["spec"]
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel", "targetLabels",
                             "podTargetLabels", "sampleLimit"}
        assert spec["selector"]["matchLabels"]
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= {"port", "path", "scheme", "interval", "scrapeTimeout", "honorLabels",
                                     "tlsConfig", "basicAuth", "relabelings", "metricRelabelings"}
            assert endpoint["scheme"] in {"http", "https"}
            assert isinstance(endpoint["honorLabels"], bool)
            _check_relabelings(endpoint.get("relabelings", []))
            _check_relabelings(endpoint.get("metricRelabelings", []))
            for secret_ref in endpoint.get("basicAuth", {}).values():
                assert set(secret_ref) == {"name", "key"}


# --- values.schema.json ----------------------------------------------------------------------------

BAD_VALUES = [
    pytest.param({"web": {"port": "9400"}}, "/web/port", id="port-as-string"),
    pytest.param({"web": {"port": 70000}}, "/web/port", id="port-out-of-range"),
    pytest.param({"kubernetes": {"gpuIdType": "index"}}, "/kubernetes/gpuIdType", id="gpu-id-type-enum"),
    pytest.param({"runAs": "admin"}, "/runAs", id="run-as-enum"),
    pytest.param({"exporter": {"collectInterval": 10}}, "/exporter/collectInterval", id="interval-too-short"),
    pytest.param({"exporter": {"logFormat": "xml"}}, "/exporter/logFormat", id="log-format"),
    pytest.param({"serviceMonitor": {"interval": "fast"}}, "/serviceMonitor/interval", id="duration"),
    pytest.param({"serviceMonitr": {"enabled": False}}, "serviceMonitr", id="typo-top-level"),
    pytest.param({"containerSecurityContext": {"readOnlyRootFileSystem": True}}, "readOnlyRootFileSystem",
                 id="typo-security-context"),
    pytest.param({"web": {"tls": {"clientAuthType": "Require"}}}, "/web/tls/clientAuthType", id="client-auth"),
    pytest.param({"web": {"basicAuth": {"users": {"alice": "secret"}}}}, "/web/basicAuth/users/alice",
                 id="plain-password-as-hash"),
    pytest.param({"image": {"digest": "latest"}}, "/image/digest", id="digest"),
    pytest.param({"kubernetes": {"teamLabelSources": ["team"]}}, "/kubernetes/teamLabelSources/0",
                 id="team-source"),
    pytest.param({"tolerations": [{"key": "x", "operator": "Maybe"}]}, "/tolerations/0/operator",
                 id="toleration"),
    pytest.param({"processAttribution": {"enabled": "yes"}}, "/processAttribution/enabled", id="bool-as-string"),
    pytest.param({"resources": {"limits": {"memry": "1Gi"}}}, "memry", id="typo-resources"),
    pytest.param({"extraEnv": [{"value": "x"}]}, "/extraEnv/0", id="env-without-name"),
]


@pytest.mark.parametrize(("values", "named"), BAD_VALUES)
def test_invalid_values_are_rejected_naming_the_value(values: dict[str, Any], named: str) -> None:
    with Chart.load(CHART_DIR) as chart:
        with pytest.raises(HelmValuesError) as raised:
            chart.validate_schema(values)
        assert named in str(raised.value)
        # `helm install` / `helm template` stop on the same error before rendering anything
        with pytest.raises(HelmValuesError, match="values don't meet the specifications"):
            chart.render(values=values, name="gpu-pod-exporter", namespace="gpu-monitoring")


def test_every_value_in_values_yaml_is_described_by_the_schema() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text(encoding="utf-8"))
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text(encoding="utf-8"))

    def walk(node: Any, sub: dict[str, Any], path: str) -> None:
        assert "type" in sub or "$ref" in sub, f"{path}: the schema gives no type"
        if isinstance(node, dict) and "properties" in sub:
            for key, value in node.items():
                assert key in sub["properties"], f"{path}.{key} is in values.yaml but not in values.schema.json"
                walk(value, sub["properties"][key], f"{path}.{key}")

    assert schema["additionalProperties"] is False
    for key, value in values.items():
        assert key in schema["properties"], f"{key} is in values.yaml but not in values.schema.json"
        assert schema["properties"][key].get("description") or "properties" in schema["properties"][key], key
        walk(value, schema["properties"][key], key)


# --- template-level checks that the schema cannot express ---------------------------------------

TEMPLATE_FAILURES = [
    pytest.param({"web": {"tls": {"enabled": True}}}, "web.tls.existingSecret", id="tls-without-secret"),
    pytest.param({"web": {"tls": {"clientAuthType": "RequireAndVerifyClientCert"}}}, "web.tls.enabled",
                 id="client-auth-without-tls"),
    pytest.param({"web": {"basicAuth": {"users": {"a": "$2b$10$" + "x" * 53}, "passwords": {"a": "p"}}}},
                 "both web.basicAuth.users and web.basicAuth.passwords", id="user-twice"),
    pytest.param({"serviceMonitor": {"force": True}, "web": {"basicAuth": {"users": {"a": "$2b$10$" + "x" * 53}}}},
                 "serviceMonitor.basicAuth.existingSecret", id="no-scrape-credentials"),
    pytest.param({"networkPolicy": {"enabled": True, "namespaceSelector": None, "podSelector": None}},
                 "networkPolicy.namespaceSelector", id="network-policy-without-peers"),
    pytest.param({"serviceMonitor": {"force": True}, "service": {"enabled": False}}, "service.enabled",
                 id="monitor-without-service"),
    pytest.param({"serviceMonitor": {"force": True}, "web": {"existingConfigSecret": "cfg", "tls": {"enabled": True}}},
                 "set serviceMonitor.tlsConfig", id="https-monitor-without-ca"),
]


@pytest.mark.parametrize(("values", "message"), TEMPLATE_FAILURES)
def test_inconsistent_values_fail_with_a_message_naming_the_fix(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmRenderError) as raised:
        render(values)
    assert message in str(raised.value)


def test_notes_warn_about_risky_settings() -> None:
    risky = render({"containerSecurityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
                    "web": {"basicAuth": {"passwords": {"prometheus": "pw"}}}, "serviceMonitor": {"enabled": False}})
    assert "WARNING: containerSecurityContext grants privileges" in risky.notes
    assert "WARNING: Basic auth without TLS" in risky.notes
    assert "hashed at render time" in risky.notes
    quiet = render({"runtimeClassName": "nvidia"})
    assert "WARNING" not in quiet.notes
    assert "kubectl -n gpu-monitoring port-forward daemonset/gpu-pod-exporter 9400:9400" in quiet.notes
    assert 'DCGM_FI_DEV_GPU_UTIL{pod!=""}' in quiet.notes


def test_prometheusrules_have_the_structure_the_operator_accepts(repo_copy: Path) -> None:
    """Checked on sample rule files: each group has a name and rules, each rule an expr and alert or record."""
    chart = repo_copy / "deploy" / "helm" / "gpu-pod-exporter"
    load_script("sync-chart-files").sync(repo_copy, chart)
    group = {"name": "site", "rules": [{"record": "site:gpu_util:avg", "expr": "avg(DCGM_FI_DEV_GPU_UTIL)"}]}
    rendered = render({"prometheusRule": {"additionalGroups": [group]}}, chart_dir=chart, api_versions=MONITORING_APIS)
    rules = rendered.all("PrometheusRule")
    assert len(rules) == 3
    for rule in rules:
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        assert set(rule["spec"]) == {"groups"}
        names = [group["name"] for group in rule["spec"]["groups"]]
        assert len(names) == len(set(names)), "group names must be unique within one PrometheusRule"
        for each in rule["spec"]["groups"]:
            assert set(each) <= {"name", "interval", "rules", "limit", "query_offset", "labels",
                                 "partial_response_strategy"}
            for item in each["rules"]:
                assert isinstance(item["expr"], str) and item["expr"]
                assert ("alert" in item) != ("record" in item)
                assert set(item) <= {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
