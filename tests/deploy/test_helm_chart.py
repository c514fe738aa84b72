"""What the Helm chart deploys, for the value combinations users run (rendered by Helm's engine)."""

from __future__ import annotations

import base64
from typing import Any

import bcrypt
import pytest
import yaml

from exporter.config import CONFIG_FILE_ENV, OPTIONS, Config
from tests.deploy.chart_support import CI_VALUES, MONITORING_APIS, NAMESPACE, Rendered, load_ci_values, render

# Variables the NVIDIA container runtime reads (not the exporter).
RUNTIME_ENV = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES"}
EXPORTER_ENV = {option.env for option in OPTIONS if option.env} | {CONFIG_FILE_ENV}


def ci(name: str, **extra: Any) -> Rendered:
    values = load_ci_values(next(path for path in CI_VALUES if path.name == f"{name}-values.yaml"))
    return render(values, **extra)


def web_config(rendered: Rendered) -> dict[str, Any]:
    secret = rendered.one("Secret", "gpu-pod-exporter-web-config")
    config: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["web-config.yml"]))
    return config


def secret_text(secret: dict[str, Any], key: str) -> str:
    return base64.b64decode(secret["data"][key]).decode()


# --- every scenario -----------------------------------------------------------------------------


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda path: path.name.removesuffix("-values.yaml"))
def test_every_scenario_configures_the_exporter_only_through_variables_it_declares(values_file: Any) -> None:
    rendered = render(load_ci_values(values_file), api_versions=MONITORING_APIS)
    unknown = set(rendered.env) - EXPORTER_ENV - RUNTIME_ENV
    assert not unknown, f"the chart sets variables exporter/config.py does not declare: {sorted(unknown)}"


@pytest.mark.parametrize("values_file", CI_VALUES, ids=lambda path: path.name.removesuffix("-values.yaml"))
def test_every_scenario_stays_unprivileged(values_file: Any) -> None:
    rendered = render(load_ci_values(values_file))
    context = rendered.container["securityContext"]
    assert context["privileged"] is False
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "hostIPC" not in rendered.pod_spec


# --- defaults -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def default() -> Rendered:
    return render()


