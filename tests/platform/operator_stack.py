"""The Prometheus Operator on the test cluster, and the Prometheus and Alertmanager it configures, as processes.

kwok runs no containers, so the StatefulSets the operator creates never start Prometheus or
Alertmanager. What those pods would run is in the objects the operator writes, and that is what this
module reads and runs:

* the Secret ``prometheus-<name>`` (key ``prometheus.yaml.gz``): the scrape, rule and alerting
  configuration generated from the ServiceMonitors and the Prometheus resource;
* the ConfigMaps ``prometheus-<name>-rulefiles-<n>``: the PrometheusRules, one file each, that the
  pod mounts under ``/etc/prometheus/rules/<configmap>/``;
* the Secret ``alertmanager-<name>-generated`` (key ``alertmanager.yaml.gz``): the Alertmanager
  configuration with every AlertmanagerConfig's routes and receivers merged in.

The edits made before running them are the ones a pod's surroundings make, each listed in the
``Rewrite`` returned (the tests print it):

1. **Addresses.** A scrape or Alertmanager target the operator's Kubernetes discovery finds is a
   pod IP that kwok assigned (10.2.x.y: nothing listens there), and a webhook URL names a Service
   (``<name>.<namespace>.svc``) that no DNS here resolves. The API server refuses to store a
   loopback address in Endpoints or EndpointSlices ("may not be in the loopback range"), so the
   objects cannot point at the processes instead. Each discovered target is therefore pointed at
   the loopback address of the process standing in for its pod by two relabel rules appended at the
   END of the job's ``relabel_configs`` (after the operator's own rules and the chart's): ``instance``
   keeps the discovered ``<pod IP>:<port>`` (the value it has in a cluster), then ``__address__``
   becomes ``127.0.0.1:<port>``. Every label a series gets is the one it gets in a cluster. The
   webhook URL's host and port become the remediator's loopback address.
2. **Paths.** ``rule_files`` name the pod's mount points; they are replaced by the directory where
   the same ConfigMaps' files are written.
3. **The config reloader's expansion.** prometheus-config-reloader, the sidecar that hands the
   Secret to Prometheus, expands ``$(VAR)`` from its environment (``$(POD_NAME)`` in the replica
   external label, ``$(SHARD)`` in the sharding rules); done here with the values of the first pod
   of shard 0.

Service discovery itself is not edited: the Prometheus resource's own ``apiserverConfig`` field
makes the operator write ``api_server``, a bearer-token file and the CA into every
``kubernetes_sd_configs`` entry, so Prometheus lists and watches this cluster's Endpoints with a
ServiceAccount token of its own, as it does in-cluster.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import re
import subprocess
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from devcluster import build
from devcluster.api import Api
from devcluster.control_plane import Cluster
from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.prometheus import PrometheusHarness

OPERATOR_MODULE = "github.com/prometheus-operator/prometheus-operator"
RULES_MOUNT = "/etc/prometheus/rules/"  # pkg/prometheus RulesDir in the operator's source
#: The CRDs installed: what the chart creates and the test declares, plus PodMonitor and Probe, which
#: the operator's Prometheus controller watches unconditionally. ScrapeConfig, PrometheusAgent and
#: ThanosRuler are optional to the operator (it starts those controllers only when their CRD is
#: served) and take a third of the install time, so they are left out.
CRDS = ("alertmanagerconfigs", "alertmanagers", "podmonitors", "probes", "prometheuses", "prometheusrules",
        "servicemonitors")
_ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def operator_source() -> Path:
    """The pinned operator module's source in the Go module cache (``go mod download`` puts it there if
    the build did not already); its CRDs come from there, the same release as the binary."""
    go = build.check_go()
    version = build.pinned_version("prometheus-operator", OPERATOR_MODULE)
    proc = subprocess.run([go, "mod", "download", "-json", f"{OPERATOR_MODULE}@{version}"],
                          cwd=build.TOOLS / "prometheus-operator", capture_output=True, text=True, check=False)
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or "Dir" not in info:
        raise build.BuildError(f"go mod download {OPERATOR_MODULE}@{version} failed: "
                               f"{info.get('Error') or proc.stderr.strip()}")
    return Path(info["Dir"])


def crd_files() -> list[Path]:
    """The operator's CRDs as its release ships them (``example/prometheus-operator-crd``: the
    AlertmanagerConfig in v1alpha1 only; the ``-full`` variant adds v1beta1 behind a conversion webhook
    that nothing runs here)."""
    directory = operator_source() / "example" / "prometheus-operator-crd"
    return [directory / f"monitoring.coreos.com_{plural}.yaml" for plural in CRDS]


def install_crds(admin: Api, files: list[Path]) -> list[str]:
    """Create the CRDs (the API server parses the YAML itself); returns their names."""
    names = []
    for path in files:
        created = admin.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                path.read_bytes(), "application/yaml")
        names.append(created["metadata"]["name"])
    return names


class OperatorProcess:
    """The operator binary against the API server, with the admin client certificate (it manages
    StatefulSets, Secrets and ConfigMaps of the namespaces it is given; its own RBAC is not under test)."""

    def __init__(self, binary: Path, cluster: Cluster, workdir: Path, namespaces: list[str]) -> None:
        self.log_path = workdir / "operator.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(binary), f"--apiserver={cluster.server}", f"--ca-file={cluster.ca_file}",
             f"--cert-file={cluster.admin_cert}", f"--key-file={cluster.admin_key}",
             f"--web.listen-address=127.0.0.1:{free_port()}", f"--namespaces={','.join(namespaces)}",
             "--log-level=info"],
            stdout=self._log, stderr=subprocess.STDOUT)

    def log(self, lines: int = 60) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def assert_running(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"the operator exited with {self.process.returncode}:\n{self.log()}")

    def stop(self) -> None:
        stop_process(self.process)
        self._log.close()


def secret_file(admin: Api, namespace: str, name: str, key: str) -> bytes | None:
    """One key of a Secret, base64-decoded and gunzipped when its name ends in .gz; None while absent."""
    secrets = admin.get(f"/api/v1/namespaces/{namespace}/secrets?fieldSelector=metadata.name%3D{name}")["items"]
    data = (secrets[0].get("data") or {}).get(key) if secrets else None
    if data is None:
        return None
    raw = base64.b64decode(data)
    return gzip.decompress(raw) if key.endswith(".gz") else raw


def generated_prometheus(admin: Api, namespace: str, name: str) -> str | None:
    """The configuration text the operator generated for Prometheus ``name`` (before the reloader's expansion)."""
    raw = secret_file(admin, namespace, f"prometheus-{name}", "prometheus.yaml.gz")
    return raw.decode() if raw is not None else None


def generated_alertmanager(admin: Api, namespace: str, name: str) -> dict[str, Any] | None:
    raw = secret_file(admin, namespace, f"alertmanager-{name}-generated", "alertmanager.yaml.gz")
    return yaml.safe_load(raw) if raw is not None else None


def write_rule_files(admin: Api, namespace: str, name: str, directory: Path) -> list[Path]:
    """The operator's rule ConfigMaps of Prometheus ``name`` as the pod mounts them: <dir>/<configmap>/<key>."""
    written = []
    maps = admin.get(f"/api/v1/namespaces/{namespace}/configmaps"
                     f"?labelSelector=prometheus-name%3D{name}")["items"]
    for config_map in maps:
        folder = directory / config_map["metadata"]["name"]
        folder.mkdir(parents=True, exist_ok=True)
        for key, text in (config_map.get("data") or {}).items():
            (folder / key).write_text(text, encoding="utf-8")
            written.append(folder / key)
    return written


@dataclass
class Rewrite:
    """A generated configuration after the documented edits, and the list of edits."""

    config: dict[str, Any]
    edits: list[str] = field(default_factory=list)


def expand_reloader_env(text: str, env: Mapping[str, str]) -> tuple[str, list[str]]:
    """``$(VAR)`` replaced from ``env`` as prometheus-config-reloader does; an unknown name is an error
    (the reloader refuses such a config too)."""
    seen: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match[1]
        if name not in env:
            raise KeyError(f"the generated configuration references $({name}), which the reloader's env lacks")
        seen.append(f"$({name}) -> {env[name]!r}")
        return env[name]

    return _ENV_REFERENCE.sub(replace, text), sorted(set(seen))


def address_rules(loopback: str) -> list[dict[str, Any]]:
    """Keep the discovered address as ``instance``, then scrape ``loopback`` instead."""
    return [{"source_labels": ["__address__"], "target_label": "instance"},
            {"target_label": "__address__", "replacement": loopback}]


def rewrite_prometheus(text: str, *, env: Mapping[str, str], loopbacks: Mapping[str, str],
                       alertmanager: str, rules_dir: Path) -> Rewrite:
    """The operator's Prometheus configuration with the edits of the module docstring.

    ``loopbacks`` maps a scrape job name to the address of the process behind its targets; every
    other job is left as generated (its targets are unreachable here). ``alertmanager`` is where every
    discovered Alertmanager is reached.
    """
    expanded, expansions = expand_reloader_env(text, env)
    config = yaml.safe_load(expanded)
    result = Rewrite(config, [f"reloader expansion {e}" for e in expansions])
    jobs = {job["job_name"]: job for job in config.get("scrape_configs") or []}
    for job_name, loopback in loopbacks.items():
        if job_name not in jobs:
            raise KeyError(f"the operator generated no scrape job {job_name!r}; jobs: {sorted(jobs)}")
        jobs[job_name].setdefault("relabel_configs", []).extend(address_rules(loopback))
        result.edits.append(f"scrape job {job_name}: targets -> {loopback} (instance keeps the discovered address)")
    for i, am in enumerate((config.get("alerting") or {}).get("alertmanagers") or []):
        am.setdefault("relabel_configs", []).extend(address_rules(alertmanager))
        result.edits.append(f"alerting.alertmanagers[{i}]: targets -> {alertmanager}")
    rule_files = config.get("rule_files") or []
    for i, pattern in enumerate(rule_files):
        if pattern.startswith(RULES_MOUNT):
            rule_files[i] = str(rules_dir / pattern[len(RULES_MOUNT):])
            result.edits.append(f"rule_files[{i}]: {pattern} -> {rule_files[i]}")
    return result


def rewrite_alertmanager(config: Mapping[str, Any], services: Mapping[str, str]) -> Rewrite:
    """The operator's Alertmanager configuration with each webhook URL whose host is a Service in
    ``services`` (``<name>.<namespace>.svc``) pointed at that Service's loopback stand-in."""
    result = Rewrite(copy.deepcopy(dict(config)))
    for receiver in result.config.get("receivers") or []:
        for webhook in receiver.get("webhook_configs") or []:
            url = urllib.parse.urlsplit(webhook["url"])
            if url.hostname in services:
                webhook["url"] = urllib.parse.urlunsplit(url._replace(netloc=services[url.hostname]))
                result.edits.append(f"receiver {receiver['name']}: {url.geturl()} -> {webhook['url']}")
    return result


class GeneratedPrometheus(PrometheusHarness):
    """The e2e harness's Prometheus process, run with a given configuration instead of its own."""

    def __init__(self, config: dict[str, Any], binary: Path) -> None:
        super().__init__([], prometheus_binary=str(binary))
        self.generated = config

    def config(self) -> dict[str, Any]:
        return self.generated
