"""The Prometheus Operator end to end (issue 27, item 2): the chart's ServiceMonitor, PrometheusRules and
AlertmanagerConfig turned into configuration by the real operator, and run by real Prometheus 3 and
Alertmanager processes with exactly that configuration.

On the session's control plane: the operator's CRDs (from its pinned Go module), the operator binary
against the API server, a Prometheus and an Alertmanager resource selecting the chart's objects, and
``helm install`` of the chart with the ServiceMonitor, the PrometheusRules, the dashboards and the
remediator (enforce mode, with its AlertmanagerConfig). kwok runs no containers, so the exporter (the
simulated GPUs of fixtures/operator-node.yaml, a fake kubelet socket, the real API server with the
chart's exporter token), the remediator (the chart's policy, token and ServiceAccount) and Prometheus
and Alertmanager (the operator's Secrets) run as processes. The edits made to the generated
configuration are listed in tests/platform/operator_stack.py and printed by the first test: targets
and the webhook pointed at those processes' loopback addresses, rule-file paths, the config
reloader's $(VAR) expansion. Everything else, service discovery included, is the operator's.

What is asserted:

* the PrometheusRules load into Prometheus 3 (every group of the chart, every rule healthy);
* the Xid fault fires GpuXidFatal, the operator-generated route delivers it to the remediator, and
  the real Node gets its taint; the latency of each step is printed (docs/remediation.md, "Latency");
* the labels a GPU series carries for ``honorLabels`` true and false (and with the chart's
  ``dropTargetWorkloadLabels`` off), printed as a table (docs/install.md, "honorLabels").

Timers shortened for the test, through the resources' own fields only: the ServiceMonitor's
interval (``serviceMonitor.interval: 1s``), the Prometheus resource's ``evaluationInterval: 1s``, the
AlertmanagerConfig's ``groupWait: 1s`` (``remediation.alertmanagerConfig.groupWait``).
"""

from __future__ import annotations

import copy
import os
import shutil
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import build
from devcluster.api import Api
from devcluster.control_plane import Cluster
from exporter.remediate.nodestate import TAINT_KEY
from simulator.fakekubelet import FakeContainer, FakeKubelet, FakePod
from tests.deploy.chart_support import CHART_DIR
from tests.platform import operator_stack as ops
from tests.platform.support import ensure_namespace, exists, poll
from tests.platform.test_remediation import kwok_node, our_taint
from tests.remediate.support import RemediatorProcess
from tests.support.alertmanager import AlertmanagerHarness
from tests.support.exporter_process import ExporterProcess
from tests.support.kube_cluster import scenario_gpus
from tests.support.ports import free_port

SCENARIO = Path(__file__).resolve().parents[1] / "fixtures" / "operator-node.yaml"
GPUS = scenario_gpus(SCENARIO)
NODE = "operator-gpu-0"
NAMESPACE = "gpu-monitoring-op"  # the chart's release
MONITORING = "monitoring-op"  # the Prometheus and Alertmanager resources
WORKLOADS = "ml-op"
RELEASE = "gpe"
FULLNAME = f"{RELEASE}-gpu-pod-exporter"
REMEDIATOR = f"{FULLNAME}-remediate"
NAME = "gpu"  # of the Prometheus and the Alertmanager resource
SELECT = {"release": "monitoring"}  # what their selectors match, as kube-prometheus-stack's `release`
EXPORTER_JOB = f"serviceMonitor/{NAMESPACE}/{FULLNAME}/0"
REMEDIATOR_JOB = f"serviceMonitor/{NAMESPACE}/{REMEDIATOR}/0"
WEBHOOK_TOKEN = "operator-test-webhook-token"
SD_ROLE = "operator-test-prometheus"  # Prometheus's service-discovery ClusterRole (and its binding)
READ = ["get", "list", "watch"]

VALUES: dict[str, Any] = {
    "nodeSelector": {"kubernetes.io/hostname": NODE},  # one exporter pod, on the node the process stands for
    "serviceMonitor": {"additionalLabels": SELECT, "interval": "1s", "scrapeTimeout": "1s"},
    "prometheusRule": {"additionalLabels": SELECT},
    "remediation": {
        "enabled": True, "mode": "enforce", "webhook": {"token": WEBHOOK_TOKEN},
        "alertmanagerConfig": {"additionalLabels": SELECT, "groupWait": "1s"},
        "serviceMonitor": {"additionalLabels": SELECT, "interval": "1s"},
        "prometheusRule": {"additionalLabels": SELECT},
    },
}

