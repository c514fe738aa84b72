"""``gpu-pod-exporter --simulate`` shows pods, namespaces, containers and teams out of the box.

Process attribution is off, as in a real install, unless asked for: the test runs both ways.

The default scenario's ``kubernetes:`` section describes the node (see its comments): a training
job on GPUs 0-3, three inference pods time-slicing GPU 4, a sweep on GPU 5 whose team comes from
its own label, and a process on GPU 7 that belongs to no pod.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.attribution_modes import attribution_modes, process_families, served_names
from tests.support.exporter_process import running_exporter
from tests.support.polling import wait_for

GIB_IN_MIB = 1024.0


@attribution_modes
def test_default_scenario_shows_pod_labels(process_attribution: bool) -> None:
    """Plain ``--simulate`` serves what a default install serves (allocation labels and teams); with
    ``--kubernetes-process-attribution`` also each container's memory and the memory nobody holds."""
    args = ["--simulate", *(["--kubernetes-process-attribution"] if process_attribution else [])]
    with running_exporter(args) as exporter:
        exporter.wait_healthy()

        def attributed() -> bool:
            memory = exporter.samples("DCGM_EXP_CONTAINER_FB_USED")
            info = exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO")
            return ((len(memory) == 8 or not process_attribution) and len(info) == 8
                    and all("team" in labels for labels, _ in info))

        wait_for(attributed, 20.0, "the simulated pods with teams" + (" and memory" if process_attribution else ""))
        by_gpu = {labels["gpu"]: labels for labels, _ in exporter.samples("DCGM_FI_DEV_GPU_UTIL")}
        assert {labels["hostname"] for labels in by_gpu.values()} == {"hgx-node-01"}
        for gpu in "0123":
            assert (by_gpu[gpu]["pod"], by_gpu[gpu]["namespace"], by_gpu[gpu]["container"], by_gpu[gpu]["team"]) == (
                f"llm-finetune-worker-{gpu}", "ml-training", "trainer", "research")
        assert (by_gpu["5"]["pod"], by_gpu["5"]["team"]) == ("hparam-sweep-7", "recsys")
        for gpu in "467":  # shared (4) and free (6, 7): no workload labels at all
            assert not {"pod", "namespace", "container", "team"} & set(by_gpu[gpu]), gpu

        sharing = sorted((labels["pod"], labels["container"], labels["vgpu"])
                         for labels, _ in exporter.samples("DCGM_EXP_GPU_ALLOCATION_INFO") if labels["gpu"] == "4")
        assert sharing == [("chat-api-0", "server", "0"), ("embedder-0", "embedder", "1"),
                           ("reranker-0", "reranker", "2")]  # the sidecar holds no GPU and is not listed
        allocated = {labels["gpu"]: value for labels, value in exporter.samples("DCGM_EXP_GPU_ALLOCATED")}
        assert allocated == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 1.0, "4": 1.0, "5": 1.0, "6": 0.0, "7": 0.0}
        if process_attribution:
            memory = {labels["pod"]: value for labels, value in exporter.samples("DCGM_EXP_CONTAINER_FB_USED")
                      if labels["gpu"] == "4"}
            assert memory == {"chat-api-0": 18 * GIB_IN_MIB, "embedder-0": 6 * GIB_IN_MIB,
                              "reranker-0": 3 * GIB_IN_MIB}
            leftover = {labels["gpu"]: value for labels, value in exporter.samples("DCGM_EXP_UNATTRIBUTED_FB_USED")}
            assert leftover["7"] == 9 * GIB_IN_MIB and sum(leftover.values()) == leftover["7"]
        else:  # as a default install: nothing that needs NVML's process lists and the host's /proc
            assert process_families(served_names(exporter.metrics())) == set()
        assert exporter.samples("gpu_pod_exporter_kubernetes_pods") == [({}, 8.0)]

        match = re.search(r"kubelet_socket=(\S+)", exporter.log())
        assert match is not None, exporter.log()
        workdir = Path(match.group(1)).parents[1]
        assert workdir.is_dir()
    assert exporter.process.returncode == 0
    assert not workdir.exists()  # the simulated node's socket, kubeconfig and /proc are cleaned up