def test_default_env_sets_node_name_nvidia_runtime_and_kubernetes_mode(default: Rendered) -> None:
    env = default.env
    assert env["NODE_NAME"] == {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
    assert env["DCGM_EXPORTER_LISTEN"] == ":9400"
    assert env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert env["GPU_POD_EXPORTER_PROCESS_ATTRIBUTION"] == "false"
    assert "GPU_POD_EXPORTER_PROC_ROOT" not in env
    assert "DCGM_EXPORTER_WEB_CONFIG_FILE" not in env
    assert "GPU_POD_EXPORTER_SIMULATE" not in env


def test_default_env_values_equal_the_exporters_own_defaults(default: Rendered) -> None:
    """The chart spells every setting out; it must not silently change the exporter's behaviour."""
    by_env = {option.env: option for option in OPTIONS if option.env}
    checked = 0
    for name, value in default.env.items():
        option = by_env.get(name)
        if option is None or name in {"NODE_NAME", "DCGM_EXPORTER_KUBERNETES", "DCGM_EXPORTER_COLLECTORS"}:
            continue  # chart-specific on purpose: downward API, k8s mode on, the mounted CSV
        parsed = option.parse(value)
        assert parsed == getattr(Config(), option.attr), f"{name}={value!r} differs from the exporter default"
        checked += 1
    assert checked >= 10


def test_mig_chip_series_is_per_instance_by_default_and_once_on_request(default: Rendered) -> None:
    """exporter.migChipSeries reaches the exporter as GPU_POD_EXPORTER_MIG_CHIP_SERIES; the schema refuses others."""
    assert default.env["GPU_POD_EXPORTER_MIG_CHIP_SERIES"] == "per-instance"
    assert render({"exporter": {"migChipSeries": "once"}}).env["GPU_POD_EXPORTER_MIG_CHIP_SERIES"] == "once"
    with pytest.raises(Exception, match="migChipSeries"):
        render({"exporter": {"migChipSeries": "twice"}})


def test_default_mounts_the_pod_resources_directory_not_the_socket(default: Rendered) -> None:
    volume = default.volumes["pod-resources"]
    assert volume["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    mount = default.mounts["pod-resources"]
    assert mount["mountPath"] == "/var/lib/kubelet/pod-resources"
    assert "subPath" not in mount
    socket = default.env["DCGM_POD_RESOURCES_KUBELET_SOCKET"]
    assert socket.startswith(mount["mountPath"] + "/")


def test_default_mounts_the_counters_configmap_as_a_directory(default: Rendered) -> None:
    configmap = default.one("ConfigMap", "gpu-pod-exporter-counters")
    assert default.volumes["counters"]["configMap"]["name"] == "gpu-pod-exporter-counters"
    mount = default.mounts["counters"]
    assert "subPath" not in mount
    collectors = default.env["DCGM_EXPORTER_COLLECTORS"]
    assert collectors == f"{mount['mountPath']}/counters.csv"
    csv = (default_counters := configmap["data"]["counters.csv"])
    assert "DCGM_FI_DEV_GPU_UTIL" in csv
    with open("exporter/metrics/data/default-counters.csv", encoding="utf-8") as source:
        assert default_counters == source.read()


def test_default_does_not_share_host_namespaces(default: Rendered) -> None:
    spec = default.pod_spec
    assert "hostPID" not in spec
    assert "hostNetwork" not in spec
    assert "host-proc" not in default.volumes
    # read-only root filesystem: /tmp is the only writable path
    assert default.volumes["tmp"]["emptyDir"]


def test_default_runs_as_root_without_capabilities_because_of_the_kubelet_socket(default: Rendered) -> None:
    assert default.pod_spec["securityContext"] == {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}
    assert default.container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert default.pod_spec["automountServiceAccountToken"] is True


def test_default_probes_keep_a_gpu_less_node_visible_but_not_crash_looping(default: Rendered) -> None:
    container = default.container
    readiness, liveness, startup = (container[p] for p in ("readinessProbe", "livenessProbe", "startupProbe"))
    # /health (503 without NVML/GPUs) only decides readiness; restarts are decided on "/".
    assert readiness["httpGet"] == {"path": "/health", "port": "metrics", "scheme": "HTTP"}
    assert liveness["httpGet"]["path"] == "/"
    assert startup["httpGet"]["path"] == "/"
    for probe in (readiness, liveness, startup):
        assert probe["timeoutSeconds"] >= 5
        assert probe["failureThreshold"] >= 3
    # a restart needs minutes of failures, not seconds
    assert liveness["periodSeconds"] * liveness["failureThreshold"] >= 120
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 120


def test_default_schedules_on_gpu_nodes_and_tolerates_the_gpu_taint(default: Rendered) -> None:
    terms = default.pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # One term per way a provider marks a GPU node (any one qualifies); tests/platform/test_placement.py
    # shows the real scheduler placing one pod on each such node and none elsewhere.
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [e]} for e in [
        {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]},
        {"key": "feature.node.kubernetes.io/pci-10de.present", "operator": "In", "values": ["true"]},
        {"key": "feature.node.kubernetes.io/pci-0302_10de.present", "operator": "In", "values": ["true"]},
        {"key": "feature.node.kubernetes.io/pci-0300_10de.present", "operator": "In", "values": ["true"]},
        {"key": "cloud.google.com/gke-accelerator", "operator": "Exists"},
        {"key": "kubernetes.azure.com/accelerator", "operator": "In", "values": ["nvidia"]},
        {"key": "accelerator", "operator": "In", "values": ["nvidia"]},
        {"key": "karpenter.k8s.aws/instance-gpu-manufacturer", "operator": "In", "values": ["nvidia"]},
    ]]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in default.pod_spec["tolerations"]


def test_default_daemonset_settings(default: Rendered) -> None:
    daemonset = default.one("DaemonSet")
    assert daemonset["metadata"]["namespace"] == NAMESPACE
    assert daemonset["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    assert daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    assert default.pod_spec["priorityClassName"] == "system-node-critical"
    assert "runtimeClassName" not in default.pod_spec
    resources = default.container["resources"]
    assert resources["limits"]["memory"] == "256Mi"
    assert resources["requests"]["memory"] and resources["requests"]["cpu"]
    # the selector must not contain labels that change on upgrade (selectors are immutable)
    selector = daemonset["spec"]["selector"]["matchLabels"]
    assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}
    assert default.container["image"] == "ghcr.io/gpu-pod-exporter/gpu-pod-exporter:0.1.0"
    assert default.container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]


