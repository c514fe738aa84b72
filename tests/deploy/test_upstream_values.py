"""A values file written for dcgm-exporter's chart renders here, and each of its keys does what it did there.

The two files are in the chart's ci/ directory, so `helm lint` and the Kubernetes-schema validation of
every scenario (test_chart_validation.py) run on them too; here: the objects validate, and what each
dcgm-exporter key became.
"""

from __future__ import annotations

import base64
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from tests.deploy.chart_support import CHART_DIR, MONITORING_APIS, Rendered, load_ci_values, render

DEFAULTS = CHART_DIR / "ci" / "dcgm-exporter-defaults-values.yaml"
CUSTOMISED = CHART_DIR / "ci" / "dcgm-exporter-customised-values.yaml"


@pytest.fixture(scope="module")
def defaults() -> Rendered:
    return render(load_ci_values(DEFAULTS), api_versions=MONITORING_APIS)


@pytest.fixture(scope="module")
def customised() -> Rendered:
    return render(load_ci_values(CUSTOMISED), api_versions=MONITORING_APIS)


@pytest.mark.parametrize("values_file", [DEFAULTS, CUSTOMISED], ids=["defaults", "customised"])
def test_an_upstream_values_file_renders_objects_kubernetes_accepts(values_file: Any) -> None:
    rendered = render(load_ci_values(values_file), api_versions=MONITORING_APIS)
    for obj in rendered.objects:
        if obj["kind"] in {"ServiceMonitor", "PrometheusRule"}:
            continue
        try:
            kubernetes_validate.validate(obj, "1.35.0", strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")


def test_dcgm_exporters_image_is_replaced_by_ours_and_its_arguments_pass_through(defaults: Rendered) -> None:
    assert defaults.container["image"] == "ghcr.io/gpu-pod-exporter/gpu-pod-exporter:0.1.0"
    assert defaults.container["args"] == ["-f", "/etc/dcgm-exporter/default-counters.csv"]
    assert "image.repository nvcr.io/nvidia/k8s/dcgm-exporter is dcgm-exporter's image" in defaults.notes


def test_its_counters_configmap_exists_with_the_charts_csv_and_is_mounted_where_it_was(defaults: Rendered) -> None:
    upstream = defaults.one("ConfigMap", "exporter-metrics-config-map")
    ours = defaults.one("ConfigMap", "gpu-pod-exporter-counters")
    assert upstream["data"]["metrics"] == ours["data"]["counters.csv"]
    assert defaults.volumes["exporter-metrics-volume"]["configMap"]["name"] == "exporter-metrics-config-map"
    mount = defaults.mounts["exporter-metrics-volume"]
    assert (mount["mountPath"], mount["subPath"]) == ("/etc/dcgm-exporter/default-counters.csv",
                                                      "default-counters.csv")


def test_its_securitycontext_merges_without_the_capability_only_dcgm_needed(defaults: Rendered) -> None:
    context = defaults.container["securityContext"]
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsUser"] == 0 and context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True  # ours, which dcgm-exporter's file does not mention
    assert "capabilities.add and privileged dropped" in defaults.notes


def test_service_rbac_rolling_update_kubelet_path_and_probes(defaults: Rendered) -> None:
    assert defaults.env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert defaults.one("Service")["spec"]["ports"][0]["port"] == 9400
    assert defaults.one("DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1,
                                                                                    "maxSurge": 0}
    assert defaults.volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    assert defaults.one("ClusterRole")["rules"]
    assert defaults.container["livenessProbe"]["initialDelaySeconds"] == 45
    assert "hostPID" not in defaults.pod_spec
    monitor = defaults.one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is False  # its value, and a warning saying what it does
    assert "honorLabels=false" in defaults.notes
    assert "debugDump is ignored" not in defaults.notes  # off in the file: nothing to say


def test_customised_values_map_onto_ours(customised: Rendered) -> None:
    assert customised.container["image"] == "registry.example.com/gpu-pod-exporter/gpu-pod-exporter:0.1.0"
    assert customised.pod_spec["imagePullSecrets"] == [{"name": "mirror-pull"}, {"name": "second-pull"}]
    assert customised.pod_spec["hostPID"] is True
    assert customised.pod_spec["initContainers"][0]["name"] == "wait"
    assert customised.volumes["pod-resources"]["hostPath"]["path"] == (
        "/var/snap/microk8s/common/var/lib/kubelet/pod-resources")
    assert customised.volumes["host-binaries"] == {"name": "host-binaries", "hostPath": {"path": "/opt/bin"}}
    assert customised.container["ports"][0]["containerPort"] == 9500
    assert customised.env["DCGM_EXPORTER_LISTEN"] == ":9500"
    assert customised.one("DaemonSet")["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 2
    csv = customised.one("ConfigMap", "gpu-pod-exporter-counters")["data"]["counters.csv"]
    assert csv.splitlines()[0].startswith("DCGM_FI_DEV_GPU_TEMP")
    assert customised.env["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert customised.env["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"] == "^app$"
    for line in ("debugDump is ignored", "kubernetesDRA.enabled -> DRA-allocated GPUs", "global.imageRegistry"):
        assert line in customised.notes


def test_tls_is_served_from_a_generated_certificate_prometheus_can_verify(customised: Rendered) -> None:
    secret = customised.one("Secret", "gpu-pod-exporter-tls")
    certificate = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(
        x509.DNSName)
    assert "gpu-pod-exporter.gpu-monitoring.svc" in names
    assert customised.volumes["tls"]["secret"]["secretName"] == "gpu-pod-exporter-tls"
    endpoint = customised.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"]["ca"]["secret"] == {"name": "gpu-pod-exporter-tls", "key": "ca.crt"}
    assert endpoint["tlsConfig"]["serverName"] == "gpu-pod-exporter.gpu-monitoring.svc"


def test_basic_auth_users_become_ours_and_prometheus_gets_credentials(customised: Rendered) -> None:
    secret = customised.one("Secret", "gpu-pod-exporter-web-config")
    config = yaml.safe_load(base64.b64decode(secret["data"]["web-config.yml"]))
    assert set(config["basic_auth_users"]) == {"scraper"}
    credentials = customised.one("Secret", "gpu-pod-exporter-scrape-credentials")["data"]
    assert base64.b64decode(credentials["username"]).decode() == "scraper"
    assert base64.b64decode(credentials["password"]).decode() == "scrape-secret"
    assert "tcpSocket" in customised.container["readinessProbe"]  # the kubelet sends no credentials


def test_configmap_flag_gets_exactly_the_rbac_it_needs(customised: Rendered) -> None:
    role = customised.one("Role", "gpu-pod-exporter-read-counters")
    assert role["metadata"]["namespace"] == "gpu-monitoring"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": ["exporter-metrics-config-map"], "verbs": ["get"]}]
    binding = customised.one("RoleBinding", "gpu-pod-exporter-read-counters")
    assert binding["subjects"][0]["name"] == "gpu-pod-exporter"
    assert customised.pod_spec["automountServiceAccountToken"] is True
    customised.one("ConfigMap", "exporter-metrics-config-map")  # dcgm-exporter's chart always creates it


def test_configmap_flag_without_kubernetes_still_mounts_the_token() -> None:
    rendered = render({"kubernetes": {"enabled": False}, "extraArgs": ["--configmap-data=ml:counters"]})
    assert rendered.pod_spec["automountServiceAccountToken"] is True
    assert rendered.one("Role")["metadata"]["namespace"] == "ml"
    assert "ClusterRole" not in rendered.kinds()


# --- dcgm-exporter 4.8.3's chart, the compatibility setting and series identity on a Helm swap -------------

GEN_4_8_3 = CHART_DIR / "ci" / "dcgm-exporter-4.8.3-values.yaml"


@pytest.fixture(scope="module")
def gen_4_8_3() -> Rendered:
    return render(load_ci_values(GEN_4_8_3), api_versions=MONITORING_APIS)


def test_a_4_8_2_values_file_keeps_the_hostname_label_of_4_8_2(defaults: Rendered) -> None:
    assert "GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT" not in defaults.env  # the exporter's default: Hostname


def test_a_4_8_3_values_file_gets_4_8_3_behaviour_and_its_new_keys_work(gen_4_8_3: Rendered) -> None:
    assert gen_4_8_3.env["GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT"] == "4.8.3"  # from the image tag
    assert "dcgm-exporter 4.8.3 behaviour (GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT): the node label is hostname" \
        in gen_4_8_3.notes
    assert gen_4_8_3.container["args"] == ["--web-read-timeout=10s", "--web-write-timeout=30s"]
    config = gen_4_8_3.one("ConfigMap", "gpu-pod-exporter-dcgm-exporter-config")
    assert yaml.safe_load(config["data"]["config.yaml"]) == {
        "version": 1, "metrics": {"file": "/etc/dcgm-exporter/default-counters.csv"},
        "collection": {"interval": 30000}}
    path = gen_4_8_3.env["DCGM_EXPORTER_CONFIG_FILE"]
    mount = gen_4_8_3.mounts["dcgm-exporter-config"]
    assert path == f"{mount['mountPath']}/config.yaml"
    assert gen_4_8_3.volumes["dcgm-exporter-config"]["configMap"]["name"] == config["metadata"]["name"]
    assert gen_4_8_3.pod_spec["automountServiceAccountToken"] is True  # -k reads the API; false cannot stop that
    for obj in gen_4_8_3.objects:
        if obj["kind"] not in {"ServiceMonitor", "PrometheusRule"}:
            kubernetes_validate.validate(obj, "1.35.0", strict=True)


def test_the_compatibility_value_wins_over_the_image_tag() -> None:
    values = load_ci_values(GEN_4_8_3)
    values["exporter"] = {"dcgmExporterCompat": "4.8.2"}
    assert render(values).env["GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT"] == "4.8.2"
    values = load_ci_values(DEFAULTS)
    values["exporter"] = {"dcgmExporterCompat": "4.8.3"}
    assert render(values).env["GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT"] == "4.8.3"


def test_service_enable_false_renders_with_upstreams_default_servicemonitor() -> None:
    values = load_ci_values(DEFAULTS)
    values["service"]["enable"] = False
    assert values["serviceMonitor"]["enabled"] is True  # dcgm-exporter's default
    rendered = render(values, api_versions=MONITORING_APIS)
    assert "Service" not in rendered.kinds()
    assert "ServiceMonitor" not in rendered.kinds()
    assert "serviceMonitor.enabled is ignored with service.enable false" in rendered.notes


def _target_labels(rendered: Rendered) -> dict[str, str]:
    """The labels the Prometheus Operator gives every series scraped through the ServiceMonitor (apart from
    pod and instance, which change with every pod anyway): job, service, endpoint, namespace, container."""
    monitor = rendered.one("ServiceMonitor")
    service = rendered.one("Service")
    [endpoint] = monitor["spec"]["endpoints"]
    job_label = monitor["spec"].get("jobLabel")
    job = service["metadata"]["labels"][job_label] if job_label else service["metadata"]["name"]
    [container] = [c["name"] for c in rendered.pod_spec["containers"]
                   if endpoint["port"] in {port.get("name") for port in c.get("ports", [])}]
    assert service["spec"]["selector"].items() <= rendered.one("DaemonSet")["spec"]["template"]["metadata"][
        "labels"].items()
    return {"job": job, "service": service["metadata"]["name"], "endpoint": endpoint["port"],
            "namespace": monitor["metadata"]["namespace"], "container": container}


# What dcgm-exporter's chart gives a release named dcgm-exporter in gpu-monitoring (its templates: Service
# and ServiceMonitor named by its fullname, which is the release name when that contains "dcgm-exporter";
# port "metrics"; container "exporter"; no jobLabel), for both generations.
UPSTREAM_TARGET_LABELS = {"job": "dcgm-exporter", "service": "dcgm-exporter", "endpoint": "metrics",
                          "namespace": "gpu-monitoring", "container": "exporter"}


@pytest.mark.parametrize("values_file", [DEFAULTS, CUSTOMISED, GEN_4_8_3], ids=["4.8.2", "customised", "4.8.3"])
def test_a_helm_swap_with_name_override_keeps_every_target_label(values_file: Any) -> None:
    values = load_ci_values(values_file) | {"nameOverride": "dcgm-exporter"}
    rendered = render(values, api_versions=MONITORING_APIS, name="dcgm-exporter")
    assert _target_labels(rendered) == UPSTREAM_TARGET_LABELS
    names = {obj["metadata"]["name"] for obj in rendered.objects if obj["kind"] in {"DaemonSet", "Service",
                                                                                     "ServiceMonitor"}}
    assert names == {"dcgm-exporter"}
    labels = rendered.one("DaemonSet")["metadata"]["labels"]
    assert (labels["app.kubernetes.io/name"], labels["app.kubernetes.io/instance"]) == ("dcgm-exporter",
                                                                                        "dcgm-exporter")


def test_without_the_override_the_job_label_changes_as_the_guide_warns() -> None:
    rendered = render(load_ci_values(DEFAULTS), api_versions=MONITORING_APIS, name="dcgm-exporter")
    assert _target_labels(rendered)["job"] == "dcgm-exporter-gpu-pod-exporter"
