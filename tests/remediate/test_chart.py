"""The chart's remediation objects: off by default, API-valid, least privilege, and routed by a real Alertmanager.

Rendered with Helm's own engine (helm-python-sdk) from ``ci/remediation-values.yaml``; core objects
are checked against the Kubernetes API schemas with kubernetes-validate (strict), the policy
ConfigMap is loaded by the remediator's own loader, and the AlertmanagerConfig is translated the
way the Prometheus Operator does into an Alertmanager configuration that ``amtool`` (Debian's
prometheus-alertmanager) checks and routes test alerts through.
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import Chart, HelmRenderError, HelmValuesError

from exporter.remediate.policy import DEFAULT_ALERTS, AlertPolicy, load_policy
from tests.deploy.chart_support import CHART_DIR, MONITORING_APIS, Rendered, load_ci_values, render
from tests.support.programs import require_program

REMEDIATION_VALUES = CHART_DIR / "ci" / "remediation-values.yaml"
APIS = (*MONITORING_APIS, "monitoring.coreos.com/v1alpha1/AlertmanagerConfig")
NAME = "gpu-pod-exporter-remediate"
KUBERNETES_VERSIONS = ("1.27.0", "1.35.0")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule", "AlertmanagerConfig"}


@pytest.fixture(scope="module")
def enabled() -> Rendered:
    """ci/remediation-values.yaml with the remediator's ServiceMonitor on (the file turns it off for the
    chart-wide tests, which expect one ServiceMonitor per values file)."""
    values = load_ci_values(REMEDIATION_VALUES)
    values["remediation"]["serviceMonitor"] = {"enabled": True}
    return render(values, api_versions=APIS)


def ours(rendered: Rendered) -> list[dict[str, Any]]:
    return [obj for obj in rendered.objects if obj["metadata"].get("labels", {}).get("app.kubernetes.io/component")
            == "remediate"]


def test_it_is_off_by_default_even_where_the_operator_apis_exist() -> None:
    rendered = render(api_versions=APIS)
    assert ours(rendered) == []
    assert not any("remediate" in obj["metadata"]["name"] for obj in rendered.objects)


def test_enabled_it_renders_every_object(enabled: Rendered) -> None:
    assert sorted(obj["kind"] for obj in ours(enabled)) == sorted([
        "AlertmanagerConfig", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy",
        "PrometheusRule", "Secret", "Service", "ServiceAccount", "ServiceMonitor"])
    assert {obj["metadata"]["name"] for obj in ours(enabled)} == {NAME, f"{NAME}-webhook"}


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_the_core_objects_validate_against_the_kubernetes_schemas(enabled: Rendered, version: str) -> None:
    core = [obj for obj in ours(enabled) if obj["kind"] not in CRD_KINDS]
    assert len(core) == 8
    for obj in core:
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']} is invalid for Kubernetes {version}: {exc.message}")


def test_rbac_is_patch_nodes_create_events_get_list_pods_and_nothing_else(enabled: Rendered) -> None:
    role = enabled.one("ClusterRole", NAME)
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
    ]
    binding = enabled.one("ClusterRoleBinding", NAME)
    assert binding["roleRef"]["name"] == NAME
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "gpu-monitoring"}]


def test_one_unprivileged_replica_that_runs_the_subcommand_with_its_policy_and_token(enabled: Rendered) -> None:
    deployment = enabled.one("Deployment", NAME)
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME and pod["automountServiceAccountToken"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    args = container["args"]
    assert args[0] == "remediate"
    assert args[args.index("--config") + 1] == "/etc/gpu-pod-exporter/remediate/policy/policy.yaml"
    assert args[args.index("--bearer-token-file") + 1] == "/etc/gpu-pod-exporter/remediate/webhook/token"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["policy"]["configMap"]["name"] == NAME
    assert volumes["webhook"]["secret"]["secretName"] == f"{NAME}-webhook"
    secret = enabled.one("Secret", f"{NAME}-webhook")
    assert base64.b64decode(secret["data"]["token"]).decode() == "change-me-webhook-token"


def test_the_servicemonitor_scrapes_the_remediator_only(enabled: Rendered) -> None:
    monitor = enabled.one("ServiceMonitor", NAME)
    assert set(monitor["spec"]) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint == {"port": "http", "path": "/metrics", "scheme": "http", "interval": "30s", "honorLabels": False}
    assert monitor["spec"]["selector"]["matchLabels"] == enabled.one("Service", NAME)["spec"]["selector"]
    assert len(enabled.all("ServiceMonitor")) == 2  # and the exporter's own, unchanged
    assert render(load_ci_values(REMEDIATION_VALUES), api_versions=APIS).all("ServiceMonitor") == \
        [m for m in enabled.all("ServiceMonitor") if m["metadata"]["name"] != NAME]


def test_the_exporters_daemonset_and_service_do_not_select_the_remediator(enabled: Rendered) -> None:
    labels = enabled.one("Deployment", NAME)["spec"]["template"]["metadata"]["labels"]
    for selector in (enabled.one("DaemonSet")["spec"]["selector"]["matchLabels"],
                     enabled.one("Service", "gpu-pod-exporter")["spec"]["selector"]):
        assert not all(labels.get(key) == value for key, value in selector.items())
    assert enabled.one("Service", NAME)["spec"]["selector"].items() <= labels.items()


def test_the_policy_configmap_is_what_the_remediator_loads(enabled: Rendered, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(enabled.one("ConfigMap", NAME)["data"]["policy.yaml"], encoding="utf-8")
    policy = load_policy(str(path))
    assert policy.mode == "enforce" and policy.node_label == "Hostname"
    assert set(policy.alerts) == set(DEFAULT_ALERTS)
    assert policy.alerts["GpuXidFatal"] == AlertPolicy()
    assert policy.alerts["GpuFallenOffBus"] == AlertPolicy(
        frozenset({"event", "taint", "annotate", "condition", "cordon"}), "NoSchedule", 1800.0)
    assert (policy.limits.cooldown_s, policy.limits.max_nodes_per_hour, policy.limits.max_tainted_percent) == \
        (600.0, 3, 10.0)


def test_the_default_values_policy_is_the_built_in_one(tmp_path: Path) -> None:
    rendered = render({"remediation": {"enabled": True, "webhook": {"token": "t"}}})
    path = tmp_path / "policy.yaml"
    path.write_text(rendered.one("ConfigMap", NAME)["data"]["policy.yaml"], encoding="utf-8")
    chart, built_in = load_policy(str(path)), load_policy(None)
    assert (chart.mode, dict(chart.alerts), chart.limits) == (built_in.mode, dict(built_in.alerts), built_in.limits)


@pytest.mark.parametrize(("values", "message"), [
    ({"remediation": {"enabled": True}}, "remediation.webhook: set token or existingSecret"),
    ({"remediation": {"enabled": True, "webhook": {"allowUnauthenticated": True}}},
     "remediation.webhook.allowUnauthenticated needs remediation.networkPolicy.enabled"),
    ({"remediation": {"enabled": True, "webhook": {"token": "t"}, "web": {"scheme": "https"}}},
     "remediation.web.scheme https needs remediation.web.existingConfigSecret"),
])
def test_unsafe_or_incomplete_settings_fail_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmRenderError, match=message):
        render(values)


def test_the_schema_refuses_unknown_actions_and_effects() -> None:
    with Chart.load(CHART_DIR) as chart:
        for values, named in [({"remediation": {"mode": "on"}}, "/remediation/mode"),
                              ({"remediation": {"alerts": {"GpuXidFatal": {"actions": ["reboot"]}}}},
                               "/remediation/alerts/GpuXidFatal/actions/0"),
                              ({"remediation": {"alerts": {"GpuXidFatal": {"taintEffect": "NoExec"}}}},
                               "/remediation/alerts/GpuXidFatal/taintEffect"),
                              ({"remediation": {"limits": {"cooldown": "ten minutes"}}},
                               "/remediation/limits/cooldown")]:
            with pytest.raises(HelmValuesError) as raised:
                chart.validate_schema(values)
            assert named in str(raised.value)


# --------------------------------------------------------------------------------- the routing
def operator_translation(config: dict[str, Any], token_file: Path) -> dict[str, Any]:
    """The Alertmanager configuration the Prometheus Operator generates from an AlertmanagerConfig
    (as a sub-route of a catch-all root; matcher strategy None, so no namespace matcher is added)."""
    spec = config["spec"]
    route = spec["route"]
    receivers = []
    for receiver in spec["receivers"]:
        hooks = []
        for hook in receiver["webhookConfigs"]:
            http_config = {}
            if "authorization" in hook.get("httpConfig", {}):
                http_config["authorization"] = {"type": hook["httpConfig"]["authorization"]["type"],
                                                "credentials_file": str(token_file)}
            hooks.append({"url": hook["url"], "send_resolved": hook["sendResolved"],
                          "max_alerts": hook["maxAlerts"], "http_config": http_config})
        receivers.append({"name": receiver["name"], "webhook_configs": hooks})
    sub_route = {"receiver": route["receiver"], "group_by": route["groupBy"], "group_wait": route["groupWait"],
                 "group_interval": route["groupInterval"], "repeat_interval": route["repeatInterval"],
                 "matchers": [f'{m["name"]}{m["matchType"]}"{m["value"]}"' for m in route["matchers"]]}
    return {"route": {"receiver": "null", "routes": [sub_route]},
            "receivers": [{"name": "null"}, *receivers]}


def routes_to(amtool: str, config: Path, **labels: str) -> str:
    answer = subprocess.run([amtool, "config", "routes", "test", f"--config.file={config}",
                             *(f"{key}={value}" for key, value in labels.items())],
                            capture_output=True, text=True, timeout=60, check=True)
    return answer.stdout.strip()


def test_the_alertmanagerconfig_routes_exactly_the_allowlisted_alerts(enabled: Rendered, tmp_path: Path) -> None:
    amtool = require_program("amtool")
    config = enabled.one("AlertmanagerConfig", NAME)
    assert config["apiVersion"] == "monitoring.coreos.com/v1alpha1"
    # kubernetes-validate has no CRD schemas: the fields the operator's v1alpha1 CRD defines.
    assert set(config["spec"]) <= {"route", "receivers", "inhibitRules", "muteTimeIntervals"}
    assert set(config["spec"]["route"]) <= {"receiver", "groupBy", "groupWait", "groupInterval", "repeatInterval",
                                            "matchers", "continue", "routes", "muteTimeIntervals",
                                            "activeTimeIntervals"}
    for matcher in config["spec"]["route"]["matchers"]:
        assert set(matcher) <= {"name", "value", "matchType", "regex"} and matcher["matchType"] in {"=", "!=", "=~",
                                                                                                   "!~"}
    [hook] = config["spec"]["receivers"][0]["webhookConfigs"]
    assert hook["url"] == f"http://{NAME}.gpu-monitoring.svc:9401/alerts"
    assert hook["sendResolved"] is True and hook["maxAlerts"] == 0
    assert set(hook) <= {"url", "urlSecret", "sendResolved", "maxAlerts", "httpConfig", "timeout"}
    assert set(hook["httpConfig"]) <= {"authorization", "basicAuth", "tlsConfig", "bearerTokenSecret", "oauth2"}
    assert hook["httpConfig"]["authorization"]["credentials"] == {"name": f"{NAME}-webhook", "key": "token"}
    token = tmp_path / "token"
    token.write_text("t", encoding="utf-8")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(operator_translation(config, token)), encoding="utf-8")
    subprocess.run([amtool, "check-config", str(path)], capture_output=True, check=True, timeout=60)
    for alert in DEFAULT_ALERTS:
        assert routes_to(amtool, path, alertname=alert, Hostname="n", namespace="ml") == NAME
    for alert in ("GpuXidNeedsReset", "GpuTemperatureHigh", "GpuXidFatalish", "XGpuXidFatal"):
        assert routes_to(amtool, path, alertname=alert, Hostname="n") == "null"


def test_the_remediators_own_alerts_are_valid_rules(enabled: Rendered, tmp_path: Path) -> None:
    promtool = require_program("promtool")
    rules = enabled.one("PrometheusRule", NAME)["spec"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules), encoding="utf-8")
    subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, check=True, timeout=60)
    names = [rule["alert"] for group in rules["groups"] for rule in group["rules"]]
    assert names == ["GpuRemediationBreakerOpen", "GpuRemediationFailing", "GpuRemediationDown"]
    docs = (Path(__file__).resolve().parents[2] / "docs" / "remediation.md").read_text(encoding="utf-8").lower()
    for name in names:  # every runbook_url anchor exists
        assert f"### {name.lower()}" in docs


def test_drain_hand_off_and_validation_add_exactly_their_permissions_and_the_crd(tmp_path: Path) -> None:
    values = load_ci_values(REMEDIATION_VALUES)
    values["remediation"].update({
        "cluster": "prod-a",
        "drain": {"enabled": True, "mode": "evict", "namespaces": {"batch": "allow-completion"}, "deadline": "30m"},
        "repairRequest": {"enabled": True},
        "validation": {"image": "registry.example/gpu-diag:1", "command": ["dcgmi", "diag", "-r", "2"]}})
    rendered = render(values, api_versions=APIS)
    role = rendered.one("ClusterRole", NAME)
    assert role["rules"][4:] == [
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["remediation.gpu-pod-exporter.io"], "resources": ["gpurepairrequests"], "verbs": ["create"]},
    ]
    jobs = rendered.one("Role", f"{NAME}-validation")
    assert jobs["metadata"]["namespace"] == "gpu-monitoring"
    assert jobs["rules"] == [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get"]}]
    binding = rendered.one("RoleBinding", f"{NAME}-validation")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": "gpu-monitoring"}]
    crd = rendered.one("CustomResourceDefinition", "gpurepairrequests.remediation.gpu-pod-exporter.io")
    assert crd["spec"]["scope"] == "Cluster" and crd["spec"]["names"]["kind"] == "GpuRepairRequest"
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["required"] == ["nodeName", "requestedAt", "gpus", "evidence"]
    for obj in (role, jobs, binding, crd):
        kubernetes_validate.validate(obj, KUBERNETES_VERSIONS[-1], strict=True)
    # The policy the chart writes is the one the remediator loads.
    path = tmp_path / "policy.yaml"
    path.write_text(rendered.one("ConfigMap", NAME)["data"]["policy.yaml"], encoding="utf-8")
    policy = load_policy(str(path))
    assert policy.cluster == "prod-a" and policy.repair_request is True
    assert policy.drain is not None and policy.drain.mode == "evict" and policy.drain.deadline_s == 1800
    assert dict(policy.drain.namespaces) == {"batch": "allow-completion"}
    assert policy.validation is not None and policy.validation.namespace == "gpu-monitoring"
    assert policy.validation.command == ("dcgmi", "diag", "-r", "2")


def test_without_drain_hand_off_or_validation_none_of_their_permissions_exist(enabled: Rendered) -> None:
    kinds = {obj["kind"] for obj in enabled.objects}
    assert "CustomResourceDefinition" not in kinds and "Role" not in kinds
    verbs = {(tuple(r["resources"]), tuple(r["verbs"])) for r in enabled.one("ClusterRole", NAME)["rules"]}
    assert (("pods/eviction",), ("create",)) not in verbs


def test_device_taints_add_exactly_the_dra_permissions_and_the_policy_key(tmp_path: Path) -> None:
    """remediation.deviceTaints.enabled: list ResourceSlices, and create (server-side apply creates), patch, list and
    delete DeviceTaintRules; nothing else, and the policy the remediator loads says device_taints."""
    values = load_ci_values(REMEDIATION_VALUES)
    values["remediation"]["deviceTaints"] = {"enabled": True}
    rendered = render(values, api_versions=APIS)
    role = rendered.one("ClusterRole", NAME)
    assert role["rules"][4:] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"],
         "verbs": ["list", "create", "patch", "delete"]},
    ]
    kubernetes_validate.validate(role, KUBERNETES_VERSIONS[-1], strict=True)
    path = tmp_path / "policy.yaml"
    path.write_text(rendered.one("ConfigMap", NAME)["data"]["policy.yaml"], encoding="utf-8")
    assert load_policy(str(path)).device_taints is True
    default = render(load_ci_values(REMEDIATION_VALUES), api_versions=APIS).one("ClusterRole", NAME)
    assert not any("resource.k8s.io" in rule["apiGroups"] for rule in default["rules"])