def test_rbac_grants_exactly_get_list_watch_on_pods_and_namespaces(default: Rendered) -> None:
    role = default.one("ClusterRole")
    rules = role["rules"]
    assert len(rules) == 1
    assert rules[0]["apiGroups"] == [""]
    assert sorted(rules[0]["resources"]) == ["namespaces", "pods"]
    assert sorted(rules[0]["verbs"]) == ["get", "list", "watch"]
    binding = default.one("ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "gpu-pod-exporter"
    }
    account = default.one("ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert default.pod_spec["serviceAccountName"] == account["metadata"]["name"]
    assert account["automountServiceAccountToken"] is False
    assert not default.all("Role") and not default.all("RoleBinding")


def test_service_exposes_the_metrics_port(default: Rendered) -> None:
    service = default.one("Service")
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9400, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["spec"]["selector"] == default.one("DaemonSet")["spec"]["selector"]["matchLabels"]
    assert "internalTrafficPolicy" not in service["spec"]
    local = render({"service": {"internalTrafficPolicy": "Local"}}).one("Service")
    assert local["spec"]["internalTrafficPolicy"] == "Local"


# --- Prometheus Operator objects --------------------------------------------------------------


def test_servicemonitor_needs_the_crd_api_or_force(default: Rendered) -> None:
    assert "ServiceMonitor" not in default.kinds()
    assert "No ServiceMonitor was created" in default.notes
    with_api = render(api_versions=MONITORING_APIS)
    assert with_api.one("ServiceMonitor")
    forced = render({"serviceMonitor": {"force": True}})
    assert forced.one("ServiceMonitor") == with_api.one("ServiceMonitor")


def test_servicemonitor_honours_exporter_labels_and_drops_the_exporter_pod_labels() -> None:
    rendered = render({"serviceMonitor": {"additionalLabels": {"release": "kube-prometheus-stack"}}},
                      api_versions=MONITORING_APIS)
    monitor = rendered.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    service_labels = rendered.one("Service")["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service_labels.items()
    endpoint, = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics" and endpoint["scheme"] == "http"
    assert endpoint["interval"] == "15s" and endpoint["scrapeTimeout"] == "10s"
    assert endpoint["relabelings"][0] == {"action": "labeldrop", "regex": "(pod|namespace|container)"}
    assert "tlsConfig" not in endpoint and "basicAuth" not in endpoint


def test_servicemonitor_passes_user_relabelings_after_the_chart_ones() -> None:
    relabel = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
    drop = {"sourceLabels": ["__name__"], "regex": "DCGM_FI_DEV_MEM_CLOCK", "action": "drop"}
    values = {"serviceMonitor": {"force": True, "relabelings": [relabel], "metricRelabelings": [drop],
                                 "dropTargetWorkloadLabels": False}}
    endpoint, = render(values).one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["relabelings"] == [relabel]
    assert endpoint["metricRelabelings"] == [drop]


def test_servicemonitor_off_renders_none_even_with_the_crd() -> None:
    rendered = ci("no-servicemonitor", api_versions=MONITORING_APIS)
    assert "ServiceMonitor" not in rendered.kinds()
    assert "PrometheusRule" not in rendered.kinds()
    assert "No ServiceMonitor was created" not in rendered.notes


# --- web security -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls_basic_auth() -> Rendered:
    return ci("tls-basic-auth")


def test_tls_and_basic_auth_write_an_exporter_toolkit_web_config(tls_basic_auth: Rendered) -> None:
    config = web_config(tls_basic_auth)
    tls = config["tls_server_config"]
    tls_mount = tls_basic_auth.mounts["tls"]["mountPath"]
    assert tls["cert_file"] == f"{tls_mount}/tls.crt"
    assert tls["key_file"] == f"{tls_mount}/tls.key"
    assert tls["min_version"] == "TLS12"
    assert "client_ca_file" not in tls
    assert tls_basic_auth.volumes["tls"]["secret"]["secretName"] == "gpu-pod-exporter-tls"
    users = config["basic_auth_users"]
    assert users["admin"] == "$2b$10$qApXqyAISfd8C9VD.50doOU4s2Z9hePLvMA/RZDu1MvmXtsnprHG."
    # the plain password was hashed by Helm's htpasswd (bcrypt) and still verifies
    assert bcrypt.checkpw(b"scrape-password", users["prometheus"].encode())
    assert config["http_server_config"]["headers"] == {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "deny"}


def test_web_config_is_mounted_and_passed_to_the_exporter(tls_basic_auth: Rendered) -> None:
    mount = tls_basic_auth.mounts["web-config"]
    assert "subPath" not in mount and mount["readOnly"] is True
    assert tls_basic_auth.env["DCGM_EXPORTER_WEB_CONFIG_FILE"] == f"{mount['mountPath']}/web-config.yml"
    assert tls_basic_auth.volumes["web-config"]["secret"]["secretName"] == "gpu-pod-exporter-web-config"
    annotations = tls_basic_auth.one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/web-config" in annotations


def test_basic_auth_switches_probes_to_tcp(tls_basic_auth: Rendered) -> None:
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert tls_basic_auth.container[probe]["tcpSocket"] == {"port": "metrics"}
        assert "httpGet" not in tls_basic_auth.container[probe]


def test_tls_without_client_certificates_probes_over_https() -> None:
    rendered = render({"web": {"tls": {"enabled": True, "existingSecret": "exporter-cert"}}})
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert rendered.container[probe]["httpGet"]["scheme"] == "HTTPS"
    assert rendered.container["readinessProbe"]["httpGet"]["path"] == "/health"


def test_servicemonitor_scrapes_with_tls_and_the_generated_credentials(tls_basic_auth: Rendered) -> None:
    monitor = tls_basic_auth.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    endpoint, = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["tlsConfig"] == {
        "serverName": f"gpu-pod-exporter.{NAMESPACE}.svc",
        "ca": {"secret": {"name": "gpu-pod-exporter-tls", "key": "ca.crt"}},
    }
    credentials = tls_basic_auth.one("Secret", "gpu-pod-exporter-scrape-credentials")
    assert endpoint["basicAuth"] == {
        "username": {"name": "gpu-pod-exporter-scrape-credentials", "key": "username"},
        "password": {"name": "gpu-pod-exporter-scrape-credentials", "key": "password"},
    }
    assert secret_text(credentials, "username") == "prometheus"
    assert secret_text(credentials, "password") == "scrape-password"


def test_mtls_verifies_clients_against_the_ca_secret_and_probes_tcp() -> None:
    rendered = ci("mtls")
    tls = web_config(rendered)["tls_server_config"]
    assert tls["client_auth_type"] == "RequireAndVerifyClientCert"
    assert tls["client_ca_file"] == f"{rendered.mounts['client-ca']['mountPath']}/ca.crt"
    assert rendered.volumes["client-ca"]["secret"]["secretName"] == "scrape-client-ca"
    assert rendered.container["readinessProbe"]["tcpSocket"] == {"port": "metrics"}
    endpoint, = rendered.one("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["tlsConfig"]["keySecret"] == {"name": "prometheus-scrape-client", "key": "tls.key"}
    assert "basicAuth" not in endpoint


def test_client_ca_from_the_server_secret_reuses_its_mount() -> None:
    values = {"web": {"tls": {"enabled": True, "existingSecret": "cert", "clientAuthType": "VerifyClientCertIfGiven"}}}
    rendered = render(values)
    tls = web_config(rendered)["tls_server_config"]
    assert tls["client_ca_file"] == f"{rendered.mounts['tls']['mountPath']}/ca.crt"
    assert "client-ca" not in rendered.volumes
    # a client certificate is optional here, so the kubelet can still probe over HTTPS
    assert rendered.container["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"


def test_existing_web_config_secret_is_used_as_is() -> None:
    values = {"web": {"existingConfigSecret": "my-web-config", "probeMode": "tcp"}}
    rendered = render(values)
    assert not [s for s in rendered.all("Secret") if s["metadata"]["name"].endswith("web-config")]
    assert rendered.volumes["web-config"]["secret"]["secretName"] == "my-web-config"
    assert rendered.env["DCGM_EXPORTER_WEB_CONFIG_FILE"].endswith("/web/web-config.yml")
    assert rendered.container["livenessProbe"]["tcpSocket"] == {"port": "metrics"}


# --- process attribution --------------------------------------------------------------------------


def test_process_attribution_adds_host_pid_and_the_host_proc_read_only() -> None:
    rendered = ci("process-attribution")
    assert rendered.pod_spec["hostPID"] is True
    assert rendered.volumes["host-proc"]["hostPath"] == {"path": "/proc", "type": "Directory"}
    mount = rendered.mounts["host-proc"]
    assert mount["readOnly"] is True
    env = rendered.env
    assert env["GPU_POD_EXPORTER_PROCESS_ATTRIBUTION"] == "true"
    assert env["GPU_POD_EXPORTER_PROC_ROOT"] == mount["mountPath"]
    assert env["GPU_POD_EXPORTER_PROCESS_METRICS"] == "true"
    # still no capability: /proc/<pid>/cgroup is world-readable
    assert rendered.container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "WARNING: processAttribution.enabled=true" in rendered.notes


# --- counters ---------------------------------------------------------------------------------------


def test_custom_counters_replace_the_default_csv(default: Rendered) -> None:
    rendered = ci("custom-counters")
    csv = rendered.one("ConfigMap", "gpu-pod-exporter-counters")["data"]["counters.csv"]
    assert csv.splitlines() == [
        "# Only what our dashboards use.",
        "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).",
        "DCGM_FI_DEV_FB_USED,  gauge, Framebuffer memory used (in MiB).",
    ]
    assert "subPath" not in rendered.mounts["counters"]
    assert rendered.env["DCGM_EXPORTER_COLLECTORS"] == default.env["DCGM_EXPORTER_COLLECTORS"]

    def checksum(r: Rendered) -> str:
        return str(r.one("DaemonSet")["spec"]["template"]["metadata"]["annotations"]["checksum/counters"])

    assert checksum(rendered) != checksum(default)  # editing the CSV rolls the pods


def test_existing_counters_configmap_is_mounted_instead() -> None:
    rendered = render({"counters": {"existingConfigMap": "site-counters", "existingConfigMapKey": "gpu.csv"}})
    # No counters ConfigMap of our own (dashboard ConfigMaps are unrelated).
    assert not [cm for cm in rendered.all("ConfigMap") if "counters" in cm["metadata"]["name"]]
    assert rendered.volumes["counters"]["configMap"]["name"] == "site-counters"
    assert rendered.env["DCGM_EXPORTER_COLLECTORS"].endswith("/counters/gpu.csv")


# --- networking -------------------------------------------------------------------------------------


def test_host_network_uses_cluster_dns_and_the_configured_port() -> None:
    rendered = ci("hostnetwork")
    assert rendered.pod_spec["hostNetwork"] is True
    assert rendered.pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert rendered.pod_spec["runtimeClassName"] == "nvidia"
    assert rendered.container["ports"][0]["containerPort"] == 9401
    assert rendered.env["DCGM_EXPORTER_LISTEN"] == ":9401"
    assert rendered.one("Service")["spec"]["ports"][0]["port"] == 9401
    assert "WARNING: hostNetwork=true" in rendered.notes


def test_network_policy_admits_only_the_configured_peers_on_the_metrics_port() -> None:
    policy = ci("networkpolicy").one("NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    rule, = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert rule["from"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        },
        {"ipBlock": {"cidr": "10.0.0.0/8"}},
    ]
    assert "NetworkPolicy" not in render().kinds()


# --- users, scheduling and overrides -------------------------------------------------------------


def test_without_kubernetes_the_exporter_runs_non_root_without_api_access() -> None:
    rendered = ci("without-kubernetes")
    assert rendered.pod_spec["securityContext"] == {"runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True}
    assert "pod-resources" not in rendered.volumes
    assert rendered.env["DCGM_EXPORTER_KUBERNETES"] == "false"
    assert "DCGM_POD_RESOURCES_KUBELET_SOCKET" not in rendered.env
    assert "ClusterRole" not in rendered.kinds()
    assert rendered.pod_spec["automountServiceAccountToken"] is False


def test_run_as_switch_and_pod_security_context_merge() -> None:
    non_root = render({"runAs": "nonRoot", "podSecurityContext": {"supplementalGroups": [44]}})
    assert non_root.pod_spec["securityContext"] == {
        "runAsUser": 10001, "runAsGroup": 10001, "runAsNonRoot": True, "supplementalGroups": [44]
    }
    assert non_root.env["DCGM_EXPORTER_KUBERNETES"] == "true"  # attribution stays on, as asked
    pinned = render({"podSecurityContext": {"runAsUser": 0, "runAsGroup": 44}})
    assert pinned.pod_spec["securityContext"]["runAsGroup"] == 44


def test_affinity_override_and_extra_tolerations() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "cloud.google.com/gke-accelerator", "operator": "Exists"}]}]}}}
    toleration = {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoExecute"}
    node_selector = {"kubernetes.io/os": "linux"}
    rendered = render({"affinity": affinity, "tolerations": [toleration], "nodeSelector": node_selector})
    assert rendered.pod_spec["affinity"] == affinity
    assert rendered.pod_spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}, toleration
    ]
    assert rendered.pod_spec["nodeSelector"] == {"kubernetes.io/os": "linux"}
    one_label = render({"gpuNodeAffinity": {"key": "example.com/gpu", "values": ["yes", "true"]}})
    assert one_label.pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "example.com/gpu", "operator": "In", "values": ["yes", "true"]}]}]}
    anywhere = render({"gpuNodeAffinity": {"enabled": False}, "gpuToleration": False})
    assert "affinity" not in anywhere.pod_spec and "tolerations" not in anywhere.pod_spec


