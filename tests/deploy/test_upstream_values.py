"""A values file written for dcgm-exporter's chart renders here, and each of its keys does what it did there.

Every release's values file as released (upstream/dcgm-exporter/, written into the chart's ci/ directory as
dcgm-exporter-<release>-values.yaml) and one customised file are in ci/, so `helm lint` and the
Kubernetes-schema validation of every scenario (test_chart_validation.py) run on them too; here: the objects
validate, what each dcgm-exporter key became, and the exporter started with the rendered arguments and
environment serves with that release's node label.
"""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from exporter.config import load_config
from tests.deploy.chart_support import CHART_DIR, MONITORING_APIS, Rendered, load_ci_values, render
from tests.support.exporter_process import running_exporter
from upstream.matrix import releases

RELEASES = {record["release"]: record for record in releases()}
RELEASE_VALUES = {release: CHART_DIR / "ci" / f"dcgm-exporter-{release}-values.yaml" for release in RELEASES}
DEFAULTS = RELEASE_VALUES["4.5.3-4.8.2"]  # the last release before the node label was renamed
CUSTOMISED = CHART_DIR / "ci" / "dcgm-exporter-customised-values.yaml"


@pytest.fixture(scope="module")
def defaults() -> Rendered:
    return render(load_ci_values(DEFAULTS), api_versions=MONITORING_APIS)


@pytest.fixture(scope="module")
def customised() -> Rendered:
    return render(load_ci_values(CUSTOMISED), api_versions=MONITORING_APIS)


@pytest.mark.parametrize("values_file", [*RELEASE_VALUES.values(), CUSTOMISED], ids=[*RELEASE_VALUES, "customised"])
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


# --- every release's chart as released: its new keys, the release to match, series identity ----------------


def test_the_values_files_in_ci_are_each_releases_values_as_released() -> None:
    for release, path in RELEASE_VALUES.items():
        assert load_ci_values(path) == RELEASES[release]["chart"]["values"], release


@pytest.fixture(scope="module", params=sorted(RELEASES), ids=sorted(RELEASES))
def as_released(request: pytest.FixtureRequest) -> tuple[str, Rendered]:
    return request.param, render(load_ci_values(RELEASE_VALUES[request.param]), api_versions=MONITORING_APIS)


def test_each_releases_values_match_that_release_and_say_so(as_released: tuple[str, Rendered]) -> None:
    release, rendered = as_released
    version = RELEASES[release]["exporter_version"]
    assert rendered.env["GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT"] == version  # from the image tag
    spelling = "hostname" if version >= "4.8.3" else "Hostname"
    assert (f"dcgm-exporter {version} behaviour (GPU_POD_EXPORTER_DCGM_EXPORTER_COMPAT): the node label is "
            f"{spelling}") in rendered.notes
    assert rendered.container["image"] == "ghcr.io/gpu-pod-exporter/gpu-pod-exporter:0.1.0"
    assert "every flag of dcgm-exporter up to 4.6.1-4.8.4 is accepted" in rendered.notes or \
        not RELEASES[release]["chart"]["values"]["arguments"]


def test_config_disabled_as_released_renders_no_configmap_and_no_variable(as_released: tuple[str, Rendered]) -> None:
    """4.8.3 and 4.8.4 ship config.enabled: false with a sample config.data: nothing of it may reach the pod."""
    _release, rendered = as_released
    assert "DCGM_EXPORTER_CONFIG_FILE" not in rendered.env
    assert "dcgm-exporter-config" not in rendered.volumes
    assert not [obj for obj in rendered.all("ConfigMap") if "dcgm-exporter-config" in obj["metadata"]["name"]]


def test_a_null_automount_token_is_accepted_and_the_token_mounted_only_when_the_api_is_read() -> None:
    values = load_ci_values(RELEASE_VALUES["4.6.1-4.8.4"])
    assert values["serviceAccount"]["automountServiceAccountToken"] is None  # the key with no value, as released
    rendered = render(values, api_versions=MONITORING_APIS)
    assert rendered.pod_spec["automountServiceAccountToken"] is True  # this chart's -k reads the API
    assert "automountServiceAccountToken" not in rendered.notes  # null: nothing was asked, nothing to say
    without_api = render(values | {"kubernetes": {"enabled": False}}, api_versions=MONITORING_APIS)
    assert without_api.pod_spec["automountServiceAccountToken"] is False
    values["serviceAccount"]["automountServiceAccountToken"] = False
    rendered = render(values, api_versions=MONITORING_APIS)
    assert rendered.pod_spec["automountServiceAccountToken"] is True
    assert "still true while the exporter reads the Kubernetes API" in rendered.notes


