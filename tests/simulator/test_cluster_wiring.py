"""``--simulate`` with a ``kubernetes:`` section: the exporter points itself at the simulated node."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from exporter.app import App
from exporter.composition import build_app, resolve
from exporter.config import Config, ConfigError, load_config
from exporter.metrics.counters import load_counters
from simulator.cluster_wiring import plan_simulated_cluster, scenario_devices, scenario_migs
from simulator.entry import PlannedRun
from simulator.kube_scenario import load_kubernetes_section
from simulator.scenario import SCENARIO_DIR, load_scenario
from tests.attribution_modes import attribution_modes, process_families, served_names
from tests.support.polling import wait_for

SCENARIO = """\
seed: 3
gpu_count: 2
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  1: {processes: [{pid: 4242, used_memory: 2GiB}]}
kubernetes:
  node: sim-7
  namespaces: [{name: ml, labels: {team: research}}]
  pods:
    - name: trainer-0
      namespace: ml
      containers: [{name: trainer, gpus: [1], pids: [4242]}]
"""


def _scenario(tmp_path: Path, text: str = SCENARIO) -> str:
    path = tmp_path / "node.yaml"
    path.write_text(text)
    return str(path)


def _config(tmp_path: Path, *args: str, environ: dict[str, str] | None = None, text: str = SCENARIO) -> Config:
    return load_config(["--simulate", _scenario(tmp_path, text), "--address", "127.0.0.1:0", *args], environ or {})


def exposition_with(app: App, *parts: str, deadline_s: float = 15.0) -> str:
    """The app's cached text exposition, once it contains every one of ``parts`` (polled)."""

    def current() -> str | None:
        text = app.cache.current.body(False, False).decode()
        return text if all(part in text for part in parts) else None

    return wait_for(current, deadline_s, f"{parts} in the exposition")


def _with_process_attribution(text: str) -> str:
    """The scenario, asking for process attribution in its ``kubernetes:`` section."""
    return text.replace("kubernetes:\n", "kubernetes:\n  process_attribution: true\n", 1)


def _served_lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(name + "{")]


@attribution_modes
def test_the_app_runs_against_the_simulated_node(tmp_path: Path, process_attribution: bool) -> None:
    text = _with_process_attribution(SCENARIO) if process_attribution else SCENARIO
    app = build_app(_config(tmp_path, "-c", "100", text=text), load_counters(None))
    assert app.config.kubernetes and app.config.node_name == "sim-7"
    workdir = Path(app.config.pod_resources_socket).parents[1]
    app.start()
    try:
        # What a default install shows: the allocated GPU with its pod, container and team.
        allocated = exposition_with(app, 'pod="trainer-0"', 'team="research"', 'DCGM_EXP_GPU_ALLOCATED{gpu="1"')
        assert [line.endswith(" 1.0") for line in _served_lines(allocated, "DCGM_EXP_GPU_ALLOCATED")
                if 'gpu="1"' in line] == [True]
        [temperature] = [line for line in _served_lines(allocated, "DCGM_FI_DEV_GPU_TEMP") if 'gpu="1"' in line]
        assert all(part in temperature for part in (
            'container="trainer"', 'namespace="ml"', 'pod="trainer-0"', 'team="research"', 'hostname="sim-7"'))
        assert Path(app.config.pod_resources_socket).is_socket()
        if process_attribution:
            def container_memory() -> str | None:
                text = exposition_with(app, 'DCGM_EXP_CONTAINER_FB_USED{gpu="1"')
                lines = _served_lines(text, "DCGM_EXP_CONTAINER_FB_USED")
                # The process list is read on its own interval: the container's memory follows it.
                return text if len(lines) == 1 and lines[0].endswith(" 2048.0") else None

            text = wait_for(container_memory, 15.0, "trainer-0's 2 GiB process in DCGM_EXP_CONTAINER_FB_USED")
            [memory] = _served_lines(text, "DCGM_EXP_CONTAINER_FB_USED")
            assert 'pod="trainer-0"' in memory and 'container="trainer"' in memory
        else:  # nothing read from NVML's process lists or the simulated /proc
            assert process_families(served_names(app.cache.current.body(False, False).decode())) == set()
    finally:
        app.stop()
    assert not workdir.exists()  # socket, kubeconfig and fake /proc are gone with the app


def _planned(tmp_path: Path, *args: str, environ: dict[str, str] | None = None, text: str = SCENARIO) -> Config:
    """The configuration the simulated node leads to, as resolved before wiring (the node itself is planned,
    never started)."""
    resolved = resolve(_config(tmp_path, *args, environ=environ, text=text))
    assert isinstance(resolved.simulation, PlannedRun)  # what simulator.entry hands the exporter
    cluster = resolved.simulation.cluster
    if cluster is not None:
        assert cluster.section.node == resolved.config.node_name  # the fake API server's pods are there
        resolved.simulation.discard()  # removes the planned directory
        assert not cluster.workdir.exists()
    return resolved.config


