from pathlib import Path

from bench import scenarios
from simulator.kube_scenario import load_kubernetes_section
from simulator.scenario import load_scenario


def test_gpu_only_scenario_loads_with_realistic_latency(tmp_path: Path):
    path = scenarios.write_scenario(tmp_path, 64)
    scenario = load_scenario(str(path))
    assert len(scenario.gpus) == 64
    assert scenario.latency_profile == "realistic"
    assert scenario.latency["nvmlDeviceGetComputeRunningProcesses_v3"] > 0
    assert all(gpu.processes for gpu in scenario.gpus)
    assert load_kubernetes_section(path) is None


def test_every_pod_holds_a_replica_and_runs_a_process_on_that_gpu(tmp_path: Path):
    path = scenarios.write_scenario(tmp_path, 8, 110)
    section = load_kubernetes_section(path)
    assert section is not None
    assert len(section.pods) == 110
    gpu_pids = {gpu.index: {process.pid for process in gpu.processes} for gpu in load_scenario(str(path)).gpus}
    for pod in section.pods:
        (container,) = pod.containers
        (ref,) = container.gpus
        assert ref.replica is not None
        assert set(container.pids) <= gpu_pids[ref.gpu]
    assert {ref.gpu for pod in section.pods for ref in pod.containers[0].gpus} == set(range(8))


def test_the_exporters_copy_has_the_same_gpus_without_the_cluster(tmp_path: Path):
    full = scenarios.write_scenario(tmp_path, 8, 110)
    gpus_only = scenarios.write_scenario(tmp_path, 8, 110, kubernetes=False)
    assert full != gpus_only
    assert load_kubernetes_section(gpus_only) is None
    assert load_scenario(str(full)).gpus == load_scenario(str(gpus_only)).gpus
