"""The exporter's command line: the configuration is resolved once, before anything is wired."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from exporter.composition import build_app, kubernetes_settings, resolve
from exporter.config import load_config
from exporter.hub import Hub
from exporter.kube.settings import ApiSettings
from exporter.metrics.counters import load_counters


@pytest.mark.parametrize(("flags", "reads_process_lists"), [
    ([], False),
    (["-k"], False),
    (["-k", "--kubernetes-process-metrics"], True),  # per-container memory comes from the process lists
    (["-k", "--kubernetes-virtual-gpus"], True),  # so do each sharing pod's own GPU_UTIL and FB_USED
    (["-k", "--kubernetes-virtual-gpus", "--kubernetes-process-attribution", "false"], True),  # implied anyway
    (["--kubernetes-process-metrics"], False),  # without -k there is no pod to give them to
])
def test_settings_that_others_imply_are_part_of_the_configuration_every_component_reads(
        flags: list[str], reads_process_lists: bool) -> None:
    loaded = load_config([*flags, "--address", "127.0.0.1:0"], {})
    resolved = resolve(loaded).config
    assert resolved.process_attribution is reads_process_lists
    app = build_app(loaded, load_counters(None))
    try:
        assert app.config == resolved  # what the app and its parts were wired with, fixed before wiring
        assert (app.sampler.process_interval_s is not None) is reads_process_lists
    finally:
        app.stop()


def test_resolving_a_configuration_that_implies_nothing_keeps_it() -> None:
    loaded = load_config(["-k", "--address", "127.0.0.1:0"], {})
    assert resolve(loaded).config is loaded and resolve(loaded).simulation is None


class _Recording:
    """A source that records what the hub held when it was installed."""

    def __init__(self) -> None:
        self.hub: Hub | None = None
        self.cache_existed = False

    def install(self, hub: Hub) -> None:
        self.hub = hub
        self.cache_existed = hub.cache is not None and hub.sampler is not None
        hub.add_service(lambda: None, lambda: None)


def test_every_source_installs_into_the_hub_before_the_app_is_built_in_one_order(tmp_path: Path) -> None:
    loaded = load_config(["-k", "--hpc-job-mapping-dir", str(tmp_path), "--address", "127.0.0.1:0"], {})
    recording = _Recording()
    app = build_app(loaded, load_counters(None), extra=[recording])
    try:
        assert recording.hub is app.hub and recording.cache_existed  # the cache came first
        starts = [start for start, _stop in app.hub.services(before_nvml=False)]
        owners = [type(getattr(start, "__self__", None)).__name__ for start in starts]
        # Kubernetes, then HPC jobs, then health's event watcher, then the prepared source, in install order
        assert owners == ["KubernetesWiring", "HpcJobMapping", "EventWatcher", "NoneType"]
    finally:
        app.stop()


def test_each_kubernetes_component_is_given_only_its_own_group_of_settings() -> None:
    """The kubelet client, the watches, the workload factory, process attribution and the series each
    read one small group, filled at the root from the settings of the same names."""
    config = load_config(["-k", "--kubernetes-virtual-gpus", "--node-name", "n1", "-o",
                          "--kubernetes-pod-label-allowlist-regex", "^app$"], {})
    settings = kubernetes_settings(resolve(config).config)
    assert settings.api == ApiSettings(node_name="n1", kubeconfig="", kubeconfig_allow_exec=False)
    assert settings.series.kubernetes_virtual_gpus and settings.series.use_old_namespace
    assert settings.workloads.kubernetes_pod_label_allowlist_regex == ("^app$",)
    assert settings.kubelet.pod_resources_socket == config.pod_resources_socket
    assert {field.name for field in dataclasses.fields(settings.series)} == {
        "use_old_namespace", "kubernetes_enable_pod_uid", "kubernetes_enable_dra", "kubernetes_virtual_gpus",
        "process_metrics"}