def test_config_enabled_mounts_upstreams_file_where_its_chart_did_and_the_exporter_reads_it(tmp_path: Path) -> None:
    values = load_ci_values(RELEASE_VALUES["4.6.1-4.8.4"])
    values["config"]["enabled"] = True
    rendered = render(values, api_versions=MONITORING_APIS)
    config = rendered.one("ConfigMap", "gpu-pod-exporter-dcgm-exporter-config")
    assert config["data"] == {"config.yaml": values["config"]["data"]}
    assert rendered.env["DCGM_EXPORTER_CONFIG_FILE"] == "/etc/dcgm-exporter/config.yaml"
    mount = rendered.mounts["dcgm-exporter-config"]
    assert (mount["mountPath"], mount["subPath"]) == ("/etc/dcgm-exporter/config.yaml", "config.yaml")
    assert "config -> ConfigMap gpu-pod-exporter-dcgm-exporter-config (key config.yaml)" in rendered.notes
    # The file as released (version 2, with its comment line) loads in the exporter.
    path = tmp_path / "config.yaml"
    path.write_text(config["data"]["config.yaml"], encoding="utf-8")
    loaded = load_config(["--config-file", str(path)], {})
    assert loaded.collect_interval_ms == 30000 and loaded.enable_gpu_bind_unbind_watch is False
    # create: false reads the user's own ConfigMap under config.name.
    values["config"] |= {"create": False, "name": "my-dcgm-config"}
    rendered = render(values, api_versions=MONITORING_APIS)
    assert rendered.volumes["dcgm-exporter-config"]["configMap"]["name"] == "my-dcgm-config"
    assert not [obj for obj in rendered.all("ConfigMap") if "dcgm-exporter-config" in obj["metadata"]["name"]]


def test_an_upstream_image_digest_never_pins_this_image() -> None:
    digest = "sha256:" + "1" * 64
    values = load_ci_values(RELEASE_VALUES["4.6.1-4.8.4"])
    values["image"]["digest"] = digest
    rendered = render(values, api_versions=MONITORING_APIS)
    assert rendered.container["image"] == "ghcr.io/gpu-pod-exporter/gpu-pod-exporter:0.1.0"
    assert (f"image.digest {digest} pins dcgm-exporter's image and is not used: the chart runs "
            "ghcr.io/gpu-pod-exporter/gpu-pod-exporter:0.1.0") in rendered.notes
    ours = render({"image": {"repository": "gpu-pod-exporter/gpu-pod-exporter", "digest": digest}})
    assert ours.container["image"].endswith(f"gpu-pod-exporter/gpu-pod-exporter@{digest}")


def test_daemonset_annotations_of_4_8_4_annotate_the_daemonset() -> None:
    values = load_ci_values(RELEASE_VALUES["4.6.1-4.8.4"])
    values["daemonSetAnnotations"] = {"example.com/owner": "gpu-team"}
    rendered = render(values, api_versions=MONITORING_APIS)
    assert rendered.one("DaemonSet")["metadata"]["annotations"] == {"example.com/owner": "gpu-team"}


@pytest.mark.e2e
@pytest.mark.parametrize("release", sorted(RELEASES))
def test_the_exporter_started_with_the_rendered_args_and_env_serves_that_releases_label(release: str) -> None:
    """The container as the kubelet would start it: the rendered args, every plain env value, NODE_NAME from
    the downward API; the image's counters path is served from the package's copy; only the listen port and
    --simulate (no GPU here) are added."""
    rendered = render(load_ci_values(RELEASE_VALUES[release]), api_versions=MONITORING_APIS)
    env = {name: value for name, value in rendered.env.items() if isinstance(value, str)}
    env |= {"NODE_NAME": "hgx-node-01"}
    env.pop("DCGM_EXPORTER_LISTEN")
    env["DCGM_EXPORTER_COLLECTORS"] = "/etc/dcgm-exporter/default-counters.csv"  # mounted from the ConfigMap there
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith(("DCGM_", "GPU_POD_EXPORTER_", "KUBERNETES_", "NVIDIA_"))}
    with running_exporter([*rendered.container.get("args", []), "--simulate"], {**environ, **env}) as exporter:
        exporter.wait_healthy(deadline_s=60)
        spelling = "hostname" if RELEASES[release]["exporter_version"] >= "4.8.3" else "Hostname"
        other = "Hostname" if spelling == "hostname" else "hostname"
        temps = exporter.samples("DCGM_FI_DEV_GPU_TEMP")
        assert temps and all(labels.get(spelling) == "hgx-node-01" and other not in labels for labels, _ in temps)