# The variants of the label table: chart values (helm upgrade --reuse-values --set ...).
DEFAULTS = "honorLabels=true (default)"
VARIANTS: dict[str, dict[str, bool]] = {
    DEFAULTS: {"honorLabels": True, "dropTargetWorkloadLabels": True},
    "honorLabels=false": {"honorLabels": False, "dropTargetWorkloadLabels": True},
    "honorLabels=true, dropTargetWorkloadLabels=false": {"honorLabels": True, "dropTargetWorkloadLabels": False},
    "honorLabels=false, dropTargetWorkloadLabels=false": {"honorLabels": False, "dropTargetWorkloadLabels": False},
}
# What the chart's NOTES (helm upgrade's output) say for each variant: the measured table, in words.
NOTES_SAY = {
    "honorLabels=false": "serviceMonitor.honorLabels=false changes no GPU label",
    "honorLabels=true, dropTargetWorkloadLabels=false": "a GPU no pod uses carries the operator's",
    "honorLabels=false, dropTargetWorkloadLabels=false": "renames the\n         exporter's pod/namespace/container "
                                                         "labels to exported_pod",
}
TABLE_LABELS = ("pod", "namespace", "container", "team", "exported_pod", "exported_namespace", "exported_container")


@dataclass
class Stages:
    """When each step of the fault chain was first seen (time.monotonic), by a poller running beside
    the tests: Prometheus scrapes the exporter, the exporter exposes the Xid, Prometheus fires
    GpuXidFatal, Alertmanager holds it, the remediator has received it, the node carries the taint."""

    seen: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass
class Stack:
    admin: Api
    helm: Callable[..., Any]
    workdir: Path
    operator: ops.OperatorProcess
    exporter: ExporterProcess
    remediator: RemediatorProcess
    alertmanager: AlertmanagerHarness
    prometheus: ops.GeneratedPrometheus
    prometheus_rewrite: ops.Rewrite
    alertmanager_rewrite: ops.Rewrite
    stages: Stages
    exporter_pod: str
    start_prometheus: Callable[[], tuple[ops.GeneratedPrometheus, ops.Rewrite]]


class TokenKubeconfig:
    """What RemediatorProcess asks of its API: a kubeconfig, here with a ServiceAccount's token."""

    def __init__(self, write: Callable[[str, Path], Path], token: str) -> None:
        self.write, self.token = write, token

    def write_kubeconfig(self, path: Path) -> Path:
        return self.write(self.token, path)


def prometheus_rbac(admin: Api) -> None:
    """Prometheus's own identity for service discovery: what kube-prometheus grants it."""
    admin.apply_create(f"/api/v1/namespaces/{MONITORING}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prometheus"}})
    admin.apply_create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": SD_ROLE},
        "rules": [{"apiGroups": [""], "resources": ["services", "endpoints", "pods"], "verbs": READ},
                  {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": READ}]})
    admin.apply_create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": SD_ROLE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SD_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": MONITORING}]})