def test_extra_env_replaces_chart_variables_and_extras_are_passed_through() -> None:
    values = {
        "extraEnv": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}, {"name": "DCGM_EXPORTER_DEBUG", "value": "1"}],
        "extraArgs": ["--kubernetes-enable-pod-uid"],
        "extraVolumes": [{"name": "gke-nvidia", "hostPath": {"path": "/home/kubernetes/bin/nvidia"}}],
        "extraVolumeMounts": [{"name": "gke-nvidia", "mountPath": "/usr/local/nvidia", "readOnly": True}],
        "podLabels": {"team": "infra"},
        "podAnnotations": {"example.com/owner": "infra"},
        "imagePullSecrets": [{"name": "registry"}],
    }
    rendered = render(values)
    assert rendered.env["NVIDIA_VISIBLE_DEVICES"] == "0,1"
    assert rendered.env["DCGM_EXPORTER_DEBUG"] == "1"
    assert rendered.container["args"] == ["--kubernetes-enable-pod-uid"]
    assert rendered.mounts["gke-nvidia"]["mountPath"] == "/usr/local/nvidia"
    assert rendered.volumes["gke-nvidia"]["hostPath"]["path"] == "/home/kubernetes/bin/nvidia"
    template = rendered.one("DaemonSet")["spec"]["template"]
    assert template["metadata"]["labels"]["team"] == "infra"
    assert template["metadata"]["annotations"]["example.com/owner"] == "infra"
    assert rendered.pod_spec["imagePullSecrets"] == [{"name": "registry"}]


