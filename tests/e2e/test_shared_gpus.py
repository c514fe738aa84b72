"""``gpu-pod-exporter --simulate shared-gpus``: who is busy on a shared GPU, from the user's side.

The scenario (exporter/simulate/scenarios/shared-gpus.yaml): GPU 0 time-sliced by three pods at
~60/25/5 %, GPU 1 shared through MPS by clients at 50 % and 30 % plus a solver step 20 s of every
minute and a pod that never runs anything, GPU 2 used 15 % by a process outside Kubernetes.
The whole chain runs: the fake NVML's per-process samples, the sampler, the fake kubelet and API
server, /proc cgroups, the join, the exposition.
"""

from __future__ import annotations

from tests.e2e.exporter_process import ExporterProcess, running_exporter, wait_for

ARGS = ["--simulate", "shared-gpus", "--collect-interval", "250", "--process-interval", "1000"]


def by_pod(exporter: ExporterProcess, name: str, gpu: str) -> dict[str, float]:
    return {labels["pod"]: value for labels, value in exporter.samples(name) if labels["gpu"] == gpu}


def by_gpu(exporter: ExporterProcess, name: str) -> dict[str, float]:
    return {labels["gpu"]: value for labels, value in exporter.samples(name)}


def test_each_pod_on_a_shared_gpu_shows_its_own_utilization() -> None:
    with running_exporter(ARGS) as exporter:
        exporter.wait_healthy()
        pods = {"chat-api-0", "embedder-0", "notebook-0"}
        wait_for(lambda: set(by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0")) == pods
                 and all(by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0").values())
                 and "team" in exporter.samples("DCGM_EXP_CONTAINER_SM_UTIL")[0][0], 30.0,
                 "per-pod SM utilization of the time-sliced GPU, with teams")

        # Time-sliced GPU: each pod its own load; the GPU is busy for about the sum of theirs.
        sm = by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0")
        assert 50 <= sm["chat-api-0"] <= 70 and 17 <= sm["embedder-0"] <= 33 and 1 <= sm["notebook-0"] <= 9, sm
        [chat] = [labels for labels, _ in exporter.samples("DCGM_EXP_CONTAINER_SM_UTIL")
                  if labels.get("pod") == "chat-api-0"]
        assert (chat["namespace"], chat["container"], chat["team"], chat["modelName"]) == (
            "inference", "server", "serving", "NVIDIA H100 80GB HBM3")
        assert by_pod(exporter, "DCGM_EXP_CONTAINER_DEC_UTIL", "0")["chat-api-0"] > 0  # it decodes video
        assert by_pod(exporter, "DCGM_EXP_CONTAINER_MEM_UTIL", "0")["chat-api-0"] > 0
        device = by_gpu(exporter, "DCGM_FI_DEV_GPU_UTIL")
        assert abs(device["0"] - sum(sm.values())) <= 15, (device, sm)  # instant reading vs 1 s averages

        # MPS: the clients' kernels overlap, so their figures add up to more than the GPU's busy time.
        mps = by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "1")
        assert set(mps) == {"sim-a-0", "sim-b-0", "solver-0", "debug-0"}
        assert (mps["sim-a-0"], mps["sim-b-0"], mps["debug-0"]) == (50.0, 30.0, 0.0), mps
        assert device["1"] < sum(mps.values())

        # The GPU no pod holds: a host process's use is the share no container accounts for.
        unattributed = by_gpu(exporter, "DCGM_EXP_UNATTRIBUTED_SM_UTIL")
        assert unattributed == {"0": 0.0, "1": 0.0, "2": 15.0}
        assert by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "2") == {}

        # The families move with the workloads: chat-api-0's noisy load gives new values read after read.
        seen = {sm["chat-api-0"]}
        wait_for(lambda: seen.add(by_pod(exporter, "DCGM_EXP_CONTAINER_SM_UTIL", "0")["chat-api-0"]) or len(seen) >= 3,
                 20.0, "chat-api-0's utilization to change between process reads")
        assert not [labels for labels, _ in exporter.samples("gpu_pod_exporter_field_unsupported")
                    if labels["field"].startswith("DCGM_EXP_")]