def test_a_choice_the_user_made_wins(tmp_path: Path) -> None:
    config = _planned(tmp_path, "--node-name", "mine", "--pod-resources-kubelet-socket", "/run/kubelet.sock",
                      environ={"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "device-name"})
    assert (config.node_name, config.kubernetes_gpu_id_type, config.pod_resources_socket) == (
        "mine", "device-name", "/run/kubelet.sock")
    assert config.kubeconfig.endswith("/kubeconfig")  # not chosen: simulated
    assert config.process_attribution is False  # as a real install: the scenario does not ask for it


def test_ambient_kubeconfig_and_node_name_do_not_pull_the_demo_away(tmp_path: Path) -> None:
    config = _planned(tmp_path, environ={"KUBECONFIG": "/home/me/.kube/config", "NODE_NAME": "laptop"})
    assert config.kubeconfig != "/home/me/.kube/config" and config.node_name == "sim-7"


def test_the_charts_node_paths_do_not_pull_the_demo_away(tmp_path: Path) -> None:
    """The Helm chart (simulator) sets the node's kubelet socket and /proc paths: the simulated
    node's own must win, or the demo would mix simulated GPUs with the real kubelet's device IDs."""
    chart_environment = {"DCGM_EXPORTER_KUBERNETES": "true",
                         "DCGM_POD_RESOURCES_KUBELET_SOCKET": "/var/lib/kubelet/pod-resources/kubelet.sock",
                         "GPU_POD_EXPORTER_PROC_ROOT": "/host/proc", "GPU_POD_EXPORTER_PROCESS_ATTRIBUTION": "false"}
    config = _planned(tmp_path, environ=chart_environment)
    assert config.pod_resources_socket.endswith("/pod-resources/kubelet.sock")
    assert not config.pod_resources_socket.startswith("/var/lib/kubelet")
    assert config.proc_root != "/host/proc" and config.kubernetes
    assert config.process_attribution is False  # a choice about what to collect: the user's (the chart's) wins


def test_kubernetes_mode_off_keeps_the_node_unsimulated(tmp_path: Path) -> None:
    config = _config(tmp_path, "-k", "false")
    planned, runner = plan_simulated_cluster(config, load_scenario(config.simulate))
    assert runner is None  # nothing to start
    assert not planned.kubernetes and not planned.process_attribution
    assert sorted(path.name for path in tmp_path.iterdir()) == ["node.yaml"]  # no simulated node's directory


@pytest.mark.parametrize(("scenario_says", "user_says", "expected"), [
    (None, None, False),  # a real install's default
    ("true", None, True),  # the scenario asks for it
    ("false", None, False),
    (None, ["--kubernetes-process-attribution"], True),  # the user asks for it
    ("true", ["--kubernetes-process-attribution", "false"], False),  # the user's choice wins
    (None, ["--kubernetes-process-metrics"], True),  # per-process metrics need it: combined, not fought
])
def test_process_attribution_is_off_unless_the_scenario_or_the_user_asks(
        tmp_path: Path, scenario_says: str | None, user_says: list[str] | None, expected: bool) -> None:
    text = SCENARIO if scenario_says is None else SCENARIO.replace(
        "kubernetes:\n", f"kubernetes:\n  process_attribution: {scenario_says}\n", 1)
    config = _planned(tmp_path, *(user_says or []), text=text)
    assert config.process_attribution is expected
    environ = {"GPU_POD_EXPORTER_PROCESS_ATTRIBUTION": "false"}  # as the chart's default values set it
    assert _planned(tmp_path, environ=environ, text=text).process_attribution is False


def test_only_the_built_in_scenarios_about_processes_ask_for_process_attribution() -> None:
    """The README's promise: plain ``--simulate`` (and every other built-in scenario) runs as a real
    install does; shared-gpus and alert-zoo need the per-process families and say so."""
    asking = {path.stem for path in SCENARIO_DIR.glob("*.yaml")
              if (section := load_kubernetes_section(path)) is not None and section.process_attribution}
    assert asking == {"shared-gpus", "alert-zoo"}


def test_a_bad_process_attribution_value_names_file_line_and_key(tmp_path: Path) -> None:
    text = SCENARIO.replace("kubernetes:\n", "kubernetes:\n  process_attribution: sometimes\n", 1)
    with pytest.raises(ConfigError) as error:
        build_app(_config(tmp_path, text=text), load_counters(None))
    assert "node.yaml:7: kubernetes.process_attribution: expected true or false, got 'sometimes'" in str(
        error.value)


def test_a_scenario_without_a_section_simulates_no_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where a simulated node would put its socket and /proc
    tempfile.tempdir = None
    try:
        app = build_app(_config(tmp_path, "-c", "100", text=SCENARIO.split("kubernetes:", maxsplit=1)[0]),
                        load_counters(None))
        app.start()
        try:
            text = exposition_with(app, 'DCGM_FI_DEV_GPU_TEMP{gpu="1"')
        finally:
            app.stop()
    finally:
        tempfile.tempdir = None
    assert "pod=" not in text and "gpu_pod_exporter_kubelet_up" not in text  # no node, no attribution
    assert not app.config.kubernetes and app.config.pod_resources_socket == Config().pod_resources_socket
    assert sorted(path.name for path in tmp_path.iterdir()) == ["node.yaml"]  # no simulated node's directory


def test_a_reference_to_a_missing_gpu_is_a_scenario_error_at_its_line(tmp_path: Path) -> None:
    text = SCENARIO.replace("gpus: [1]", "gpus: [5]")
    with pytest.raises(ConfigError) as error:
        build_app(_config(tmp_path, text=text), load_counters(None))
    assert "node.yaml:12: kubernetes.pods[0].containers[0].gpus[0]" in str(error.value)
    assert "GPU 5 does not exist" in str(error.value)


def test_scenario_devices_are_what_the_fake_library_reports(tmp_path: Path) -> None:
    devices = scenario_devices(load_scenario(_scenario(tmp_path)))
    assert [(device.index, device.minor) for device in devices] == [(0, 0), (1, 1)]
    assert all(device.uuid.startswith("GPU-") and device.pci_bus_id.startswith("00000000:") for device in devices)


MIG_SCENARIO = """\
seed: 5
gpu_count: 2
gpu_defaults: {model: H100-SXM5-80GB}
gpus:
  0:
    mig:
      - {profile: 3g.40gb, processes: [{pid: 7101, used_memory: 20GiB}]}
      - 1g.10gb
kubernetes:
  namespaces: [{name: lab, labels: {team: research}}]
  pods:
    - name: notebook-0
      namespace: lab
      containers: [{name: jupyter, gpus: [{gpu: 0, mig: 1}], pids: [7101]}]
"""


@attribution_modes
def test_mig_instances_of_the_scenario_are_handed_out_by_their_mig_uuid(tmp_path: Path,
                                                                         process_attribution: bool) -> None:
    scenario = load_scenario(_scenario(tmp_path, MIG_SCENARIO))
    migs = scenario_migs(scenario)
    assert [(mig.gpu_instance_id, mig.profile) for mig in migs] == [(1, "3g.40gb"), (7, "1g.10gb")]
    text = _with_process_attribution(MIG_SCENARIO) if process_attribution else MIG_SCENARIO
    app = build_app(_config(tmp_path, "-c", "100", text=text), load_counters(None))
    app.start()
    try:
        if not process_attribution:
            text = exposition_with(app, 'pod="notebook-0"', 'team="research"', 'DCGM_EXP_GPU_ALLOCATED{gpu="0"')
            assert app.sampler.snapshot.migs == migs
            allocated = [('GPU_I_ID="1"' in line, line.endswith(" 1.0"))
                         for line in _served_lines(text, "DCGM_EXP_GPU_ALLOCATED") if 'gpu="0"' in line]
            assert allocated == [(True, True), (False, False)]  # one series per GPU instance; nb holds GI 1
            fb = _served_lines(text, "DCGM_FI_DEV_FB_USED")
            assert [('pod="notebook-0"' in line, 'GPU_I_ID="1"' in line) for line in fb if 'gpu="0"' in line] == [
                (True, True), (False, False)]
            assert process_families(served_names(text)) == set()
            return
        # The memory needs the API's pods, the payload's pod label the kubelet's allocation: wait for both.
        def attributed() -> str | None:
            text = exposition_with(app, 'DCGM_EXP_CONTAINER_FB_USED{gpu="0"', 'DCGM_EXP_GPU_ALLOCATION_INFO{gpu="0"')
            memory = [line for line in text.splitlines() if line.startswith("DCGM_EXP_CONTAINER_FB_USED{")]
            return text if [line.endswith(" 20480.0") for line in memory] == [True] else None

        text = wait_for(attributed, 15.0, "notebook-0's memory and allocation")
        assert app.sampler.snapshot.migs == migs  # the fake library made exactly these MIG devices
    finally:
        app.stop()
    [memory] = [line for line in text.splitlines() if line.startswith("DCGM_EXP_CONTAINER_FB_USED{")]
    assert 'GPU_I_PROFILE="3g.40gb",GPU_I_ID="1"' in memory and 'pod="notebook-0"' in memory
    assert memory.endswith(" 20480.0")
    fb = [line for line in text.splitlines() if line.startswith('DCGM_FI_DEV_FB_USED{gpu="0"')]
    assert [('pod="notebook-0"' in line, 'GPU_I_ID="1"' in line) for line in fb] == [(True, True), (False, False)]