def test_the_compatibility_value_wins_over_the_image_tag() -> None:
    values = load_ci_values(RELEASE_VALUES["4.6.0-4.8.3"])
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
    """The labels the Prometheus Operator gives every series scraped through the ServiceMonitor that survive
    its relabelings (pod and instance change with every pod anyway): job, service, endpoint, and namespace
    and container unless the ServiceMonitor drops them (this chart's default, dropTargetWorkloadLabels)."""
    monitor = rendered.one("ServiceMonitor")
    service = rendered.one("Service")
    [endpoint] = monitor["spec"]["endpoints"]
    job_label = monitor["spec"].get("jobLabel")
    job = service["metadata"]["labels"][job_label] if job_label else service["metadata"]["name"]
    [container] = [c["name"] for c in rendered.pod_spec["containers"]
                   if endpoint["port"] in {port.get("name") for port in c.get("ports", [])}]
    assert service["spec"]["selector"].items() <= rendered.one("DaemonSet")["spec"]["template"]["metadata"][
        "labels"].items()
    labels = {"job": job, "service": service["metadata"]["name"], "endpoint": endpoint["port"],
              "namespace": monitor["metadata"]["namespace"], "container": container}
    for relabel in endpoint.get("relabelings", []):
        if relabel.get("action") == "labeldrop":
            labels = {name: value for name, value in labels.items() if not re.fullmatch(relabel["regex"], name)}
    return labels


# What dcgm-exporter's chart gives a release named dcgm-exporter in gpu-monitoring (its templates: Service
# and ServiceMonitor named by its fullname, which is the release name when that contains "dcgm-exporter";
# port "metrics"; no jobLabel), for every release. Its namespace and container target labels name the
# exporter pod; this chart's ServiceMonitor drops them (the guide says so, "Series identity on a Helm swap").
UPSTREAM_TARGET_LABELS = {"job": "dcgm-exporter", "service": "dcgm-exporter", "endpoint": "metrics"}


@pytest.mark.parametrize("values_file", [*RELEASE_VALUES.values(), CUSTOMISED], ids=[*RELEASE_VALUES, "customised"])
def test_a_helm_swap_with_name_override_keeps_job_service_and_endpoint(values_file: Any) -> None:
    values = load_ci_values(values_file) | {"nameOverride": "dcgm-exporter"}
    rendered = render(values, api_versions=MONITORING_APIS, name="dcgm-exporter")
    assert _target_labels(rendered) == UPSTREAM_TARGET_LABELS
    values["serviceMonitor"] = values["serviceMonitor"] | {"dropTargetWorkloadLabels": False}
    kept = _target_labels(render(values, api_versions=MONITORING_APIS, name="dcgm-exporter"))
    assert kept == UPSTREAM_TARGET_LABELS | {"namespace": "gpu-monitoring", "container": "exporter"}
    names = {obj["metadata"]["name"] for obj in rendered.objects if obj["kind"] in {"DaemonSet", "Service",
                                                                                     "ServiceMonitor"}}
    assert names == {"dcgm-exporter"}
    labels = rendered.one("DaemonSet")["metadata"]["labels"]
    assert (labels["app.kubernetes.io/name"], labels["app.kubernetes.io/instance"]) == ("dcgm-exporter",
                                                                                        "dcgm-exporter")


def test_without_the_override_the_job_label_changes_as_the_guide_warns() -> None:
    rendered = render(load_ci_values(DEFAULTS), api_versions=MONITORING_APIS, name="dcgm-exporter")
    assert _target_labels(rendered)["job"] == "dcgm-exporter-gpu-pod-exporter"