def monitoring_resources(admin: Api, cluster: Cluster, token_file: Path) -> None:
    """A Prometheus and an Alertmanager resource as a kube-prometheus-stack user has them, selecting
    the chart's objects by label in the chart's namespace."""
    in_chart_namespace = {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    everywhere = [{"operator": "Exists"}]  # kwok "runs" their pods on any node; nothing starts
    admin.create(f"/apis/monitoring.coreos.com/v1/namespaces/{MONITORING}/prometheuses", {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus", "metadata": {"name": NAME},
        "spec": {
            "version": f"v{build.release_version('prometheus')}", "replicas": 1, "serviceAccountName": "prometheus",
            "scrapeInterval": "1s", "evaluationInterval": "1s",
            "serviceMonitorSelector": {"matchLabels": SELECT}, "serviceMonitorNamespaceSelector": in_chart_namespace,
            "ruleSelector": {"matchLabels": SELECT}, "ruleNamespaceSelector": in_chart_namespace,
            "alerting": {"alertmanagers": [{"namespace": MONITORING, "name": "alertmanager-operated", "port": "web",
                                            "apiVersion": "v2"}]},
            # Where Prometheus runs outside the cluster: the resource's own field for it.
            "apiserverConfig": {"host": cluster.server,
                                "authorization": {"type": "Bearer", "credentialsFile": str(token_file)},
                                "tlsConfig": {"caFile": str(cluster.ca_file)}},
            "tolerations": everywhere}})
    admin.create(f"/apis/monitoring.coreos.com/v1/namespaces/{MONITORING}/alertmanagers", {
        "apiVersion": "monitoring.coreos.com/v1", "kind": "Alertmanager", "metadata": {"name": NAME},
        "spec": {
            "version": f"v{build.release_version('alertmanager')}", "replicas": 1,
            "alertmanagerConfigSelector": {"matchLabels": SELECT},
            "alertmanagerConfigNamespaceSelector": in_chart_namespace,
            # docs/remediation.md, "Routing": GPU alerts carry their workload's namespace, not the chart's
            "alertmanagerConfigMatcherStrategy": {"type": "None"},
            "tolerations": everywhere}})


def generated_prometheus_with(admin: Api, check: Callable[[dict[str, Any]], bool], what: str) -> str:
    """The operator's Prometheus configuration text, once ``check`` holds for it (parsed)."""
    def ready() -> str | None:
        text = ops.generated_prometheus(admin, MONITORING, NAME)
        return text if text is not None and check(yaml.safe_load(text)) else None

    return str(poll(f"the operator's Prometheus configuration: {what}", ready, deadline_s=180))


def job(config: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((j for j in config.get("scrape_configs") or [] if j["job_name"] == name), None)


def chart_rule_files(admin: Api) -> int:
    return len(admin.get(f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/prometheusrules")["items"])


def metrics_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def watch_stages(stack_parts: dict[str, Any], stages: Stages) -> None:
    """Poll each step of the chain every 0.1 s and note when it is first seen (a background thread)."""
    exporter: ExporterProcess = stack_parts["exporter"]
    prometheus: ops.GeneratedPrometheus = stack_parts["prometheus"]
    alertmanager: AlertmanagerHarness = stack_parts["alertmanager"]
    remediator: RemediatorProcess = stack_parts["remediator"]
    admin: Api = stack_parts["admin"]
    uuid = GPUS[0].uuid

    def scraping() -> bool:
        return bool(prometheus.query(f'up{{job="{FULLNAME}"}} == 1'))

    def xid() -> bool:
        text = metrics_text(f"http://127.0.0.1:{exporter.port}/metrics")
        return any(line.startswith("DCGM_EXP_XID_ERRORS_TOTAL{") and f'UUID="{uuid}"' in line and 'xid="79"' in line
                   for line in text.splitlines())

    def firing() -> bool:
        return any(a["labels"].get("alertname") == "GpuXidFatal" and a["state"] == "firing"
                   for a in prometheus.alerts())

    def in_alertmanager() -> bool:
        return any(a["labels"].get("alertname") == "GpuXidFatal" for a in alertmanager.alerts())

    def received() -> bool:
        return sum(v for labels, v in remediator.samples("gpu_pod_exporter_remediation_alerts_total").items()
                   if dict(labels).get("status") == "firing") > 0

    def tainted() -> bool:
        return our_taint(admin.get(f"/api/v1/nodes/{NODE}")) is not None

    checks = {"scraping": scraping, "xid": xid, "firing": firing, "alertmanager": in_alertmanager,
              "received": received, "tainted": tainted}
    while not stages.stop.is_set() and len(stages.seen) < len(checks):
        for stage, check in checks.items():
            if stage in stages.seen:
                continue
            try:
                if check():
                    stages.seen[stage] = time.monotonic()
            except Exception as exc:  # a transient error while a process starts: kept for the report
                if len(stages.errors) < 20:
                    stages.errors.append(f"{stage}: {exc!r}")
        stages.stop.wait(0.1)


@pytest.fixture(scope="module")
def stack(cluster: Cluster, admin: Api, helm: Callable[..., Any], sa_token: Callable[..., str],
          token_kubeconfig: Callable[[str, Path], Path]) -> Iterator[Stack]:
    try:
        crd_files = ops.crd_files()  # go mod download of the pinned operator module (a no-op once built)
        prometheus_binary = build.build("prometheus")
        alertmanager_binary = build.build("alertmanager")
        operator_binary = build.build("prometheus-operator")
    except build.BuildError as exc:  # no Go, or no module proxy: as the tier does without Go
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{exc}; CI=true requires the platform tier", pytrace=False)
        pytest.skip(str(exc))
    workdir = Path(tempfile.mkdtemp(prefix="gpe-op-"))  # short: the fake kubelet's unix socket lives here
    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, workdir, ignore_errors=True)
        cleanup.callback(_remove_crds, admin)
        crds = ops.install_crds(admin, crd_files)
        poll("the monitoring.coreos.com CRDs are served", lambda: all(_served(admin, name) for name in crds))
        for namespace in (MONITORING, NAMESPACE):
            ensure_namespace(admin, namespace)
            cleanup.callback(admin.delete, f"/api/v1/namespaces/{namespace}")
        ensure_namespace(admin, WORKLOADS, {"team": "research"})
        cleanup.callback(admin.delete, f"/api/v1/namespaces/{WORKLOADS}")
        kwok_node(admin, NODE, gpus=len(GPUS))
        cleanup.callback(admin.delete, f"/api/v1/nodes/{NODE}")
        prometheus_rbac(admin)
        cleanup.callback(admin.delete, f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{SD_ROLE}")
        cleanup.callback(admin.delete, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{SD_ROLE}")
        sd_token = workdir / "prometheus-token"
        sd_token.write_text(sa_token(MONITORING, "prometheus"), encoding="utf-8")

        operator = ops.OperatorProcess(operator_binary, cluster, workdir, [MONITORING, NAMESPACE])
        cleanup.callback(operator.stop)
        monitoring_resources(admin, cluster, sd_token)
        values = workdir / "values.yaml"
        values.write_text(yaml.safe_dump(VALUES), encoding="utf-8")
        helm("install", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "-f", str(values))
        cleanup.callback(helm, "uninstall", RELEASE, "-n", NAMESPACE, check=False)  # the namespace goes next
        operator.assert_running()

        # What the pods would mount: the chart's counters, the remediator's policy and webhook token.
        counters = workdir / "counters.csv"
        counters.write_text(admin.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{FULLNAME}-counters")["data"]
                            ["counters.csv"], encoding="utf-8")
        policy = yaml.safe_load(admin.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps/{REMEDIATOR}")["data"]
                                ["policy.yaml"])
        webhook_token = ops.secret_file(admin, NAMESPACE, f"{REMEDIATOR}-webhook", "token")
        assert webhook_token is not None and webhook_token.decode().strip() == WEBHOOK_TOKEN

        kubelet = FakeKubelet(workdir / "kubelet.sock").start()
        cleanup.callback(kubelet.stop)
        _workload(admin, kubelet, "trainer-0", 0, {})
        _workload(admin, kubelet, "tuner-0", 1, {"team": "vision"})

        remediator = RemediatorProcess(
            workdir / "remediator", TokenKubeconfig(token_kubeconfig, sa_token(NAMESPACE, REMEDIATOR)),  # type: ignore[arg-type]
            policy=policy, token=webhook_token.decode().strip())
        cleanup.callback(remediator.stop)
        remediator.wait_healthy()

        generated_am = poll("the operator's Alertmanager configuration routes to the remediator", lambda: (
            (am := ops.generated_alertmanager(admin, MONITORING, NAME)) is not None
            and any(r["name"].startswith(f"{NAMESPACE}/{REMEDIATOR}/") for r in am.get("receivers") or []) and am),
            deadline_s=180)
        am_rewrite = ops.rewrite_alertmanager(generated_am,
                                              {f"{REMEDIATOR}.{NAMESPACE}.svc": f"127.0.0.1:{remediator.port}"})
        alertmanager = AlertmanagerHarness(am_rewrite.config, binary=str(alertmanager_binary)).start()
        cleanup.callback(alertmanager.stop)

        rules_dir = workdir / "rules"
        exporter_port = free_port()  # known before the exporter starts: Prometheus's configuration names it

        def start_prometheus() -> tuple[ops.GeneratedPrometheus, ops.Rewrite]:
            """Prometheus 3 with the operator's current configuration (after the documented edits)."""
            text = generated_prometheus_with(
                admin, lambda c: job(c, EXPORTER_JOB) is not None and len(c.get("rule_files") or []) > 0,
                f"job {EXPORTER_JOB} and rule files")
            shutil.rmtree(rules_dir, ignore_errors=True)
            files = ops.write_rule_files(admin, MONITORING, NAME, rules_dir)
            assert len(files) == chart_rule_files(admin), files
            rewrite = ops.rewrite_prometheus(
                text, env={"POD_NAME": f"prometheus-{NAME}-0", "SHARD": "0"},
                loopbacks={EXPORTER_JOB: f"127.0.0.1:{exporter_port}", REMEDIATOR_JOB: f"127.0.0.1:{remediator.port}"},
                alertmanager=alertmanager.address, rules_dir=rules_dir)
            return ops.GeneratedPrometheus(rewrite.config, prometheus_binary).start(), rewrite

        poll("the operator has loaded every PrometheusRule of the chart", lambda: _rule_keys(admin)
             == chart_rule_files(admin), deadline_s=180)
        prometheus, prometheus_rewrite = start_prometheus()
        cleanup.callback(prometheus.stop)

        # The exporter last: its scenario's clock (the Xid at 12 s) starts with it, and the poller that
        # times the chain watches from before its first sample.
        exporter = ExporterProcess([
            "--simulate", str(SCENARIO), "-c", "500", "--collectors", str(counters), "-k",
            "--pod-resources-kubelet-socket", str(kubelet.socket_path), "--pod-resources-interval", "1000",
            "--kubeconfig", str(token_kubeconfig(sa_token(NAMESPACE, FULLNAME), workdir / "exporter.kubeconfig")),
            "--node-name", NODE], port=exporter_port)
        cleanup.callback(exporter.stop)
        stages = Stages()
        parts = {"exporter": exporter, "prometheus": prometheus, "alertmanager": alertmanager,
                 "remediator": remediator, "admin": admin}
        watcher = threading.Thread(target=watch_stages, args=(parts, stages), daemon=True)
        watcher.start()
        cleanup.callback(watcher.join, 10)
        cleanup.callback(stages.stop.set)
        exporter.wait_healthy(deadline_s=60)

        exporter_pods = admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=app.kubernetes.io/instance%3D"
                                  f"{RELEASE},app.kubernetes.io/component!%3Dremediate")["items"]
        assert [p["spec"]["nodeName"] for p in exporter_pods] == [NODE], exporter_pods
        yield Stack(admin, helm, workdir, operator, exporter, remediator, alertmanager, prometheus, prometheus_rewrite,
                    am_rewrite, stages, exporter_pods[0]["metadata"]["name"], start_prometheus)


def _served(admin: Api, crd: str) -> bool:
    found = admin.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}")
    conditions = (found.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _rule_keys(admin: Api) -> int:
    maps = admin.get(f"/api/v1/namespaces/{MONITORING}/configmaps?labelSelector=prometheus-name%3D{NAME}")["items"]
    return sum(len(m.get("data") or {}) for m in maps)


def _remove_crds(admin: Api) -> None:
    """Delete the CRDs (and so every object of theirs) and wait until they are gone: later modules of the
    session install the chart, which renders ServiceMonitors only where the API is served."""
    for plural in ops.CRDS:
        admin.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.monitoring.coreos.com")
    poll("the monitoring.coreos.com CRDs are gone", lambda: not any(
        exists(admin, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{p}.monitoring.coreos.com")
        for p in ops.CRDS), deadline_s=180)


def _workload(admin: Api, kubelet: FakeKubelet, name: str, gpu: int, labels: dict[str, str]) -> None:
    """A pod on the GPU node as the API server (a real object) and the kubelet (PodResources) see it."""
    admin.create(f"/api/v1/namespaces/{WORKLOADS}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "registry.invalid/train:1"}]}})
    kubelet.add_pod(FakePod(WORKLOADS, name, (FakeContainer("main", (("nvidia.com/gpu", GPUS[gpu].uuid),)),)))


# ------------------------------------------------------------------------------------------ tests


def test_the_operator_turns_the_charts_objects_into_configuration(stack: Stack) -> None:
    print("\nEdits to the operator's configuration (tests/platform/operator_stack.py):")
    for edit in (*stack.prometheus_rewrite.edits, *stack.alertmanager_rewrite.edits):
        print(f"  - {edit}")
    config = stack.prometheus_rewrite.config
    scrape = job(config, EXPORTER_JOB)
    assert scrape is not None
    assert scrape["honor_labels"] is True
    assert {"action": "labeldrop", "regex": "(pod|namespace|container)"} in scrape["relabel_configs"]
    assert scrape["scrape_interval"] == "1s" and scrape["metrics_path"] == "/metrics"
    # service discovery against this API server, with Prometheus's own token (apiserverConfig)
    sd = scrape["kubernetes_sd_configs"][0]
    assert sd["api_server"] == stack.admin.server and sd["namespaces"] == {"names": [NAMESPACE]}
    am = stack.alertmanager_rewrite.config
    route = next(r for r in am["route"]["routes"] if r["receiver"].startswith(f"{NAMESPACE}/{REMEDIATOR}/"))
    assert route["group_wait"] == "1s"
    # alertmanagerConfigMatcherStrategy None: no namespace matcher narrows the route
    assert not any("namespace" in m for m in route.get("matchers") or []), route
    receiver = next(r for r in am["receivers"] if r["name"] == route["receiver"])
    webhook = receiver["webhook_configs"][0]
    assert webhook["http_config"]["authorization"] == {"type": "Bearer", "credentials": WEBHOOK_TOKEN}
    assert webhook["send_resolved"] is True
    # the rewrite changed exactly the addresses, paths and $(VAR)s it lists, nothing else
    _assert_only_listed_edits(stack)
    # the dashboards, for Grafana's sidecar
    dashboards = stack.admin.get(f"/api/v1/namespaces/{NAMESPACE}/configmaps?labelSelector=grafana_dashboard%3D1")
    assert len(dashboards["items"]) == len(list((CHART_DIR / "files" / "dashboards").glob("*.json")))


def _assert_only_listed_edits(stack: Stack) -> None:
    text = ops.generated_prometheus(stack.admin, MONITORING, NAME)
    assert text is not None
    original = yaml.safe_load(ops.expand_reloader_env(text, {"POD_NAME": f"prometheus-{NAME}-0", "SHARD": "0"})[0])
    rewritten = copy.deepcopy(stack.prometheus_rewrite.config)
    for scrape in rewritten["scrape_configs"]:
        if scrape["job_name"] in (EXPORTER_JOB, REMEDIATOR_JOB):
            added = scrape["relabel_configs"][-2:]
            assert added[0] == {"source_labels": ["__address__"], "target_label": "instance"}, added
            assert added[1]["target_label"] == "__address__", added
            del scrape["relabel_configs"][-2:]
    for am in rewritten["alerting"]["alertmanagers"]:
        del am["relabel_configs"][-2:]
    assert [Path(f).parent.name for f in rewritten.pop("rule_files")] == \
        [Path(f).parent.name for f in original.pop("rule_files")]
    assert rewritten == original
    webhook_edits = stack.alertmanager_rewrite.edits
    assert len(webhook_edits) == 1 and f"{REMEDIATOR}.{NAMESPACE}.svc:9401" in webhook_edits[0], webhook_edits


def test_prometheus_3_loads_every_prometheusrule_of_the_chart(stack: Stack) -> None:
    expected = {group["name"] for rule in stack.admin.get(
        f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/prometheusrules")["items"]
        for group in rule["spec"]["groups"]}
    groups = stack.prometheus.wait_for_rules_evaluated(deadline_s=120)
    assert {g["name"] for g in groups} == expected
    unhealthy = [(g["name"], r["name"], r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert not unhealthy, unhealthy
    rules = sum(len(g["rules"]) for g in groups)
    print(f"\nPrometheus {build.release_version('prometheus')}: {len(groups)} groups, {rules} rules from "
          f"{chart_rule_files(stack.admin)} PrometheusRules, all healthy")


def test_a_fatal_xid_reaches_the_node_through_the_operator_generated_route(stack: Stack) -> None:
    stages = stack.stages
    poll("the node carries the remediator's taint", lambda: "tainted" in stages.seen, deadline_s=180)
    node = stack.admin.get(f"/api/v1/nodes/{NODE}")
    taint = our_taint(node)
    assert taint == {"key": TAINT_KEY, "value": "0", "effect": "NoSchedule"}, node["spec"].get("taints")
    # delivered by the operator-generated route, with its receiver's name
    delivered = [a for a in stack.alertmanager.alerts() if a["labels"]["alertname"] == "GpuXidFatal"]
    assert delivered and all(any(r["name"].startswith(f"{NAMESPACE}/{REMEDIATOR}/") for r in a["receivers"])
                             for a in delivered), delivered
    assert delivered[0]["labels"]["hostname"] == NODE and delivered[0]["labels"]["pod"] == "trainer-0"
    order = ("xid", "firing", "alertmanager", "received", "tainted")
    assert all(s in stages.seen for s in ("scraping", *order)), (stages.seen, stages.errors)
    # the chain is timed from a Prometheus already scraping the exporter (not from its discovery)
    assert stages.seen["scraping"] < stages.seen["xid"], stages.seen
    times = [stages.seen[s] for s in order]
    steps = {"exporter exposes the Xid -> Prometheus fires GpuXidFatal": times[1] - times[0],
             "-> Alertmanager holds it": times[2] - times[1],
             "-> the remediator received it (group_wait 1s)": times[3] - times[2],
             "-> the Node carries the taint": times[4] - times[3]}
    print(f"\nXid -> taint through the operator's configuration: {times[4] - times[0]:.1f} s "
          "(scrape 1s, evaluation 1s, group_wait 1s; each step polled every 0.1 s)")
    for step, seconds in steps.items():
        print(f"  {step}: {seconds:.1f} s")
    assert times == sorted(times), stages.seen


def _gpu_series(prometheus: ops.GeneratedPrometheus) -> dict[str, dict[str, str]]:
    """GPU index -> every label of its DCGM_FI_DEV_GPU_UTIL series."""
    found = prometheus.wait_for(f'DCGM_FI_DEV_GPU_UTIL{{hostname="{NODE}"}}',
                                lambda s: len(s) == len(GPUS), deadline_s=60)
    return {s.labels["gpu"]: s.labels for s in found}


def expected_labels(variant: dict[str, bool], exporter_pod: str) -> dict[str, dict[str, str]]:
    """What docs/install.md ("honorLabels") says each GPU carries: GPU 0 is used by ml-op/trainer-0 (team
    from its namespace), GPU 1 by ml-op/tuner-0 (team from its pod label), GPU 2 by nothing."""
    workload = {"0": ("trainer-0", "research"), "1": ("tuner-0", "vision")}
    target = {"pod": exporter_pod, "namespace": NAMESPACE, "container": "exporter"}
    out = {}
    for gpu in ("0", "1", "2"):
        labels = dict.fromkeys(TABLE_LABELS, "")
        if not variant["dropTargetWorkloadLabels"]:
            labels.update(target)  # the operator's target labels name the exporter pod
        if gpu in workload:
            pod, team = workload[gpu]
            ours = {"pod": pod, "namespace": WORKLOADS, "container": "main"}
            if variant["honorLabels"] or variant["dropTargetWorkloadLabels"]:
                labels.update(ours)  # no target label to collide with, or the exporter's win
            else:
                labels.update({f"exported_{k}": v for k, v in ours.items()})
            labels["team"] = team
        out[gpu] = labels
    return out


def test_the_label_table_for_honor_labels_true_and_false(stack: Stack) -> None:
    rows: list[str] = []
    wrong: list[str] = []
    override = _override_honor_labels(stack.admin)
    for name, variant in VARIANTS.items():
        if name == DEFAULTS:
            prometheus = stack.prometheus
        else:
            honor, drop = (str(variant[k]).lower() for k in ("honorLabels", "dropTargetWorkloadLabels"))
            upgrade = stack.helm("upgrade", RELEASE, str(CHART_DIR), "-n", NAMESPACE, "--reuse-values",
                                 "--set", f"serviceMonitor.honorLabels={honor}",
                                 "--set", f"serviceMonitor.dropTargetWorkloadLabels={drop}")
            if NOTES_SAY[name] not in upgrade.stdout:
                wrong.append(f"{name}: NOTES do not say {NOTES_SAY[name]!r}:\n{upgrade.stdout}")
            generated_prometheus_with(stack.admin, lambda c, v=variant: _matches(job(c, EXPORTER_JOB), v),
                                      f"honor_labels {honor}, labeldrop {drop}")
            prometheus, _ = stack.start_prometheus()
        try:
            series = _gpu_series(prometheus)
        finally:
            if prometheus is not stack.prometheus:
                prometheus.stop()
        measured = {gpu: {k: labels.get(k, "") for k in TABLE_LABELS} for gpu, labels in series.items()}
        if name == DEFAULTS:
            target = _target_labels(stack, series["0"])
        expected = expected_labels(variant, stack.exporter_pod)
        for gpu in sorted(measured):
            use = {"0": "trainer-0 (namespace team)", "1": "tuner-0 (pod team)", "2": "idle"}[gpu]
            cells = " | ".join(measured[gpu][k] or "-" for k in TABLE_LABELS)
            rows.append(f"| {name} | {gpu}: {use} | {cells} |")
            if measured[gpu] != expected[gpu]:
                wrong.append(f"{name}, GPU {gpu}: measured {measured[gpu]}, docs say {expected[gpu]}")
    print("\nLabels of DCGM_FI_DEV_GPU_UTIL scraped through the operator's configuration (Prometheus "
          f"{build.release_version('prometheus')}; exporter pod {stack.exporter_pod}):\n"
          "| ServiceMonitor | GPU | " + " | ".join(TABLE_LABELS) + " |\n|" + "---|" * (len(TABLE_LABELS) + 2) + "\n"
          + "\n".join(rows))
    print(f"Every series also carries the target labels {target} (instance: the exporter pod's address).\n"
          f"overrideHonorLabels: true on the Prometheus resource (chart defaults): {override}")
    assert not wrong, "\n".join(wrong)


def _target_labels(stack: Stack, labels: dict[str, str]) -> dict[str, str]:
    """The labels the operator's relabelling gives every series of the exporter's target."""
    pod = stack.admin.get(f"/api/v1/namespaces/{NAMESPACE}/pods/{stack.exporter_pod}")
    target = {k: labels[k] for k in ("job", "instance", "service", "endpoint")}
    assert target == {"job": FULLNAME, "instance": f"{pod['status']['podIP']}:9400", "service": FULLNAME,
                      "endpoint": "metrics"}
    return target


def _override_honor_labels(admin: Api) -> str:
    """``overrideHonorLabels: true`` on the Prometheus resource turns the chart's honorLabels off and
    changes nothing else of the job: the same configuration as ``honorLabels=false``, whose labels the
    table measures."""
    path = f"/apis/monitoring.coreos.com/v1/namespaces/{MONITORING}/prometheuses/{NAME}"

    def set_override(on: bool) -> dict[str, Any]:
        admin.request("PATCH", path, {"spec": {"overrideHonorLabels": on}}, "application/merge-patch+json")
        text = generated_prometheus_with(admin, lambda c: (job(c, EXPORTER_JOB) or {}).get("honor_labels") is not on,
                                         f"honor_labels {not on}")
        found = job(yaml.safe_load(text), EXPORTER_JOB)
        assert found is not None
        return found

    overridden = set_override(True)
    restored = set_override(False)
    assert restored["honor_labels"] is True
    assert overridden == {**restored, "honor_labels": False}, (overridden, restored)
    return "the generated job differs from the default only in honor_labels: false, i.e. the honorLabels=false row"


def _matches(scrape: dict[str, Any] | None, variant: dict[str, bool]) -> bool:
    if scrape is None:
        return False
    dropping = {"action": "labeldrop", "regex": "(pod|namespace|container)"} in scrape.get("relabel_configs", [])
    return bool(scrape.get("honor_labels", False) == variant["honorLabels"]
                and dropping == variant["dropTargetWorkloadLabels"])


def test_the_operator_accepted_every_object_of_the_chart(stack: Stack) -> None:
    """No ServiceMonitor, PrometheusRule or AlertmanagerConfig of the chart was rejected (the operator
    logs "skipping ..." and records an InvalidConfiguration Warning Event on the object), through every
    upgrade the label table made, and both resources report Reconciled."""
    stack.operator.assert_running()
    refused = [line for line in stack.operator.log(lines=1_000_000).splitlines()
               if "level=warn" in line and "skipping" in line]
    events = [f"{e['involvedObject']['kind']} {e['involvedObject']['name']}: {e['message']}"
              for ns in (NAMESPACE, MONITORING)
              for e in stack.admin.get(f"/api/v1/namespaces/{ns}/events?fieldSelector=reason%3DInvalidConfiguration")
              ["items"]]
    assert not refused and not events, "\n".join([*refused, *events])
    for plural in ("prometheuses", "alertmanagers"):
        resource = stack.admin.get(f"/apis/monitoring.coreos.com/v1/namespaces/{MONITORING}/{plural}/{NAME}")
        conditions = {c["type"]: c["status"] for c in (resource.get("status") or {}).get("conditions") or []}
        assert conditions.get("Reconciled") == "True", (plural, resource.get("status"))