def test_kubernetes_options_become_comma_separated_variables() -> None:
    values = {"kubernetes": {"gpuIdType": "device-name", "enablePodLabels": True,
                             "podLabelAllowlistRegex": ["^app$", "^team\\..*"], "enablePodUID": True,
                             "nvidiaResourceNames": ["example.com/gpu"], "teamLabelSources": ["namespace:owner"],
                             "podResources": {"hostPath": "/var/snap/microk8s/common/var/lib/kubelet/pod-resources",
                                              "readOnly": False}}}
    rendered = render(values)
    env = rendered.env
    assert env["DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"] == "device-name"
    assert env["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"] == "^app$,^team\\..*"
    assert env["DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"] == "true"
    assert env["NVIDIA_RESOURCE_NAMES"] == "example.com/gpu"
    assert env["GPU_POD_EXPORTER_TEAM_LABEL_SOURCES"] == "namespace:owner"
    by_env = {option.env: option for option in OPTIONS}
    for name in ("DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX", "GPU_POD_EXPORTER_TEAM_LABEL_SOURCES"):
        by_env[name].parse(env[name])  # the exporter accepts what the chart writes
    assert rendered.volumes["pod-resources"]["hostPath"]["path"].startswith("/var/snap/microk8s")
    assert rendered.mounts["pod-resources"]["readOnly"] is False


def test_names_namespace_and_image_overrides() -> None:
    rendered = render({"fullnameOverride": "gpu-exp", "namespaceOverride": "observability",
                       "image": {"registry": "", "repository": "registry.example.com/gpe",
                                 "digest": "sha256:" + "a" * 64}}, name="other")
    daemonset = rendered.one("DaemonSet")
    assert daemonset["metadata"]["name"] == "gpu-exp"
    assert {obj["metadata"].get("namespace") for obj in rendered.objects} == {"observability", None}
    assert rendered.container["image"] == "registry.example.com/gpe@sha256:" + "a" * 64
    assert rendered.one("ClusterRoleBinding")["subjects"][0]["namespace"] == "observability"


def test_simulate_mode_is_passed_and_warned_about() -> None:
    rendered = render({"exporter": {"simulate": "default"}})
    assert rendered.env["GPU_POD_EXPORTER_SIMULATE"] == "default"
    assert "SIMULATED" in rendered.notes
